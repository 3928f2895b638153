"""From run folders to pages: `render` lays out (text, HTML, JUnit, Markdown), `run_report` /
`experiment_report` / `tune_report` rebuild a folder's outputs, `run_folder_read`, `samples`
and `trial_folders` read folders back. Computes nothing itself: that is `vllm_slo.analysis`
and `vllm_slo.stats`."""
