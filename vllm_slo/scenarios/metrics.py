"""The metric vocabulary, defined once: every metric that an SLO, a compared cell, a report or
the tuner names, with its kind, unit, how its values print, which way is better, and where a
run's series and summary hold it. The SLO grammar (`slo.py`), the scenario model's `slo:`
(`slo_spec.py`) and `compare.cells` (`experiment_spec.py`), trials' cells, verdicts, the text
and HTML reports and the tuner all read it here.

A *cell* is `metric.statistic` (`ttft.p50`, `itl.mean`, `output_throughput.mean`,
`error_rate.rate`), optionally for one part of a mix (`chat:itl.p99`). There is one spelling
per cell: the cell an SLO rule reads (`SloRule.cell`) is the one `compare.cells` accepts.
Pure: no I/O, no imports from other layers.

Each entry names its *sample source*, a function of the run's measured series (`MeasuredRun`,
which `vllm_slo.analysis.run_metrics.RunSeries` is): a rate over data a run already holds is
one `register_metric(Metric(...))` call in one module, and is at once an `slo:` key, a cell
of `compare.cells` and trials, a verdict and a line of the reports (tests/support/send_rate.py
is such a module).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

import numpy as np

from vllm_slo.scenarios.registry import Registry
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


class MeasuredRun(Protocol):
    """What a metric's sample source reads: one run's (or one part's) measured series, as
    `vllm_slo.analysis.run_metrics.RunSeries` holds it (mypy checks that it is one; durations
    in seconds, Unix times in seconds, rates per second in each bin of the rate span)."""

    @property
    def ttft_s(self) -> np.ndarray: ...
    @property
    def itl_s(self) -> np.ndarray: ...
    @property
    def itl_token_s(self) -> np.ndarray: ...
    @property
    def ttft_answer_s(self) -> np.ndarray: ...
    @property
    def reasoning_time_s(self) -> np.ndarray: ...
    @property
    def tpot_s(self) -> np.ndarray: ...
    @property
    def e2e_s(self) -> np.ndarray: ...
    @property
    def send_lag_s(self) -> np.ndarray: ...
    @property
    def window_start_unix_s(self) -> float | None: ...
    @property
    def window_s(self) -> float: ...
    @property
    def requests(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def output_tokens_per_bin(self) -> np.ndarray: ...
    @property
    def completions_per_bin(self) -> np.ndarray: ...
    @property
    def prompt_tokens(self) -> np.ndarray: ...
    @property
    def output_tokens(self) -> np.ndarray: ...
    @property
    def measured_ok(self) -> np.ndarray: ...
    @property
    def measured_send_unix_s(self) -> np.ndarray: ...
    @property
    def measured_latency_s(self) -> Mapping[str, np.ndarray]: ...
    @property
    def span_s(self) -> float: ...
    @property
    def session_e2e_s(self) -> np.ndarray: ...
    def bin_widths(self) -> np.ndarray: ...


# a metric's values in one run: per request or per gap (latency: seconds), or per second in
# each 1-s bin of the rate span, time-ordered (rate: its count over the span is the dot
# product with `bin_widths()` over their sum)
SampleSource = Callable[[MeasuredRun], np.ndarray]


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    kind: MetricKind
    title: str  # a figure's or a table's heading
    unit: str  # printed after a value: "tok/s", "req/s"; "" where the value carries it
    lower_is_better: bool
    # where a run holds it: its sample source (None for the fraction, whose counts are the
    # series' `failed` of `requests`) and the RunSummary attribute with its estimate ("" for a
    # latency metric, whose estimates are RunSummary.metrics[name], and for a registered rate,
    # whose estimate is made from its samples where a verdict needs it)
    samples: SampleSource | None
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


_METRICS: Registry[Metric] = Registry("metric")
for _metric in (
    Metric("ttft", MetricKind.LATENCY, "Time to first token", "", True,
           lambda run: run.ttft_s, "", "request"),
    Metric("itl", MetricKind.LATENCY, "Inter-token latency", "", True,
           lambda run: run.itl_s, "", "gap"),
    Metric("tpot", MetricKind.LATENCY, "Time per output token", "", True,
           lambda run: run.tpot_s, "", "request"),
    Metric("e2e", MetricKind.LATENCY, "End-to-end latency", "", True,
           lambda run: run.e2e_s, "", "request"),
    # multi-token chunks and reasoning (docs/measurement.md): itl above is per
    # chunk gap (vLLM bench's); itl_token spreads a gap over the k tokens its chunk carried
    Metric("itl_token", MetricKind.LATENCY, "Inter-token latency per token", "", True,
           lambda run: run.itl_token_s, "", "token"),
    Metric("ttft_answer", MetricKind.LATENCY, "Time to first answer token", "", True,
           lambda run: run.ttft_answer_s, "", "request"),
    Metric("reasoning_time", MetricKind.LATENCY, "Reasoning time", "", True,
           lambda run: run.reasoning_time_s, "", "request"),
    Metric("error_rate", MetricKind.FRACTION, "Error rate", "", True, None, "error_rate", ""),
    Metric("output_throughput", MetricKind.RATE, "Output throughput", "tok/s", False,
           lambda run: run.output_tokens_per_bin, "output_tokens_per_s", "1-s bin"),
    Metric("request_throughput", MetricKind.RATE, "Request throughput", "req/s", False,
           lambda run: run.completions_per_bin, "requests_per_s", "1-s bin"),
):
    _METRICS.add(_metric.name, _metric, built_in=True)
BUILT_IN_METRICS = _METRICS.built_in
# every registered metric (a read-only view: register_metric adds to it)
METRICS: MappingProxyType[str, Metric] = _METRICS.view
LATENCY_METRICS = tuple(name for name, m in METRICS.items() if m.kind is MetricKind.LATENCY)
RATE_METRICS = tuple(name for name, m in METRICS.items() if m.kind is MetricKind.RATE)
# the latencies of whole requests: a request meets or misses each (vLLM bench's goodput set)
PER_REQUEST_LATENCY_METRICS = tuple(name for name in LATENCY_METRICS
                                    if METRICS[name].sampled_per == "request")


class MetricSourceError(ValueError):
    """A registered metric's sample source raised (anything but a Ctrl-C, `sys.exit()`
    included) or returned something other than one number per bin: names the plugin module
    and the metric. The run's summary and report are still written; the metric's verdict is
    inconclusive with this text as its warning."""


def plugin_of(metric: Metric) -> str:
    """The module that defines a metric's sample source (a plugin's name)."""
    return getattr(metric.samples, "__module__", None) or "?"


def metric_samples(metric: Metric, run: MeasuredRun) -> np.ndarray:
    """A metric's values in `run` from its sample source, as float64. A built-in source is
    trusted; a registered one is checked: a 1-D array of numbers, one per bin of the rate
    span for a rate. MetricSourceError naming plugin and metric otherwise."""
    source = metric.samples
    if source is None:
        raise ValueError(f"metric {metric.name!r} has no sample source (a fraction's are counts)")
    if metric.name in BUILT_IN_METRICS:
        built_in: np.ndarray = np.asarray(source(run), dtype=np.float64)
        return built_in
    where = f"plugin {plugin_of(metric)}: metric {metric.name}"
    try:
        returned = source(run)
    except KeyboardInterrupt:  # a real Ctrl-C stops the suite
        raise
    except BaseException as error:  # sys.exit() in a sample source too
        text = " ".join(repr(error).split())[:300]
        raise MetricSourceError(f"{where} failed: its sample source raised {text}") from None
    try:
        values: np.ndarray = np.asarray(returned, dtype=np.float64)
    except (TypeError, ValueError, OverflowError):
        values = np.empty(0)
        shape_ok = False
    else:
        shape_ok = values.ndim == 1
    bins = run.bin_widths().size
    if not shape_ok or (metric.kind is MetricKind.RATE and values.size != bins):
        shown = " ".join(repr(returned).split())[:80]
        wanted = (f"{bins} numbers (one per 1-s bin)" if metric.kind is MetricKind.RATE
                  else "a 1-D array of numbers")
        raise MetricSourceError(f"{where} failed: its sample source returned "
                                f"{type(returned).__name__} {shown}, not {wanted}")
    return values


_METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_RESERVED_KEYS = ("by_profile", "by_adapter")  # other keys of an `slo:` block


def register_metric(metric: Metric) -> Metric:
    """Adds a rate metric computed from data every run holds (its `samples`: the per-second
    value in each 1-s bin of the rate span); returns it. From then on it is an `slo:` key
    (`name: "> N unit"`), a cell (`name.mean`), a verdict and a report line. A latency of
    something other than a request (`sampled_per`, e.g. "session": the agent profile's
    `session_e2e`) registers too: an `slo:` key judged on its samples, not a goodput rule. A
    new per-request latency or a fraction metric is also a column of summaries and figures:
    that one is a built-in entry above. ValueError on a taken or malformed name, another
    kind, or a missing part."""
    if not _METRIC_NAME.match(metric.name) or metric.name in _RESERVED_KEYS:
        raise ValueError(f"a metric's name is lower_snake_case and not "
                         f"{', '.join(_RESERVED_KEYS)}, got {metric.name!r}")
    if metric.kind is MetricKind.LATENCY and metric.sampled_per not in ("request", "gap",
                                                                        "token", ""):
        if metric.samples is None or metric.summary_field:
            raise ValueError(f"latency metric {metric.name!r} needs its samples and no "
                             "summary_field")
        return _METRICS.add(metric.name, metric)
    if metric.kind is not MetricKind.RATE:
        raise ValueError(f"register_metric adds rate metrics and latencies of something "
                         f"other than a request; {metric.name!r} is {metric.kind.value} "
                         f"per {metric.sampled_per or '?'} (a built-in entry of metrics.py)")
    if metric.samples is None or not metric.unit or metric.summary_field:
        raise ValueError(f"rate metric {metric.name!r} needs its samples (per 1-s bin), a "
                         "unit such as 'req/s', and no summary_field (RunSummary holds the "
                         "built-in rates only)")
    return _METRICS.add(metric.name, metric)


def unregister_metric(name: str) -> None:
    """Removes a metric added by `register_metric` (tests that register one clean up)."""
    _METRICS.remove(name)


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
