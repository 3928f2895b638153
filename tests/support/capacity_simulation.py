"""The capacity search (``vllm_slo.stats.capacity_search.plan_next``) driven by simulated steps
on the M/D/c stand-in of known capacity (``tests/support/queue_simulation.py``): the library
behind ``benchmarks/capacity_calibration.py`` and ``benchmarks/capacity_cost.py`` and the
coverage test in ``tests/unit/test_capacity_search.py``.

Each step is read as ``vllm-slo capacity`` reads a real one: every SLO's verdict from
``percentile_threshold_test`` on the measured series in send order (with
``analysis.verdicts._evaluate``'s sectioning fallback where the percentile's own interval
came from sectioning), its point value ``np.quantile``, and the stability rule of
``vllm_slo.analysis.capacity.stability`` (TTFT's per-quarter medians growing by 1.5x and
50 ms; the stand-in exports no waiting gauge). A step
at window factor k runs the warm-up then k times the window, as ``capacity_runner`` does; the
budget is checked before each step as there (the step's warm-up + window, no overhead).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tests.support.queue_simulation import (
    FIRST_TOKEN_S,
    SERVICE_S,
    SLOTS,
    QueueRun,
    simulate_run,
)
from vllm_slo.analysis.capacity import (
    CAPACITY_CONFIDENCE,
    LATENCY_GROWTH_FLOOR_S,
    LATENCY_GROWTH_RATIO,
)
from vllm_slo.analysis.verdicts import percentile_threshold_test
from vllm_slo.scenarios.capacity_spec import DEFAULT_STEP_CONFIDENCE
from vllm_slo.stats.capacity_search import (
    CapacityEstimate,
    NextStep,
    SearchEnd,
    SearchRange,
    SearchStatus,
    SloReading,
    StepReading,
    estimate_capacity,
    grows,
    plan_next,
    quarter_levels,
)
from vllm_slo.stats.statistics import (
    SECTIONING_METHOD,
    Verdict,
    percentile_estimate,
    slo_verdict,
)

MAX_STEPS = 60  # a guard: a search never needs this many


@dataclass(frozen=True, slots=True)
class PercentileSlo:
    """`metric p{percentile} < threshold_s` (the only form the stand-in's searches use)."""

    metric: str  # ttft | e2e
    percentile: float
    threshold_s: float

    @property
    def text(self) -> str:
        threshold = (f"{self.threshold_s * 1e3:g}ms" if self.threshold_s < 1
                     else f"{self.threshold_s:g}s")
        return f"{self.metric} p{self.percentile:g} < {threshold}"

    def reading(self, run: QueueRun, confidence: float) -> SloReading:
        series = run.latency(self.metric)
        observed = percentile_estimate(series, self.percentile, confidence)
        test = percentile_threshold_test(series, self.percentile, "<", self.threshold_s,
                                         confidence, observed)
        verdict = test.verdict
        if verdict is Verdict.INCONCLUSIVE and observed.method == SECTIONING_METHOD:
            # as verdicts._evaluate: too few samples beyond the percentile for the quantile
            # test (a p99 of 120 requests): the sectioning interval decides what it clearly can
            verdict = slo_verdict(observed, "<", self.threshold_s)
        value = float(np.quantile(series, self.percentile / 100.0)) if series.size else None
        return SloReading(self.text, value, self.threshold_s, True, verdict)


@dataclass(frozen=True, slots=True)
class StandIn:
    slots: int = SLOTS
    service_s: float = SERVICE_S
    first_token_s: float = FIRST_TOKEN_S


STAND_IN = StandIn()


def stable(run: QueueRun) -> bool:
    """`analysis.capacity.stability` without a waiting gauge."""
    levels = quarter_levels(run.send_s, run.ttft_s, run.window_start_s, run.window_s, "median")
    return not grows(levels, LATENCY_GROWTH_RATIO, LATENCY_GROWTH_FLOOR_S)


def read_step(rng: np.random.Generator, step: NextStep, slos: Sequence[PercentileSlo],
              warmup_s: float, window_s: float, confidence: float = DEFAULT_STEP_CONFIDENCE,
              server: StandIn = STAND_IN) -> StepReading:
    """One step's verdicts at `confidence` (capacity.step_confidence)."""
    run = simulate_run(rng, step.load, warmup_s, window_s * step.window_factor, server.slots,
                       server.service_s, server.first_token_s)
    return StepReading(step.load, step.attempt,
                       tuple(slo.reading(run, confidence) for slo in slos), stable(run))


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    status: SearchStatus
    estimate: CapacityEstimate
    readings: tuple[StepReading, ...]
    simulated_s: float  # warm-up + window of every step

    @property
    def steps(self) -> int:
        return len(self.readings)

    @property
    def minutes(self) -> float:
        return self.simulated_s / 60.0

    def covers(self, truth: float) -> bool:
        """The interval holds `truth` (an open end counts as unbounded; no interval: not)."""
        low, high = self.estimate.low, self.estimate.high
        if low is None and high is None:
            return False
        return ((low is None or low <= truth) and (high is None or truth <= high))

    @property
    def width(self) -> float:
        """The interval's high / low - 1 (inf with an open end)."""
        low, high = self.estimate.low, self.estimate.high
        if low is None or high is None:
            return math.inf
        return high / low - 1.0


def search(rng: np.random.Generator, slos: Sequence[PercentileSlo], search_range: SearchRange,
           warmup_s: float, window_s: float, budget_s: float | None = None,
           confidence: float = CAPACITY_CONFIDENCE, server: StandIn = STAND_IN,
           step_confidence: float = DEFAULT_STEP_CONFIDENCE) -> SearchOutcome:
    """One whole search, as `capacity_runner` runs it, on simulated steps (verdicts at
    `step_confidence`, the interval stated at `confidence`)."""
    readings: list[StepReading] = []
    elapsed = 0.0
    status = SearchStatus.RUNNING
    while len(readings) < MAX_STEPS:
        decision = plan_next(readings, search_range)
        if isinstance(decision, SearchEnd):
            status = decision.status
            break
        seconds = warmup_s + window_s * decision.window_factor
        if budget_s is not None and elapsed + seconds > budget_s:
            status = SearchStatus.BUDGET_SPENT
            break
        readings.append(read_step(rng, decision, slos, warmup_s, window_s, step_confidence,
                                  server))
        elapsed += seconds
    estimate = estimate_capacity(readings, search_range, confidence)
    return SearchOutcome(status, estimate, tuple(readings), elapsed)


def sweep(rng: np.random.Generator, slos: Sequence[PercentileSlo], loads: Sequence[float],
          warmup_s: float, window_s: float, confidence: float = DEFAULT_STEP_CONFIDENCE,
          server: StandIn = STAND_IN) -> tuple[StepReading, ...]:
    """A fixed grid of steps (each load once), read with the same verdicts."""
    return tuple(read_step(rng, NextStep(float(load), 0), slos, warmup_s, window_s,
                           confidence, server) for load in loads)
