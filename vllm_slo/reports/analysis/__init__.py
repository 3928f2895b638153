"""Pure, typed analysis: run metrics, statistics, verdicts, comparisons, trials, summaries.
Never imports `reports.render`; no printing, plotting or file access (tests/unit/test_layers.py).
"""
