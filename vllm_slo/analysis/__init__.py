"""Pure, typed analysis: run metrics, SLO verdicts, client health, comparisons, experiment
design, trials, tuning and summaries, built on `vllm_slo.stats`. Never imports `reports`; no
printing, plotting or file access (tests/unit/test_layers.py).
"""
