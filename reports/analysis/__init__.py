"""Pure, typed analysis: run metrics, statistics, verdicts, comparisons, summaries. Never
imports `reports.render`; no printing or plotting."""
