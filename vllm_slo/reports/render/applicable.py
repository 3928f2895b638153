"""Which latency rows a run's human-readable pages show: the metrics that can apply to it.

summary.json keeps every metric (machine readers rely on its keys); the terminal table,
summary.md and report.html leave out the rows that cannot apply to the run, which would read
`n/a` or repeat another row:

- `ttft_answer` and `reasoning_time` when no measured successful request reasoned (a model
  without a reasoning parser): the first answer chunk is then the first chunk, so
  `ttft_answer` is a copy of `ttft`, and `reasoning_time` has no sample;
- `itl_token` when no request came with per-chunk usage (`continuous_usage_stats`): it has
  no sample, and the stream line and a warning say why.

A metric an SLO names is always shown, whatever the run's facts.
"""

from __future__ import annotations

from collections.abc import Mapping

from vllm_slo.analysis.summary import MetricEntry, RunSummaryDocument
from vllm_slo.scenarios.metrics import LATENCY_METRICS

#: the rows that apply only when a request reasoned
REASONING_METRICS = ("ttft_answer", "reasoning_time")
#: the row that applies only when some request carried per-chunk usage
PER_TOKEN_METRIC = "itl_token"


def _has_samples(summary: RunSummaryDocument, metric: str) -> bool:
    entry = summary.metrics.get(metric)
    return entry is not None and entry.count > 0


def reasoned(summary: RunSummaryDocument) -> bool:
    """Whether any measured successful request had a reasoning chunk (without stream facts:
    whether `reasoning_time` has a sample)."""
    if summary.stream is None:
        return _has_samples(summary, "reasoning_time")
    return summary.stream.reasoning_requests > 0


def counted_chunk_tokens(summary: RunSummaryDocument) -> bool:
    """Whether any measured successful request came with per-chunk usage (without stream
    facts: whether `itl_token` has a sample)."""
    if summary.stream is None:
        return _has_samples(summary, PER_TOKEN_METRIC)
    return summary.stream.chunks > 0


def inapplicable_metrics(summary: RunSummaryDocument) -> frozenset[str]:
    """The latency metrics whose rows cannot apply to this run (none an SLO names)."""
    left_out: set[str] = set()
    if not reasoned(summary):
        left_out.update(REASONING_METRICS)
    if not counted_chunk_tokens(summary):
        left_out.add(PER_TOKEN_METRIC)
    return frozenset(left_out - {slo.rule.metric for slo in summary.slos})


def shown_metrics(summary: RunSummaryDocument,
                  metrics: Mapping[str, MetricEntry] | None = None) -> dict[str, MetricEntry]:
    """`metrics` (the run's own by default; a part's table passes its own) in their order,
    without the rows that cannot apply to the run."""
    left_out = inapplicable_metrics(summary)
    entries = summary.metrics if metrics is None else metrics
    return {name: entry for name, entry in entries.items() if name not in left_out}


def shown_latency_metrics(summary: RunSummaryDocument) -> tuple[str, ...]:
    """The registry's latency metrics that can apply to the run, in its order: the panels of
    the run page's latency distributions."""
    left_out = inapplicable_metrics(summary)
    return tuple(name for name in LATENCY_METRICS if name not in left_out)
