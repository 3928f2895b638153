"""A capacity search's results as capacity.json holds them (reports/schema/capacity.schema.json):
each step read from its run's summary document (its SLO verdicts, goodput, achieved load) plus
a stability check (the latency trend over the window and vLLM's waiting-queue gauge), and the
capacity estimated from the steps (stats/capacity_search.py). Pure: the caller reads folders.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_slo.analysis.run_metrics import RunSeries, summarize
from vllm_slo.analysis.server_metrics import build_server_series
from vllm_slo.analysis.summary import RunSummaryDocument
from vllm_slo.analysis.trace_fidelity import TraceFidelity
from vllm_slo.analysis.verdicts import evaluate_slos
from vllm_slo.scenarios.capacity_spec import RATE_KEY, SPEEDUP_KEY, USERS_KEY, CapacitySpec
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.serialise import json_field
from vllm_slo.stats.capacity_search import (
    CapacityEstimate,
    SearchRange,
    SearchStatus,
    SloReading,
    StepReading,
    estimate_capacity,
    grows,
    quarter_levels,
)
from vllm_slo.stats.statistics import Verdict

CAPACITY_SCHEMA_VERSION = 1
# the capacity interval's confidence as stated (stats/capacity_search.py); each step's SLO
# verdicts are decided at capacity.step_confidence (0.99 unless set), which the calibration
# on the simulated stand-in showed the interval needs to cover near 95%
CAPACITY_CONFIDENCE = 0.95
# a queue filling up: quarter after quarter higher, ending at least this much above its start
LATENCY_GROWTH_RATIO = 1.5
LATENCY_GROWTH_FLOOR_S = 0.05
WAITING_GROWTH_RATIO = 1.5
WAITING_GROWTH_FLOOR = 4.0  # requests
# an open loop's arrivals that waited for one of the client's in-flight slots: past this share
# of the measured requests, the queue outgrew `traffic.arrival.max_in_flight`
QUEUED_FOR_SLOT_SHARE, QUEUED_FOR_SLOT_FLOOR = 0.01, 2
TRACE_SHORT_NAME = "trace_too_short"
TRACE_COVERED = "the run's"  # trace_replay.Selection.stopped when the trace outlasted the run


def search_range(spec: CapacitySpec, floor: float | None = None) -> SearchRange:
    """The spec's search as numbers; `floor`: a capacity race's (analysis/capacity_race.py)."""
    return SearchRange(low=spec.low, high=spec.high, tolerance=spec.tolerance,
                       lengthen=spec.lengthen, whole=spec.whole_steps, required=spec.required,
                       floor=floor)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stability:
    """Whether the queue held steady over the step's window: TTFT's median per quarter of
    the window and vLLM's mean `num_requests_waiting` per quarter (None: not exported)."""

    stable: bool
    ttft_quarter_medians_s: tuple[float, ...] | None
    waiting_quarter_means: tuple[float, ...] | None
    reason: str | None  # why it is unstable (None: stable)


def _levels(levels: np.ndarray | None) -> tuple[float, ...] | None:
    return None if levels is None else tuple(float(v) for v in levels)


def stability(series: RunSeries, server_records: Sequence[dict[str, Any]]) -> Stability:
    """A queue that grows through the window means the load is above capacity whatever the
    window's percentiles say: TTFT (which holds the queueing) rising quarter after quarter by
    half again and 50 ms, or vLLM's waiting requests rising quarter after quarter by half
    again and 4 requests, or (open loop) more than 1% of the measured arrivals waiting for one
    of the client's in-flight slots. The last is the queue the server cannot show: once
    `max_in_flight` requests are out, vLLM's waiting count holds at the cap and the queue grows
    in the client (seen: the stand-in at 3x its capacity, waiting 146 -> 244 -> 248 -> 247.75
    per quarter, and no TTFT median for a quarter whose requests got no first token)."""
    start = series.window_start_unix_s
    if start is None:
        return Stability(stable=True, ttft_quarter_medians_s=None, waiting_quarter_means=None,
                         reason=None)
    span = series.span_s
    ttft = series.measured_latency_s.get("ttft", np.empty(0))
    latency = quarter_levels(series.measured_send_unix_s, ttft, start, span, "median")
    waiting_levels = None
    server = build_server_series(list(server_records), start)
    if server is not None and server.waiting is not None:
        waiting_levels = quarter_levels(server.scrape_s, server.waiting, 0.0, span, "mean")
    reasons = []
    if grows(latency, LATENCY_GROWTH_RATIO, LATENCY_GROWTH_FLOOR_S):
        assert latency is not None
        reasons.append(f"TTFT median rose quarter after quarter, {latency[0] * 1e3:.0f} ms "
                       f"to {latency[-1] * 1e3:.0f} ms")
    if grows(waiting_levels, WAITING_GROWTH_RATIO, WAITING_GROWTH_FLOOR, plateau=True):
        assert waiting_levels is not None
        reasons.append(f"vLLM's waiting requests rose through the window, "
                       f"{waiting_levels[0]:.1f} to {waiting_levels[-1]:.1f}")
    queued = series.queued_for_slot
    if queued > max(QUEUED_FOR_SLOT_FLOOR, QUEUED_FOR_SLOT_SHARE * series.requests):
        reasons.append(f"{queued} of {series.requests} measured arrivals waited for one of "
                       f"the client's in-flight slots (traffic.arrival.max_in_flight): the "
                       f"queue outgrew the cap")
    return Stability(stable=not reasons, ttft_quarter_medians_s=_levels(latency),
                     waiting_quarter_means=_levels(waiting_levels),
                     reason="; ".join(reasons) or None)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepSlo:
    slo: str
    verdict: Verdict
    value: float | None
    ci_low: float | None
    ci_high: float | None
    threshold: float
    upper_bound: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Interval:
    value: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityStep:
    """One step of the search as capacity.json holds it."""

    trial: int
    load: float  # asked
    attempt: int  # 0: the load's first run; k: its window 2**k times the scenario's
    window_s: float
    achieved: float | None  # sent req/s (rate), mean requests in flight (users), or the
    # speedup sent (speedup: the load × sent ÷ scheduled requests in the measured window)
    outcome: str  # under | over | near | invalid
    slos: tuple[StepSlo, ...]
    stability: Stability
    goodput_per_s: Interval
    output_tokens_per_s: Interval
    # requests the server completed per second over the window, in a search over the request
    # rate (None: a load in other units, or a file written before it was recorded): it bounds
    # the capacity from above (stats/capacity_search.completion_ceiling)
    completed_per_s: float | None = None
    ttft_s: Mapping[str, float | None]  # p50, p90, p99 point values
    e2e_s: Mapping[str, float | None]
    kv_cache_usage_mean: float | None
    waiting_mean: float | None
    exit_code: int
    invalid_reasons: tuple[str, ...]
    run_dir: str  # relative to the capacity folder

    def reading(self) -> StepReading:
        invalid = "; ".join(self.invalid_reasons) or None
        return StepReading(
            load=self.load, attempt=self.attempt,
            slos=tuple(SloReading(s.slo, s.value, s.threshold, s.upper_bound, s.verdict)
                       for s in self.slos),
            stable=self.stability.stable, invalid_reason=invalid,
            completed_per_s=self.completed_per_s)

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> CapacityStep:
        slos = tuple(StepSlo(**{**s, "verdict": Verdict(s["verdict"])}) for s in data["slos"])
        stab = data["stability"]
        return cls(
            trial=data["trial"], load=data["load"], attempt=data["attempt"],
            window_s=data["window_s"], achieved=data["achieved"], outcome=data["outcome"],
            slos=slos,
            stability=Stability(
                stable=stab["stable"], reason=stab["reason"],
                ttft_quarter_medians_s=_tuple(stab["ttft_quarter_medians_s"]),
                waiting_quarter_means=_tuple(stab["waiting_quarter_means"])),
            goodput_per_s=Interval(**data["goodput_per_s"]),
            output_tokens_per_s=Interval(**data["output_tokens_per_s"]),
            completed_per_s=data.get("completed_per_s"),
            ttft_s=dict(data["ttft_s"]), e2e_s=dict(data["e2e_s"]),
            kv_cache_usage_mean=data["kv_cache_usage_mean"], waiting_mean=data["waiting_mean"],
            exit_code=data["exit_code"], invalid_reasons=tuple(data["invalid_reasons"]),
            run_dir=data["run_dir"])


def _tuple(values: Sequence[float] | None) -> tuple[float, ...] | None:
    return None if values is None else tuple(float(v) for v in values)


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _mean(values: np.ndarray | None) -> float | None:
    if values is None or not np.isfinite(values).any():
        return None
    return float(np.nanmean(values))


def step_verdicts(document: RunSummaryDocument, series: RunSeries, confidence: float
                  ) -> dict[str, Verdict]:
    """Each whole-run SLO's verdict decided again at the step's confidence (rule label ->
    verdict); a part's rule (a mix's, an adapter's) keeps the run's."""
    rules = [entry.rule for entry in document.slos if entry.rule.part is None]
    if not rules:
        return {}
    results = evaluate_slos(rules, series, summarize(series), confidence)
    return {result.rule.label: result.verdict for result in results}


def trace_shortfall(span_s: float, stopped: str, speedup: float, window_end_s: float,
                    window_s: float) -> str | None:
    """Why a trace replay at `speedup` measures less than that load, or None: the trace's
    window (its file, `traffic.trace.end`, `max_requests`) holds `span_s` seconds of trace
    (from its first record read; reading `stopped` as `trace_replay.Selection` says), which
    at k× last `span_s / k` run seconds; the run needs them to the measured window's end
    (`window_end_s`, warm-up included). Sends ending more than max(1 s, 5% of the window)
    before it, as the replay's own short-replay warning counts, leave the window's last
    seconds empty: a lower load than the step asks for (named `trace_too_short`)."""
    if stopped.startswith(TRACE_COVERED):
        return None
    covered_s = span_s / speedup
    empty_s = window_end_s - covered_s
    if empty_s <= max(1.0, 0.05 * window_s):
        return None
    return (f"{TRACE_SHORT_NAME}: at {speedup:g}× trace the run to the measured window's end "
            f"({window_end_s:g} s) replays {speedup * window_end_s:g} s of trace, and the "
            f"trace's window holds {span_s:g} s (reading stopped at {stopped}): its last "
            f"{empty_s:.1f} s send nothing, less load than {speedup:g}× (lower capacity.high "
            f"to at most about {span_s / window_end_s:.3g}×, shorten traffic.warmup or "
            "traffic.duration, or widen the trace's window)")


def trace_step(load: float, trace: TraceFidelity | None, plan: Mapping[str, Any] | None,
               warmup_s: float, window_s: float) -> tuple[float | None, str | None]:
    """A trace step's achieved speedup and its shortfall. Achieved: the load × the requests
    sent in the measured window ÷ those the replay scheduled there (summary.json
    `traffic.trace` rows; below the load when the client fell behind the trace's times, None
    without the rows). Shortfall: `trace_shortfall` from the plan's facts (provenance
    `plan.trace`: `stopped_at` and the trace's own `span_s`)."""
    achieved = None
    if trace is not None:
        row = next((r for r in trace.rows if r.statistic == "requests"), None)
        if row is not None and row.trace and row.sent is not None:
            achieved = load * row.sent / row.trace
    facts = (plan or {}).get("trace")
    short = None
    if isinstance(facts, Mapping) and isinstance(facts.get("trace"), Mapping):
        span = facts["trace"].get("span_s")
        if isinstance(span, int | float):
            short = trace_shortfall(float(span), str(facts.get("stopped_at", "")), load,
                                    warmup_s + window_s, window_s)
    return achieved, short


def capacity_step(document: RunSummaryDocument, stable: Stability,
                  server_records: Sequence[dict[str, Any]], *, trial: int, load: float,
                  attempt: int, load_key: str, run_dir: str,
                  verdicts: Mapping[str, Verdict] | None = None) -> CapacityStep:
    """A step's record from its run's summary document and stability check; `verdicts`
    (`step_verdicts`) replace the run's where given."""
    slos = []
    for entry in document.slos:
        rule = entry.rule
        verdict = (verdicts or {}).get(rule.label, entry.verdict)
        slos.append(StepSlo(slo=rule.label,
                            verdict=verdict, value=entry.observed.value,
                            ci_low=entry.observed.ci_low, ci_high=entry.observed.ci_high,
                            threshold=float(rule.threshold),
                            upper_bound=rule.comparator in ("<", "<=")))
    invalid_reasons = tuple(document.invalid_reasons)
    if load_key == RATE_KEY:
        achieved = document.traffic.sent_per_s
    elif load_key == USERS_KEY:
        health = document.client_health
        achieved = (health.concurrency.in_flight.mean
                    if health is not None and health.concurrency is not None else None)
    else:
        assert load_key == SPEEDUP_KEY, load_key
        warmup = document.scenario.get("traffic", {}).get("warmup", 0.0)
        achieved, short = trace_step(load, document.traffic.trace, document.traffic.plan,
                                     float(warmup), document.window_s)
        invalid_reasons += (short,) if short else ()
    server = build_server_series(list(server_records), 0.0)
    ttft = document.metrics["ttft"].percentiles
    e2e = document.metrics["e2e"].percentiles
    step = CapacityStep(
        trial=trial, load=load, attempt=attempt, window_s=document.window_s,
        achieved=_finite(achieved), outcome="", slos=tuple(slos), stability=stable,
        goodput_per_s=Interval(value=document.goodput.value, ci_low=document.goodput.ci_low,
                               ci_high=document.goodput.ci_high),
        output_tokens_per_s=Interval(value=document.output_tokens_per_s.value,
                                     ci_low=document.output_tokens_per_s.ci_low,
                                     ci_high=document.output_tokens_per_s.ci_high),
        completed_per_s=(_finite(document.requests_per_s.value) if load_key == RATE_KEY
                         else None),
        ttft_s={key: ttft[key].value for key in ("p50", "p90", "p99") if key in ttft},
        e2e_s={key: e2e[key].value for key in ("p50", "p90", "p99") if key in e2e},
        kv_cache_usage_mean=_mean(server.kv_cache_usage if server else None),
        waiting_mean=_mean(server.waiting if server else None),
        exit_code=document.exit_code, invalid_reasons=invalid_reasons,
        run_dir=run_dir)
    return dataclasses.replace(step, outcome=step.reading().outcome.value)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialCapacity:
    """One search (on one server instance): its capacity and why it stopped."""

    trial: int
    value: float | None
    low: float | None
    high: float | None
    limiting_slo: str | None
    status: SearchStatus
    reason: str
    completion_ceiling: float | None = None  # req/s (stats/capacity_search.completion_ceiling)


def trial_capacity(trial: int, steps: Sequence[CapacityStep], spec: CapacitySpec,
                   confidence: float, status: SearchStatus, reason: str) -> TrialCapacity:
    estimate = estimate_capacity([s.reading() for s in steps if s.trial == trial],
                                 search_range(spec), confidence)
    return TrialCapacity(trial=trial, value=estimate.value, low=estimate.low,
                         high=estimate.high, limiting_slo=estimate.limiting_slo,
                         status=status, reason=reason,
                         completion_ceiling=estimate.completion_ceiling)


def combined_capacity(trials: Sequence[TrialCapacity], confidence: float) -> CapacityEstimate:
    """Over trials (fresh servers): the median of their values and the hull of their
    intervals (each trial's interval covers its instance's crossing; the hull covers every
    instance's); one trial's own otherwise."""
    if len(trials) == 1:
        only = trials[0]
        return CapacityEstimate(only.value, only.low, only.high, confidence, only.limiting_slo,
                                only.completion_ceiling)
    values = [t.value for t in trials if t.value is not None]
    lows = [t.low for t in trials]
    highs = [t.high for t in trials]
    limiting = [t.limiting_slo for t in trials if t.limiting_slo]
    ceilings = [t.completion_ceiling for t in trials if t.completion_ceiling is not None]
    return CapacityEstimate(
        float(np.median(values)) if len(values) == len(trials) else None,
        None if any(v is None for v in lows) else min(v for v in lows if v is not None),
        None if any(v is None for v in highs) else max(v for v in highs if v is not None),
        confidence, max(set(limiting), key=limiting.count) if limiting else None,
        # the hull's: each trial's interval lies under its own ceiling, the hull under the
        # highest of them
        max(ceilings) if len(ceilings) == len(trials) else None)


def overall_status(trials: Sequence[TrialCapacity]) -> SearchStatus:
    """The search's status over trials: the first trial's that is not bracketed (invalid
    first), else bracketed."""
    order = [SearchStatus.INVALID, SearchStatus.NOT_MONOTONE, SearchStatus.BELOW_REQUIREMENT,
             SearchStatus.RACED_OUT,
             SearchStatus.BELOW_RANGE, SearchStatus.ABOVE_RANGE, SearchStatus.UNDECIDED,
             SearchStatus.BUDGET_SPENT, SearchStatus.RUNNING, SearchStatus.BRACKETED]
    return min((t.status for t in trials), key=order.index)


def capacity_exit_code(status: SearchStatus, estimate: CapacityEstimate,
                       required: float | None) -> ExitCode:
    """0 bracketed within the tolerance (meeting `require`); 1 the interval lies below
    `require`; 3 undecided (budget, range, near steps, not monotone, or `require` inside the
    interval); 4 invalid."""
    if status is SearchStatus.INVALID:
        return ExitCode.INVALID_MEASUREMENT
    if required is not None and estimate.high is not None and estimate.high <= required:
        return ExitCode.SLO_FAILED
    if status is SearchStatus.ABOVE_RANGE and required is not None and (
            estimate.low is not None and estimate.low >= required):
        return ExitCode.PASS
    if status is not SearchStatus.BRACKETED:
        return ExitCode.INCONCLUSIVE
    if required is not None and (estimate.low is None or estimate.low < required):
        return ExitCode.INCONCLUSIVE
    return ExitCode.PASS


def _interval_json(estimate: CapacityEstimate) -> dict[str, Any]:
    return {"value": estimate.value, "interval": [estimate.low, estimate.high],
            "confidence": estimate.confidence,
            "completion_ceiling_per_s": estimate.completion_ceiling}


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacityDocument:
    """Everything capacity.json holds, in its documented key order."""

    schema_version: int = CAPACITY_SCHEMA_VERSION
    scenario: Mapping[str, Any]  # the redacted scenario echo (with its capacity section)
    variant: str | None  # the variant searched (None: the scenario has none)
    load: str  # the varied key
    unit: str
    capacity: CapacityEstimate = json_field(convert=_interval_json)
    limiting_slo: str | None
    status: SearchStatus
    reason: str
    exit_code: int
    require: float | None
    tolerance: float
    started_utc: str
    elapsed_s: float
    trials: tuple[TrialCapacity, ...]
    steps: tuple[CapacityStep, ...]

    @property
    def scenario_name(self) -> str:
        return str(self.scenario["name"])

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> CapacityDocument:
        if data.get("schema_version") != CAPACITY_SCHEMA_VERSION:
            raise ValueError(f"capacity.json schema_version {data.get('schema_version')!r}: "
                             f"this suite reads version {CAPACITY_SCHEMA_VERSION}")
        capacity = data["capacity"]
        low, high = capacity["interval"]
        return cls(
            scenario=data["scenario"], variant=data["variant"], load=data["load"],
            unit=data["unit"],
            capacity=CapacityEstimate(capacity["value"], low, high, capacity["confidence"],
                                      data["limiting_slo"],
                                      capacity.get("completion_ceiling_per_s")),
            limiting_slo=data["limiting_slo"], status=SearchStatus(data["status"]),
            reason=data["reason"], exit_code=data["exit_code"], require=data["require"],
            tolerance=data["tolerance"], started_utc=data["started_utc"],
            elapsed_s=data["elapsed_s"],
            trials=tuple(TrialCapacity(**{**t, "status": SearchStatus(t["status"])})
                         for t in data["trials"]),
            steps=tuple(CapacityStep.from_json_dict(s) for s in data["steps"]))
