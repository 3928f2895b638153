"""vllm-slo: load testing and SLO verification for vLLM servers.

The tool on top of four layers (README "Layout"): `vllm_slo` (CLI, run and experiment
orchestration, saved-run commands) imports `reports`, `loadtests` and `servers`, which import
`scenarios`. Installed, the four folders live under this package (`vllm_slo.scenarios`, ...).
"""
