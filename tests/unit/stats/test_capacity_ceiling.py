"""The completion ceiling (stats/capacity_search.py): an open loop's capacity never lies above
the completion rate of a step over capacity, and two brackets that touch decide nothing
(analysis/capacity_comparison.py). The H100 search of 2026-12-05 is the worked case: the tuned
config's bracket [38.05, 64] gave a point value of 59 req/s though its 64 req/s step completed
36, and its bracket touched the defaults' [22.63, 38.05], which was called "1.55x higher"."""

from __future__ import annotations

import dataclasses

import pytest

from tests.unit.test_capacity_report import search_document
from vllm_slo.analysis.capacity_comparison import CapacityChange, capacity_ratio
from vllm_slo.reports.render.capacity_text import render_capacity_text
from vllm_slo.stats.capacity_search import (
    CapacityEstimate,
    SearchRange,
    SloReading,
    StepReading,
    bounded_by_ceiling,
    completion_ceiling,
    estimate_capacity,
)
from vllm_slo.stats.statistics import Verdict

P, F = Verdict.PASS, Verdict.FAIL
SEARCH = SearchRange(low=16.0, high=64.0, tolerance=0.1)


def step(load: float, verdict: Verdict, completed_per_s: float | None, pressure: float,
         stable: bool = True) -> StepReading:
    slo = SloReading("tpot p90 < 50ms", 0.05 * pressure, 0.05, True, verdict)
    return StepReading(load, 0, (slo,), stable, None, completed_per_s)


def test_an_overloaded_steps_completions_cap_the_point_value_and_the_interval() -> None:
    # under at 38.05 (completing what arrived), over at 64 with the queue growing: 36 done
    steps = [step(16.0, P, 16.0, 0.5), step(64.0, F, 36.0, 2.6, stable=False),
             step(38.05, P, 38.0, 0.95)]
    uncapped = estimate_capacity([StepReading(s.load, s.attempt, s.slos, s.stable)
                                  for s in steps], SEARCH, 0.95)
    assert uncapped.value is not None and uncapped.value > 38.05  # what was printed before
    assert completion_ceiling(steps) == 36.0
    capped = estimate_capacity(steps, SEARCH, 0.95)
    assert capped.completion_ceiling == 36.0
    # the ceiling under a load read under capacity: the two readings disagree, and the
    # interval spans both instead of claiming one load
    assert (capped.low, capped.high) == (36.0, 38.05)
    assert capped.value is not None and 36.0 <= capped.value <= 38.05


def test_a_ceiling_inside_the_bracket_lowers_its_high_end() -> None:
    steps = [step(16.0, P, 16.0, 0.5), step(64.0, F, 40.0, 3.0, stable=False)]
    capped = estimate_capacity(steps, SEARCH, 0.95)
    assert (capped.low, capped.high) == (16.0, 40.0)
    assert capped.value is not None and 16.0 <= capped.value <= 40.0


def test_only_steps_over_capacity_set_the_ceiling() -> None:
    steps = [step(16.0, P, 15.2, 0.5), step(30.0, P, 29.0, 0.8), step(64.0, F, 61.0, 1.5)]
    # a stable over-step completes about its load: no bound below the bracket's own end
    assert completion_ceiling(steps) == 61.0
    capped = estimate_capacity(steps, SEARCH, 0.95)
    assert (capped.low, capped.high) == (30.0, 61.0)
    assert completion_ceiling([step(16.0, P, 16.0, 0.5)]) is None  # nothing over capacity
    assert completion_ceiling([step(64.0, F, None, 2.0)]) is None  # not counted (users)


def test_no_ceiling_leaves_the_estimate_as_it_was() -> None:
    estimate = CapacityEstimate(30.0, 20.0, 40.0, 0.95, "ttft p90 < 1s")
    assert bounded_by_ceiling(estimate, None) == estimate
    above = bounded_by_ceiling(estimate, 50.0)
    assert (above.value, above.low, above.high, above.completion_ceiling) == (
        30.0, 20.0, 40.0, 50.0)
    open_ended = bounded_by_ceiling(CapacityEstimate(None, 20.0, None, 0.95, None), 35.0)
    assert (open_ended.low, open_ended.high) == (20.0, 35.0)


def test_brackets_that_touch_are_undecided_not_higher() -> None:
    defaults = CapacityEstimate(30.0, 22.63, 38.05, 0.95, "tpot p90 < 50ms")
    tuned = CapacityEstimate(59.0, 38.05, 64.0, 0.95, "tpot p90 < 50ms")
    ratio = capacity_ratio(defaults, tuned)
    assert ratio.low == pytest.approx(1.0)
    assert ratio.change is CapacityChange.UNDECIDED
    assert capacity_ratio(tuned, defaults).change is CapacityChange.UNDECIDED
    # apart by any margin, they decide
    apart = CapacityEstimate(59.0, 40.0, 64.0, 0.95, "tpot p90 < 50ms")
    assert capacity_ratio(defaults, apart).change is CapacityChange.HIGHER
    assert capacity_ratio(apart, defaults).change is CapacityChange.LOWER


def test_the_text_report_says_when_the_ceiling_bounded_the_capacity() -> None:
    document = search_document()  # bracket [9.5, 10.4]: its lowest load over is 10.4
    assert "completed at most" not in render_capacity_text(document)
    capped = dataclasses.replace(document, capacity=dataclasses.replace(
        document.capacity, high=10.1, value=10.0, completion_ceiling=10.1))
    text = render_capacity_text(capped)
    assert ("the server completed at most 10.1 req/s at a load over capacity: neither the "
            "capacity nor its interval lies above that") in text
    assert "capacity 10 req/s [9.5, 10.1] (95%)" in text
    above = dataclasses.replace(document, capacity=dataclasses.replace(
        document.capacity, completion_ceiling=10.4))  # at the over load: it bounded nothing
    assert "completed at most" not in render_capacity_text(above)
