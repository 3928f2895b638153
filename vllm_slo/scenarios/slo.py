"""SLO rules: the small grammar of the `slo:` block, parsed into typed rules in SI units.

    slo:
      ttft: ["p95 < 2s", "p50 < 500ms"]     # latency metrics: ttft itl tpot e2e
      itl: ["p95 < 3x warmup"]              # 3 × the warm-up's own p95, sized at run time
      error_rate: "< 1%"                    # fraction of measured requests that failed
      output_throughput: "> 100 tok/s"      # output tokens per second over the measured window
      request_throughput: "> 2 req/s"
      by_profile:                           # profile: mix — rules for one part's requests
        chat: {itl: ["p99 < 50ms"]}
        long-doc: {ttft: ["p90 < 5s"]}
      by_adapter:                           # traffic.lora — rules for one adapter's requests
        sql: {ttft: ["p95 < 1s"]}
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from vllm_slo.scenarios.metrics import MetricKind, metric_named
from vllm_slo.scenarios.units import parse_duration_s

COMPARATORS = ("<", "<=", ">", ">=")
ADAPTER_PART = "adapter:"  # a part key naming a LoRA adapter's requests (`adapter:sql`)

_LATENCY_RULE = re.compile(r"^\s*(p\d+(?:\.\d+)?|mean)\s*(<=|>=|<|>)\s*(\S+(?:\s*\S+)?)\s*$")
_ERROR_RATE_RULE = re.compile(r"^\s*(<=|<)\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*$")
_RATE_RULE = re.compile(r"^\s*(>=|>|<=|<)\s*(\d+(?:\.\d*)?|\.\d+)\s*(\S+/s)?\s*$")
# `3x warmup`: a threshold sized at run time from the run's own warm-up (the same statistic)
_WARMUP_THRESHOLD = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)\s*x\s*warm-?up$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class SloRule:
    """One SLO: `statistic(metric) comparator threshold`, threshold in SI units.

    A latency rule may be sized from the run's warm-up (`p95 < 3x warmup`): `warmup_factor`
    is set and `threshold` is NaN until `vllm_slo.analysis.warmup_sizing` sizes it from the
    warm-up rows (factor × the warm-up's own statistic). A rule is identified by what was
    written (metric, statistic, comparator, text, part), so a sized rule equals its source."""

    metric: str  # a name in metrics.METRICS
    statistic: str  # "p95", "p99.9", "mean" for latency; "rate" for error_rate; "mean" for rates
    comparator: str  # one of COMPARATORS
    # seconds for latency, fraction for error_rate, per second for rates
    threshold: float = field(compare=False)
    text: str  # as written, for reports
    profile: str | None = None  # a mix's part whose requests this rule judges; None: all
    warmup_factor: float | None = field(default=None, compare=False)
    adapter: str | None = None  # a LoRA mix's adapter (traffic.lora name) it judges; None: all

    @property
    def part(self) -> str | None:
        """Which requests this rule judges, as a key of a run's parts: a mix's part
        (`chat`), an adapter's (`adapter:sql`, see `part_column`), None: all."""
        if self.adapter is not None:
            return f"{ADAPTER_PART}{self.adapter}"
        return self.profile

    @property
    def sized(self) -> bool:
        """The threshold is a number (an absolute rule, or a warm-up rule once sized)."""
        return not math.isnan(self.threshold)

    @property
    def percentile(self) -> float | None:
        return float(self.statistic[1:]) if self.statistic.startswith("p") else None

    @property
    def label(self) -> str:
        part = f"{self.part}: " if self.part else ""
        return f"{part}{self.metric} {self.text.strip()}"

    @property
    def cell(self) -> str:
        """The compared cell this rule reads (`chat:itl.p99`, `error_rate.rate`, ...): the
        spelling `compare.cells` accepts; an adapter's rule: `adapter:sql:ttft.p95`, which
        no comparison reads)."""
        base = f"{self.metric}.{self.statistic}"
        return f"{self.part}:{base}" if self.part else base


def part_column(part: str) -> tuple[str, str]:
    """The samples column and value that select a part's rows: `chat` -> (profile, chat),
    `adapter:sql` -> (adapter, sql)."""
    if part.startswith(ADAPTER_PART):
        return "adapter", part[len(ADAPTER_PART):]
    return "profile", part


def parse_rule(metric: str, text: str) -> SloRule:
    """One rule of `metric` (a name in metrics.METRICS), by the grammar of its kind."""
    kind = metric_named(metric).kind
    if kind is MetricKind.LATENCY:
        return parse_latency_rule(metric, text)
    if kind is MetricKind.FRACTION:
        return parse_fraction_rule(metric, text)
    return parse_rate_rule(metric, text)


def parse_latency_rule(metric: str, text: str) -> SloRule:
    """`p95 < 2s` / `mean <= 500ms` -> SloRule. Raises ValueError with the allowed form."""
    match = _LATENCY_RULE.match(text)
    if match is None:
        raise ValueError(
            f"expected '<statistic> <comparator> <duration>' such as 'p95 < 2s' or "
            f"'mean <= 500ms' (statistic pNN with 0 < NN < 100, or mean; comparator one of "
            f"{', '.join(COMPARATORS)}), got {text!r}"
        )
    statistic, comparator, threshold_text = match.groups()
    metric_named(metric).check_statistic(statistic)  # a percentile strictly inside (0, 100)
    relative = _WARMUP_THRESHOLD.match(threshold_text.strip())
    if relative is not None:
        factor = float(relative.group(1))
        if not 0.0 < factor <= 1000.0:
            raise ValueError(f"a warm-up factor lies in (0, 1000], got {threshold_text!r} in "
                             f"{text!r}")
        return SloRule(metric, statistic, comparator, math.nan, text, warmup_factor=factor)
    try:
        threshold_s = parse_duration_s(threshold_text.replace(" ", ""))
    except ValueError:
        raise ValueError(f"threshold {threshold_text!r} of {text!r} is not a duration; expected "
                         "e.g. 2s, 500ms or 1.5 (seconds), or 3x warmup (sized from the "
                         "warm-up)") from None
    return SloRule(metric, statistic, comparator, threshold_s, text)


def parse_fraction_rule(metric: str, text: str) -> SloRule:
    """`< 1%` or `<= 0.01` -> SloRule on a fraction of the requests (error_rate: those that
    failed)."""
    match = _ERROR_RATE_RULE.match(text)
    if match is None:
        raise ValueError(f"expected '< 1%' or '<= 0.01' (comparator < or <=), got {text!r}")
    comparator, number, percent = match.groups()
    fraction = float(number) / 100.0 if percent else float(number)
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"an error rate lies between 0% and 100%, got {text!r}")
    return SloRule(metric, "rate", comparator, fraction, text)


_ABORT_RATE = re.compile(r"^\s*(>=|>)\s*(\d+(?:\.\d*)?|\.\d+)\s*(%?)\s*$")


def parse_abort_error_rate(text: str) -> float:
    """`> 50%` or `>= 0.5` -> the error-rate fraction above which a run is aborted."""
    match = _ABORT_RATE.match(text)
    if match is None:
        raise ValueError(f"expected '> 50%' or '>= 0.5' (comparator > or >=), got {text!r}")
    _comparator, number, percent = match.groups()
    fraction = float(number) / 100.0 if percent else float(number)
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"an abort threshold lies between 0% and 100% (exclusive), got {text!r}")
    return fraction


def parse_rate_rule(metric: str, text: str) -> SloRule:
    """`> 100 tok/s` (output_throughput) or `> 2 req/s` (request_throughput) -> SloRule."""
    unit = metric_named(metric).unit
    match = _RATE_RULE.match(text)
    if match is None or (match.group(3) not in (None, unit)):
        raise ValueError(f"expected '> N {unit}' (comparator one of {', '.join(COMPARATORS)}), "
                         f"got {text!r}")
    comparator, number, _ = match.groups()
    return SloRule(metric, "mean", comparator, float(number), text)
