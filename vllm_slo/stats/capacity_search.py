"""The capacity search, pure: which load to try next from the steps so far, when to stop, and
the capacity with its interval (docs/statistics.md "Capacity").

A step at one load reads each SLO's verdict (PASS / FAIL / INCONCLUSIVE, from its interval at
the scenario's confidence) and whether the queue was stable. It is *under* capacity when every
SLO passed on a stable queue, *over* when an SLO failed or the queue grew, *near* when an SLO
stayed INCONCLUSIVE (its interval straddles the threshold: the load is close to the crossing),
*invalid* when it measured the load generator or a broken server rather than the load.

The search brackets the crossing: `low` first (it must be under), `high` second (it must be
over), then the geometric midpoint of the highest load under and the lowest load over until
their ratio is within the tolerance. A near step runs again with its window doubled (up to
`lengthen` times); one still near splits the bracket and the halves either side are searched.

The capacity interval is the bracket [highest under, lowest over]. It misses the true crossing
only when a bracketing verdict is wrong. Were each verdict wrong with probability at most
(1 - c) / 2 at confidence c, the bracket would cover with probability at least c (a union
bound). Near the crossing the verdicts are not that accurate: on an M/D/8 queue of known
capacity a 30-60 s window PASSes `ttft p90 < 500ms` at the true crossing in ~15% of runs, not
<= 2.5% (a short window's percentile of a queue is biased low and its effective size is
optimistic; a long warm-up does not change it), and a near step's rerun is a second chance to
PASS. The measured coverage (docs/statistics.md "Capacity", benchmarks/capacity_calibration.py)
is ~94% at a 60 s window and 10% tolerance but ~73-90% at 30 s or 5%: use windows of 60 s or
more. The point value interpolates the limiting SLO's statistic (log statistic / threshold
against log load) between the two ends.

For a load in req/s, the lowest completion rate of a step over capacity bounds the capacity
from above (arrivals beyond what the server completes only queue): neither the point value
nor the interval's high end is ever above it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np

from vllm_slo.stats.statistics import Verdict


class StepClass(str, Enum):
    UNDER = "under"
    OVER = "over"
    NEAR = "near"
    INVALID = "invalid"


class SearchStatus(str, Enum):
    """Why the search stopped (or `RUNNING`: it has not)."""

    RUNNING = "running"
    BRACKETED = "bracketed"  # the bracket is within the tolerance
    BELOW_REQUIREMENT = "below-requirement"  # the bracket lies below `require`
    RACED_OUT = "raced-out"  # the bracket lies below the race's floor (a better candidate's)
    BELOW_RANGE = "below-range"  # `low` is already over capacity
    ABOVE_RANGE = "above-range"  # `high` is still under capacity
    UNDECIDED = "undecided"  # near steps fill the bracket wider than the tolerance
    NOT_MONOTONE = "not-monotone"  # a load under capacity above one over it
    BUDGET_SPENT = "budget-spent"  # the next step would end past the budget
    INVALID = "invalid"  # a step measured a client limit or a broken server


@dataclass(frozen=True, slots=True)
class SloReading:
    """One SLO at one step: its statistic's point value and verdict against its threshold.
    `pressure` is statistic / threshold for an upper bound (`<`), threshold / statistic for a
    lower bound (`>`): above 1 the point value violates it."""

    slo: str  # the rule as written, e.g. "ttft p90 < 500ms"
    value: float | None
    threshold: float
    upper_bound: bool  # `<` / `<=`: the statistic must stay below the threshold
    verdict: Verdict

    @property
    def pressure(self) -> float | None:
        value = self.value
        if (value is None or not math.isfinite(value) or value <= 0
                or not math.isfinite(self.threshold) or self.threshold <= 0):
            return None
        return value / self.threshold if self.upper_bound else self.threshold / value


@dataclass(frozen=True, slots=True)
class StepReading:
    """What one step measured at `load` (its `attempt`-th run at that load: 0 first)."""

    load: float
    attempt: int
    slos: tuple[SloReading, ...]
    stable: bool
    invalid_reason: str | None = None
    # requests the server completed per second over the window (None: not counted, or a load
    # not in req/s): an open loop's capacity can never exceed what an overloaded step completed
    completed_per_s: float | None = None

    @property
    def outcome(self) -> StepClass:
        if self.invalid_reason is not None:
            return StepClass.INVALID
        verdicts = {reading.verdict for reading in self.slos}
        if Verdict.FAIL in verdicts or not self.stable:
            return StepClass.OVER
        if Verdict.INCONCLUSIVE in verdicts:
            return StepClass.NEAR
        return StepClass.UNDER


@dataclass(frozen=True, slots=True)
class SearchRange:
    """The search's settings (capacity_spec.CapacitySpec, as numbers)."""

    low: float
    high: float
    tolerance: float  # the bracket's high/low - 1 to stop at
    lengthen: int = 1  # runs again of a near step, each with its window doubled
    whole: bool = False  # loads are whole numbers (users)
    required: float | None = None
    # a capacity race's floor: another candidate's lower bound; a search whose bracket lies
    # below it stops (raced out), and its first step after `low` probes the floor itself
    floor: float | None = None


@dataclass(frozen=True, slots=True)
class NextStep:
    load: float
    attempt: int  # 0: the load's first run; k: its window is 2**k times the scenario's

    @property
    def window_factor(self) -> float:
        return float(2 ** self.attempt)


@dataclass(frozen=True, slots=True)
class SearchEnd:
    status: SearchStatus
    reason: str


def latest_by_load(readings: Sequence[StepReading]) -> dict[float, StepReading]:
    """Each load's last attempt, in load order."""
    latest: dict[float, StepReading] = {}
    for reading in readings:
        latest[reading.load] = reading
    return dict(sorted(latest.items()))


def bracket(readings: Sequence[StepReading]) -> tuple[float | None, float | None]:
    """(highest load under capacity, lowest load over it); None where no step says."""
    latest = latest_by_load(readings).values()
    under = [r.load for r in latest if r.outcome is StepClass.UNDER]
    over = [r.load for r in latest if r.outcome is StepClass.OVER]
    return (max(under) if under else None, min(over) if over else None)


def midpoint(low: float, high: float, whole: bool) -> float:
    """The geometric midpoint (rounded for whole loads)."""
    middle = math.sqrt(low * high)
    return float(round(middle)) if whole else middle


def within_tolerance(low: float, high: float, search: SearchRange) -> bool:
    """The bracket [low, high] is as narrow as the search asks (whole loads: adjacent)."""
    if search.whole and high - low <= 1:
        return True
    return high / low - 1.0 <= search.tolerance + 1e-12


def samples_to_pass(percentile: float, confidence: float) -> int:
    """The fewest (effective) samples with which `p{percentile} < threshold` can PASS at
    `confidence` at all: every sample below the threshold, the two-sided Clopper-Pearson
    lower bound of the share below, ((1 - confidence) / 2) ** (1 / n), above the percentile's
    share (p90 at 0.99: 51; p99 at 0.99: 528; p99 at 0.95: 368)."""
    share = percentile / 100.0
    if not 0.0 < share < 1.0 or not 0.0 < confidence < 1.0:
        raise ValueError(f"percentile {percentile!r} and confidence {confidence!r} must lie "
                         "strictly between 0 and 100, 0 and 1")
    return math.floor(math.log((1.0 - confidence) / 2.0) / math.log(share)) + 1


def _load_text(load: float) -> str:
    return f"{load:.4g}"


def plan_next(readings: Sequence[StepReading], search: SearchRange) -> NextStep | SearchEnd:
    """The next step to run, or why the search is over."""
    for reading in readings:
        if reading.outcome is StepClass.INVALID:
            return SearchEnd(SearchStatus.INVALID, f"the step at {_load_text(reading.load)} "
                             f"is invalid: {reading.invalid_reason}")
    if readings:
        last = readings[-1]
        if last.outcome is StepClass.NEAR and last.attempt < search.lengthen:
            return NextStep(last.load, last.attempt + 1)
    latest = latest_by_load(readings)
    if search.low not in latest:
        return NextStep(search.low, 0)
    first = latest[search.low].outcome
    if first is StepClass.OVER:
        return SearchEnd(SearchStatus.BELOW_RANGE, f"the lowest load, {_load_text(search.low)}, "
                         "is already over capacity (lower capacity.low)")
    if first is StepClass.NEAR:
        return SearchEnd(SearchStatus.UNDECIDED, f"the lowest load, {_load_text(search.low)}, "
                         "is near capacity and stayed INCONCLUSIVE (lower capacity.low)")
    low, high = bracket(readings)
    assert low is not None
    if high is not None and high < low:
        return SearchEnd(SearchStatus.NOT_MONOTONE,
                         f"{_load_text(low)} is under capacity but {_load_text(high)} is over "
                         "it: latency is not monotone in load (restart or noise; rerun with "
                         "a longer traffic.duration)")
    if search.required is not None and high is not None and high <= search.required:
        return SearchEnd(SearchStatus.BELOW_REQUIREMENT,
                         f"{_load_text(high)} is over capacity: the capacity lies below the "
                         f"required {_load_text(search.required)}")
    if search.floor is not None and high is not None and high <= search.floor:
        return SearchEnd(SearchStatus.RACED_OUT,
                         f"{_load_text(high)} is over capacity: the capacity lies below the "
                         f"race's floor {_load_text(search.floor)} (a better candidate's "
                         "lower bound)")
    if search.floor is not None:
        probe = float(round(search.floor)) if search.whole else search.floor
        if low < probe < search.high and probe not in latest and (high is None or probe < high):
            return NextStep(probe, 0)
    if search.high not in latest:
        return NextStep(search.high, 0)
    if latest[search.high].outcome is StepClass.UNDER:
        return SearchEnd(SearchStatus.ABOVE_RANGE, f"the highest load, "
                         f"{_load_text(search.high)}, is still under capacity (raise "
                         "capacity.high)")
    if high is not None and within_tolerance(low, high, search):
        return SearchEnd(SearchStatus.BRACKETED, f"capacity between {_load_text(low)} and "
                         f"{_load_text(high)}")
    top = high if high is not None else search.high
    near = [load for load, r in latest.items()
            if r.outcome is StepClass.NEAR and low < load < top]
    gaps = [(low, near[0])] if near else [(low, top)]
    if near and high is not None:
        gaps.append((near[-1], high))
    for gap_low, gap_high in gaps:
        if not within_tolerance(gap_low, gap_high, search):
            load = midpoint(gap_low, gap_high, search.whole)
            if load not in latest:
                return NextStep(load, 0)
    return SearchEnd(SearchStatus.UNDECIDED,
                     f"steps at {', '.join(map(_load_text, near))} stayed INCONCLUSIVE after "
                     f"{search.lengthen} lengthening(s): the bracket [{_load_text(low)}, "
                     f"{_load_text(top)}] is wider than the tolerance (lengthen "
                     "traffic.duration, or widen capacity.tolerance)")


@dataclass(frozen=True, slots=True)
class CapacityEstimate:
    """The capacity: a point value and an interval (None: unbounded on that side, or no
    value), at `confidence`; which SLO limits it (None: the queue's growth did, or unknown)."""

    value: float | None
    low: float | None
    high: float | None
    confidence: float
    limiting_slo: str | None
    # the lowest completion rate of a step over capacity (req/s; None: no such step, or a load
    # not in req/s): the server's throughput ceiling, which bounds the capacity from above
    completion_ceiling: float | None = None


def completion_ceiling(readings: Sequence[StepReading]) -> float | None:
    """The lowest completion rate among the loads over capacity (each load's last attempt):
    arrivals beyond what the server completes only queue, so no sustainable arrival rate lies
    above it. At a stable over-step it is about the load itself; at an overloaded one it is the
    server's throughput (an H100 search once printed 59 req/s from a bracket [38, 64] whose 64
    req/s step completed 36)."""
    rates = [r.completed_per_s for r in latest_by_load(readings).values()
             if r.outcome is StepClass.OVER and r.completed_per_s is not None
             and math.isfinite(r.completed_per_s) and r.completed_per_s > 0]
    return min(rates) if rates else None


def bounded_by_ceiling(estimate: CapacityEstimate, ceiling: float | None) -> CapacityEstimate:
    """The estimate with nothing above the completion ceiling: the interval's high end and the
    point value at most the ceiling. A ceiling below the interval's low end (a load read under
    capacity above what an overloaded step completed: two readings that disagree within their
    noise) widens the interval down to it instead of claiming a single load."""
    if ceiling is None:
        return estimate
    low, high, value = estimate.low, estimate.high, estimate.value
    if low is not None and ceiling < low:
        low, high = ceiling, low
    elif high is None or ceiling < high:
        high = ceiling
    if value is not None and high is not None:
        value = min(value, high)
    if value is not None and low is not None:
        value = max(value, low)
    return dataclasses.replace(estimate, value=value, low=low, high=high,
                               completion_ceiling=ceiling)


def _limiting(over: StepReading) -> SloReading | None:
    """At the lowest load over capacity: the failed SLO under the most pressure (else the
    most pressed SLO, when only the queue's growth made the step over)."""
    failed = [r for r in over.slos if r.verdict is Verdict.FAIL]
    candidates = [r for r in (failed or over.slos) if r.pressure is not None]
    if not candidates:
        return failed[0] if failed else None
    return max(candidates, key=lambda r: r.pressure or 0.0)


def interpolated_crossing(low: float, high: float, pressure_low: float | None,
                          pressure_high: float | None, whole: bool = False) -> float:
    """Where log(pressure) crosses 0 on a line in log(load) between the two ends (clipped to
    them); the geometric midpoint when the pressures cannot say."""
    middle = math.sqrt(low * high)
    if (pressure_low is None or pressure_high is None or pressure_high <= pressure_low
            or high <= low):
        value = middle
    else:
        fraction = -math.log(pressure_low) / (math.log(pressure_high) - math.log(pressure_low))
        value = low * (high / low) ** float(np.clip(fraction, 0.0, 1.0))
    return float(round(value)) if whole else value


def estimate_capacity(readings: Sequence[StepReading], search: SearchRange,
                      confidence: float) -> CapacityEstimate:
    """The capacity from the steps so far: the bracket as its interval, the limiting SLO's
    crossing as its value; one end open when the range did not bracket it; nothing above the
    completion ceiling (`bounded_by_ceiling`)."""
    low, high = bracket(readings)
    latest = latest_by_load(readings)
    if low is not None and high is not None and high < low:  # not monotone: no capacity
        return CapacityEstimate(None, None, None, confidence, None)
    if high is None:
        return CapacityEstimate(None, low, None, confidence, None)
    limiting = _limiting(latest[high])
    ceiling = completion_ceiling(readings)
    if low is None:
        return bounded_by_ceiling(CapacityEstimate(None, None, high, confidence,
                                                   limiting.slo if limiting else None), ceiling)
    pressure_low = None
    if limiting is not None:
        pressure_low = next((r.pressure for r in latest[low].slos if r.slo == limiting.slo),
                            None)
    value = interpolated_crossing(low, high, pressure_low,
                                  limiting.pressure if limiting else None, search.whole)
    return bounded_by_ceiling(
        CapacityEstimate(value, low, high, confidence, limiting.slo if limiting else None),
        ceiling)


def quarter_levels(times_s: np.ndarray, values: np.ndarray, start_s: float, span_s: float,
                   how: str) -> np.ndarray | None:
    """`values` (at `times_s`) in the four quarters of [start, start + span): each quarter's
    median (`how="median"`) or mean; None when a quarter holds no value."""
    times = np.asarray(times_s, dtype=np.float64)
    data = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(times) & np.isfinite(data)
    times, data = times[keep], data[keep]
    if span_s <= 0:
        return None
    quarter = np.floor((times - start_s) / (span_s / 4.0)).astype(np.int64)
    levels = []
    for index in range(4):
        inside = data[quarter == index]
        if inside.size == 0:
            return None
        levels.append(float(np.median(inside) if how == "median" else np.mean(inside)))
    return np.asarray(levels)


def grows(levels: np.ndarray | None, ratio: float, floor: float,
          plateau: bool = False) -> bool:
    """A level that rises quarter after quarter (`plateau`: never falls, for a queue that
    reaches the client's in-flight cap and stays there) and ends at least `ratio` times and `floor`
    above where it began (a queue filling up; a stationary series rises through four
    quarters with probability 1/24 and rarely by that much)."""
    if levels is None:
        return False
    steps = np.diff(levels)
    rising = bool(np.all(steps >= 0) if plateau else np.all(steps > 0))
    return rising and levels[-1] >= ratio * levels[0] and levels[-1] - levels[0] >= floor
