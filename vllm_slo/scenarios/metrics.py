"""The metric vocabulary, defined once: every metric that an SLO, a compared cell, a report or
the tuner names, with its kind, unit, how its values print, which way is better, and where a
run's series and summary hold it. The SLO grammar (`slo.py`), the scenario model's `slo:` and
`compare.cells` (`model.py`), trials' cells, verdicts, the text and HTML reports and the tuner
all read it here.

A *cell* is `metric.statistic` (`ttft.p50`, `itl.mean`, `output_throughput.mean`,
`error_rate.rate`), optionally for one part of a mix (`chat:itl.p99`). There is one spelling
per cell: the cell an SLO rule reads (`SloRule.cell`) is the one `compare.cells` accepts.
Pure: no I/O, no imports from other layers.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from types import MappingProxyType

from vllm_slo.scenarios.units import format_duration_s


class MetricKind(enum.Enum):
    LATENCY = "latency"  # durations in seconds, per request (per gap for itl): pNN or mean
    RATE = "rate"  # per second over the measured window, from 1-s bins: mean
    FRACTION = "fraction"  # a share of the measured requests: rate


_STATISTICS_TEXT = {MetricKind.LATENCY: "pNN (0 < NN < 100) or mean",
                    MetricKind.RATE: "mean", MetricKind.FRACTION: "rate"}
_PERCENTILE = re.compile(r"^p(\d+(?:\.\d+)?)$")


def format_per_second(value: float) -> str:
    """A rate's number, without its unit: `1,234.5`."""
    return f"{value:,.1f}"


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    kind: MetricKind
    title: str  # a figure's or a table's heading
    unit: str  # printed after a value: "tok/s", "req/s"; "" where the value carries it
    lower_is_better: bool
    # where a run holds it: the RunSeries attribute with its values (per request, per gap or
    # per 1-s bin) and the RunSummary attribute with its estimate ("" for a latency metric,
    # whose estimates are RunSummary.metrics[name]; "" for the fraction's series: counts)
    series_field: str
    summary_field: str
    sampled_per: str  # what one value of its series is: "request", "gap", "1-s bin", ""

    def format_value(self, value: float) -> str:
        """The number in this metric's unit, without the unit suffix: `12.3ms`, `1.00%`,
        `1,234.5`."""
        if self.kind is MetricKind.LATENCY:
            return format_duration_s(value)
        if self.kind is MetricKind.FRACTION:
            return f"{value * 100:.2f}%"
        return format_per_second(value)

    @property
    def suffix(self) -> str:
        """What follows a formatted value: ` tok/s`, or nothing."""
        return f" {self.unit}" if self.unit else ""

    @property
    def statistics(self) -> str:
        """The statistics a cell of this metric may name, in words."""
        return _STATISTICS_TEXT[self.kind]

    def check_statistic(self, statistic: str) -> str:
        """`statistic` when a cell of this metric may name it; ValueError otherwise."""
        if self.kind is MetricKind.LATENCY:
            match = _PERCENTILE.match(statistic)
            if match is not None:
                if not 0.0 < float(match.group(1)) < 100.0:
                    raise ValueError(
                        f"percentile must lie strictly between 0 and 100, got {statistic!r}")
                return statistic
            if statistic == "mean":
                return statistic
        elif statistic == self.statistics:
            return statistic
        raise ValueError(f"{self.name} takes {self.statistics}, got {statistic!r} "
                         f"(e.g. {self.example_cell})")

    @property
    def example_cell(self) -> str:
        return f"{self.name}.{'p50' if self.kind is MetricKind.LATENCY else self.statistics}"


METRICS: MappingProxyType[str, Metric] = MappingProxyType({metric.name: metric for metric in (
    Metric("ttft", MetricKind.LATENCY, "Time to first token", "", True, "ttft_s", "",
           "request"),
    Metric("itl", MetricKind.LATENCY, "Inter-token latency", "", True, "itl_s", "", "gap"),
    Metric("tpot", MetricKind.LATENCY, "Time per output token", "", True, "tpot_s", "",
           "request"),
    Metric("e2e", MetricKind.LATENCY, "End-to-end latency", "", True, "e2e_s", "", "request"),
    Metric("error_rate", MetricKind.FRACTION, "Error rate", "", True, "", "error_rate", ""),
    Metric("output_throughput", MetricKind.RATE, "Output throughput", "tok/s", False,
           "output_tokens_per_bin", "output_tokens_per_s", "1-s bin"),
    Metric("request_throughput", MetricKind.RATE, "Request throughput", "req/s", False,
           "completions_per_bin", "requests_per_s", "1-s bin"),
)})
LATENCY_METRICS = tuple(name for name, m in METRICS.items() if m.kind is MetricKind.LATENCY)
RATE_METRICS = tuple(name for name, m in METRICS.items() if m.kind is MetricKind.RATE)
# the latencies of whole requests: a request meets or misses each (vLLM bench's goodput set)
PER_REQUEST_LATENCY_METRICS = tuple(name for name in LATENCY_METRICS
                                    if METRICS[name].sampled_per == "request")


def metric_named(name: str) -> Metric:
    """The registered metric `name`; ValueError naming the known ones otherwise."""
    try:
        return METRICS[name]
    except KeyError:
        raise ValueError(f"unknown metric {name!r}; one of {', '.join(METRICS)}") from None


@dataclass(frozen=True, slots=True)
class Cell:
    """A compared statistic: `metric.statistic`, of one part of a mix when `part` is set."""

    part: str | None
    metric: Metric
    statistic: str

    @property
    def base(self) -> str:
        return f"{self.metric.name}.{self.statistic}"

    @property
    def text(self) -> str:
        return f"{self.part}:{self.base}" if self.part else self.base

    @property
    def percentile(self) -> float | None:
        """The percentile (0-100) a latency cell names; None for a mean, a rate or a fraction."""
        match = _PERCENTILE.match(self.statistic)
        return float(match.group(1)) if match else None


def split_cell(cell: str) -> tuple[str | None, str]:
    """`chat:itl.p99` (a cell of one part of a mix) -> ("chat", "itl.p99"); a whole-run cell
    -> (None, cell)."""
    part, separator, base = cell.rpartition(":")
    return (part, base) if separator else (None, cell)


def parse_cell(text: str) -> Cell:
    """`ttft.p50`, `chat:itl.p99`, `error_rate.rate` -> Cell; ValueError saying the grammar.
    Which parts exist is the scenario model's to check."""
    part, base = split_cell(text)
    name, dot, statistic = base.partition(".")
    if not dot or name not in METRICS:
        raise ValueError(
            "expected metric.statistic: " + "; ".join(
                f"{m.name} with {m.statistics}" for m in METRICS.values())
            + f" (e.g. ttft.p50, e2e.mean, error_rate.rate), optionally for one part of a mix "
            f"(chat:itl.p99); got {text!r}")
    metric = METRICS[name]
    return Cell(part, metric, metric.check_statistic(statistic))


def lower_is_better(cell: str) -> bool:
    """Which way a cell improves (latencies and the error rate down, throughputs up)."""
    return parse_cell(cell).metric.lower_is_better
