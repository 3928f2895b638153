"""vllm-slo: load testing and SLO verification for vLLM servers.

The packages, top to bottom (imports go downhill only; tests/unit/test_layers.py checks it):

- `vllm_slo` itself: the CLI, run and experiment orchestration, tuning, saved-run commands;
- `reports`: rendering (text, HTML, JUnit, Markdown) and reading run folders back;
- `analysis`: run metrics, SLO verdicts, experiment design, comparisons, tuning, summaries;
- `stats`: pure statistics over arrays (numpy and scipy only);
- `loadtests` (the Locust side) and `servers` (launching and watching vLLM, the stand-in);
- `run_folder` (the run folder's format), `scenarios` (models, loader, SLO grammar) and
  `transport` (streaming HTTP, SSE, process groups) at the bottom.

docs/development.md describes the layout.
"""
