"""From rows on disk to verdicts and pages: `analysis` (pure, typed) computes, `render` lays
out, `run_report` / `experiment_report` rebuild a run folder's outputs. Imports only
`scenarios`."""
