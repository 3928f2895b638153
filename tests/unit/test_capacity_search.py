"""The capacity search (vllm_slo/stats/capacity_search.py): the order of its steps, every way
it stops, the estimate, the growth rule; the M/D/c stand-in it is calibrated on
(tests/support/queue_simulation.py); and the bracket's coverage of the stand-in's known
capacity (the full table: benchmarks/capacity_calibration.py)."""

from __future__ import annotations

import heapq
import math

import numpy as np
import pytest
from scipy import stats

from tests.support.capacity_simulation import PercentileSlo, search
from tests.support.queue_simulation import (
    KNOWN_CROSSINGS,
    SERVICE_S,
    SLOTS,
    poisson_arrivals,
    queue_waits,
    simulate_run,
    true_crossing,
)
from vllm_slo.stats.capacity_search import (
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
from vllm_slo.stats.statistics import Verdict

P, F, N = Verdict.PASS, Verdict.FAIL, Verdict.INCONCLUSIVE  # N: near
RANGE = SearchRange(low=4.0, high=16.0, tolerance=0.5)


def step(load: float, verdict: Verdict, attempt: int = 0, stable: bool = True,
         value: float | None = None, invalid: str | None = None) -> StepReading:
    return StepReading(load, attempt, (SloReading("ttft p90 < 500ms", value, 0.5, True,
                                                  verdict),), stable, invalid)


def reading(slo: str, value: float, verdict: Verdict) -> SloReading:
    return SloReading(slo, value, 1.0, True, verdict)


# --- plan_next ---------------------------------------------------------------------------

def test_low_first_then_high_then_geometric_midpoints() -> None:
    steps = []
    assert plan_next(steps, RANGE) == NextStep(4.0, 0)
    steps.append(step(4.0, P))
    assert plan_next(steps, RANGE) == NextStep(16.0, 0)
    steps.append(step(16.0, F))
    assert plan_next(steps, RANGE) == NextStep(8.0, 0)
    steps.append(step(8.0, P))
    assert plan_next(steps, RANGE) == NextStep(pytest.approx(math.sqrt(128.0)), 0)
    steps.append(step(math.sqrt(128.0), F))
    end = plan_next(steps, RANGE)  # 11.31 / 8 - 1 = 0.41 <= 0.5
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.BRACKETED
    assert "between 8 and 11.31" in end.reason


def test_low_over_capacity_is_below_range() -> None:
    end = plan_next([step(4.0, F)], RANGE)
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.BELOW_RANGE
    unstable = plan_next([step(4.0, P, stable=False)], RANGE)  # a growing queue is over
    assert isinstance(unstable, SearchEnd) and unstable.status is SearchStatus.BELOW_RANGE


def test_high_under_capacity_is_above_range() -> None:
    end = plan_next([step(4.0, P), step(16.0, P)], RANGE)
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.ABOVE_RANGE


def test_near_step_is_lengthened_then_splits_the_bracket() -> None:
    steps = [step(4.0, P), step(16.0, F), step(8.0, N)]
    assert plan_next(steps, RANGE) == NextStep(8.0, 1)
    assert NextStep(8.0, 1).window_factor == 2.0
    steps.append(step(8.0, N, attempt=1))
    # still near: both halves are searched, the lower first
    assert plan_next(steps, RANGE) == NextStep(pytest.approx(math.sqrt(32.0)), 0)
    steps.append(step(math.sqrt(32.0), P))
    assert plan_next(steps, RANGE) == NextStep(pytest.approx(math.sqrt(128.0)), 0)
    # no lengthening asked: a near step splits at once
    once = SearchRange(4.0, 16.0, 0.5, lengthen=0)
    assert plan_next([step(4.0, P), step(16.0, F), step(8.0, N)], once) == NextStep(
        pytest.approx(math.sqrt(32.0)), 0)


def test_lengthened_near_step_that_passes_counts_as_under() -> None:
    steps = [step(4.0, P), step(16.0, F), step(8.0, N), step(8.0, P, attempt=1)]
    assert plan_next(steps, RANGE) == NextStep(pytest.approx(math.sqrt(128.0)), 0)


def test_near_steps_filling_the_bracket_leave_it_undecided() -> None:
    steps = [step(4.0, P), step(16.0, F)]
    for load in (8.0, math.sqrt(32.0), math.sqrt(128.0)):
        steps += [step(load, N), step(load, N, attempt=1)]
    end = plan_next(steps, RANGE)
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.UNDECIDED
    assert "[4, 16]" in end.reason


def test_low_near_is_undecided() -> None:
    end = plan_next([step(4.0, N), step(4.0, N, attempt=1)], RANGE)
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.UNDECIDED


def test_under_above_over_is_not_monotone() -> None:
    steps = [step(4.0, P), step(16.0, F), step(8.0, F), step(math.sqrt(32.0), P),
             step(6.0, P)]
    steps.append(step(12.0, P))  # under, above 8 which was over
    end = plan_next(steps, RANGE)
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.NOT_MONOTONE
    estimate = estimate_capacity(steps, RANGE, 0.95)
    assert (estimate.value, estimate.low, estimate.high) == (None, None, None)


def test_over_below_the_requirement_stops_early() -> None:
    required = SearchRange(4.0, 16.0, 0.05, required=10.0)
    assert plan_next([step(4.0, P)], required) == NextStep(16.0, 0)
    steps = [step(4.0, P), step(16.0, F), step(8.0, F)]
    end = plan_next(steps, required)
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.BELOW_REQUIREMENT
    assert plan_next([*steps[:2], step(8.0, P)], required) == NextStep(
        pytest.approx(math.sqrt(128.0)), 0)


def test_whole_loads_round_and_stop_when_adjacent() -> None:
    users = SearchRange(1.0, 32.0, 0.01, whole=True)
    steps = [step(1.0, P), step(32.0, F)]
    assert plan_next(steps, users) == NextStep(6.0, 0)  # round(sqrt(32)) = round(5.66)
    steps += [step(6.0, F), step(2.0, P), step(3.0, P), step(4.0, P), step(5.0, P)]
    end = plan_next(steps, users)
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.BRACKETED


def test_invalid_step_ends_the_search() -> None:
    end = plan_next([step(4.0, P), step(16.0, F, invalid="client saturated")], RANGE)
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.INVALID
    assert "client saturated" in end.reason


# --- estimate_capacity --------------------------------------------------------------------

def test_estimate_interpolates_log_pressure_in_log_load() -> None:
    steps = [step(4.0, P, value=0.1), step(16.0, F, value=5.0), step(8.0, P, value=0.4),
             step(10.0, F, value=0.625)]
    estimate = estimate_capacity(steps, RANGE, 0.95)
    # pressures 0.8 and 1.25: log-symmetric about 1, so the crossing is the geometric middle
    assert (estimate.low, estimate.high) == (8.0, 10.0)
    assert estimate.value == pytest.approx(math.sqrt(80.0))
    assert estimate.limiting_slo == "ttft p90 < 500ms" and estimate.confidence == 0.95


def test_estimate_without_pressures_takes_the_geometric_midpoint() -> None:
    estimate = estimate_capacity([step(4.0, P), step(16.0, F)], RANGE, 0.95)
    assert estimate.value == pytest.approx(8.0)


def test_estimate_open_ends() -> None:
    only_under = estimate_capacity([step(4.0, P), step(16.0, P)], RANGE, 0.95)
    assert (only_under.value, only_under.low, only_under.high) == (None, 16.0, None)
    only_over = estimate_capacity([step(4.0, F, value=0.9)], RANGE, 0.95)
    assert (only_over.value, only_over.low, only_over.high) == (None, None, 4.0)
    assert only_over.limiting_slo == "ttft p90 < 500ms"


def test_limiting_slo_is_the_failed_one_under_most_pressure() -> None:
    over = StepReading(10.0, 0, (reading("ttft p90 < 1s", 1.9, F),
                                 reading("e2e p99 < 1s", 1.4, F),
                                 reading("tpot p50 < 1s", 2.5, P)), True)
    under = StepReading(8.0, 0, (reading("ttft p90 < 1s", 0.8, P),
                                 reading("e2e p99 < 1s", 0.7, P),
                                 reading("tpot p50 < 1s", 0.5, P)), True)
    estimate = estimate_capacity([under, over], SearchRange(8.0, 10.0, 0.5), 0.95)
    assert estimate.limiting_slo == "ttft p90 < 1s"
    fraction = -math.log(0.8) / (math.log(1.9) - math.log(0.8))
    assert estimate.value == pytest.approx(8.0 * 1.25 ** fraction)
    grew = StepReading(10.0, 0, (reading("ttft p90 < 1s", 0.9, P),
                                 reading("e2e p99 < 1s", 0.95, P)), False)  # only unstable
    assert estimate_capacity([under, grew], SearchRange(8.0, 10.0, 0.5),
                             0.95).limiting_slo == "e2e p99 < 1s"


# --- grows, quarter_levels ----------------------------------------------------------------

@pytest.mark.parametrize(("levels", "expected"), [
    ([0.10, 0.12, 0.14, 0.20], True),
    ([0.10, 0.12, 0.11, 0.20], False),  # not rising every quarter
    ([0.10, 0.11, 0.12, 0.14], False),  # rises, but by less than 1.5x
    ([0.010, 0.012, 0.014, 0.020], False),  # 2x, but by less than 50 ms
    (None, False),
])
def test_grows(levels: list[float] | None, expected: bool) -> None:
    array = None if levels is None else np.asarray(levels)
    assert grows(array, 1.5, 0.05) == expected


def test_quarter_levels() -> None:
    times = np.arange(8.0)
    values = np.array([1.0, 3.0, 2.0, 4.0, 5.0, 7.0, 6.0, 10.0])
    assert quarter_levels(times, values, 0.0, 8.0, "median").tolist() == [2.0, 3.0, 6.0, 8.0]
    assert quarter_levels(times[:5], values[:5], 0.0, 8.0, "mean") is None  # an empty quarter


# --- the stand-in ---------------------------------------------------------------------------

def test_vectorised_queue_equals_an_event_simulation() -> None:
    arrivals = poisson_arrivals(np.random.default_rng(1), 11.0, 500.0)
    waits = queue_waits(arrivals, SLOTS, SERVICE_S)
    free = [0.0] * SLOTS
    expected = []
    for arrival in arrivals:
        start = max(arrival, heapq.heappop(free))
        expected.append(start - arrival)
        heapq.heappush(free, start + SERVICE_S)
    np.testing.assert_allclose(waits, expected, atol=1e-9)
    assert np.count_nonzero(waits == 0.0) > 0.1 * waits.size  # free slots: exactly 0


def test_run_measures_the_requests_sent_in_the_window() -> None:
    run = simulate_run(np.random.default_rng(2), 5.0, 10.0, 30.0)
    assert run.send_s.min() >= 10.0 and run.send_s.max() < 40.0
    assert 100 < run.send_s.size < 200
    np.testing.assert_allclose(run.e2e_s - run.ttft_s, SERVICE_S - 0.05)
    assert run.ttft_s.min() == 0.05


def test_known_crossing_matches_a_shorter_simulation() -> None:
    """KNOWN_CROSSINGS came from 20 M requests; 2 M (another seed) agree within 0.5%. The
    brief's 9.79 req/s for ttft p90 < 500 ms is 0.5% low: the exact simulation says 9.84."""
    short = true_crossing(90, 0.5, "ttft", requests=2_000_000, warmup_requests=20_000, seed=5)
    assert short == pytest.approx(KNOWN_CROSSINGS[("ttft", 90.0, 0.5)], rel=0.005)


# --- coverage -------------------------------------------------------------------------------

COVERAGE_SEEDS = 300


def test_bracket_covers_the_known_capacity() -> None:
    """ttft p90 < 500ms on the stand-in, [4, 16] req/s, tolerance 10%, warm-up 10 s, window
    60 s, each step decided at capacity.step_confidence's default 0.99: the bracket holds the
    true crossing in >= 93% of 300 searches (292 of these seeds; decided at 0.95 the steps
    gave about 93% and at 30 s windows 87%: benchmarks/capacity_calibration.py,
    docs/statistics.md "Capacity")."""
    slo = PercentileSlo("ttft", 90.0, 0.5)
    truth = KNOWN_CROSSINGS[("ttft", 90.0, 0.5)]
    range_ = SearchRange(4.0, 16.0, 0.10)
    covered = sum(search(np.random.default_rng(seed), [slo], range_, 10.0, 60.0).covers(truth)
                  for seed in range(COVERAGE_SEEDS))
    interval = stats.binomtest(covered, COVERAGE_SEEDS).proportion_ci(0.95)
    coverage = covered / COVERAGE_SEEDS
    assert coverage >= 0.93, (
        f"the bracket covered {truth:.3f} req/s in {covered}/{COVERAGE_SEEDS} = {coverage:.1%} "
        f"of searches (95% CI [{interval.low:.1%}, {interval.high:.1%}]), below 93%")
