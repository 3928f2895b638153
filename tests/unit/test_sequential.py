"""The sequential trial decision (vllm_slo/stats/sequential.py): the tests' known values, the
spending and its boundaries, the reduction to the fixed design, the design check, sticky
decisions, degenerate inputs, and a small calibration against tests/support/trial_simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from tests.support.trial_simulation import (
    CHANGED,
    EQUIVALENT,
    UNDECIDED,
    Scenario,
    instance_effects,
    run_sequential,
    simulate,
)
from vllm_slo.analysis.comparison import min_trials_for_family
from vllm_slo.stats.sequential import (
    SequentialDesign,
    all_decided,
    alpha_spent,
    check_design,
    decide_cells,
    look_alpha,
    mann_whitney_log_tests,
    nominal_levels,
    spending,
    welch_log_tests,
)
from vllm_slo.stats.trial_statistics import (
    compare_trials,
    holm_adjust,
    welch_log_ratio,
    with_holm,
)

CODES = {"undecided": UNDECIDED, "changed": CHANGED, "equivalent": EQUIVALENT}


def _design(min_trials: int = 3, max_trials: int = 10, cells: int = 2, test: str = "welch-log",
            **kwargs: object) -> SequentialDesign:
    return SequentialDesign(min_trials, max_trials, 0.05, 0.10, cells, test,  # type: ignore[arg-type]
                            **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------
# the tests


def test_a_look_with_a_missing_trial_tests_nothing() -> None:
    """3 + 2 valid trials at the look after 3 rounds: Welch's df there is 1.2-2.5 and its A/A
    rate at the looks' small levels up to 2.8x nominal, so the look waits for a 3rd valid
    trial; with it the same clear change is decided."""
    graphs = [11.43, 11.76, 11.49]
    eager = [23.68, 23.64, float("nan")]  # the 3rd eager trial failed
    design = _design(3, 6, 1)
    [decision] = decide_cells(design, 3, {"tpot.p50": (graphs, eager)})
    assert decision.decision == "undecided" and decision.p_change is None
    assert any("a look needs 3 valid trials per arm (have 3 + 2)" in w
               for w in decision.warnings)
    [later] = decide_cells(design, 4, {"tpot.p50": ([*graphs, 11.6], [*eager, 23.7])})
    assert later.decision == "changed"


def test_welch_log_matches_scipy_and_the_gate_interval() -> None:
    a = np.array([10.2, 11.5, 9.8, 10.9, 10.1])
    b = np.array([12.9, 13.8, 12.1, 14.4])
    result = welch_log_tests(np.log(a), np.log(b), 0.10)
    expected = stats.ttest_ind(np.log(b), np.log(a), equal_var=False)
    assert float(result.p_change) == pytest.approx(expected.pvalue, rel=1e-10)
    assert math.exp(float(result.log_ratio)) == pytest.approx(
        math.exp(np.log(b).mean() - np.log(a).mean()), rel=1e-12)
    # TOST: each one-sided p from scipy's one-sided Welch on the shifted logs
    margin = math.log(1.1)
    p_low = stats.ttest_ind(np.log(b) + margin, np.log(a), equal_var=False,
                            alternative="greater").pvalue
    p_high = stats.ttest_ind(np.log(b) - margin, np.log(a), equal_var=False,
                             alternative="less").pvalue
    assert float(result.p_equivalence) == pytest.approx(max(p_low, p_high), rel=1e-10)
    # a fixed design of one cell: the interval is the gate's Welch interval at 1 - alpha
    # (5 + 5 trials: a look needs min_trials valid trials an arm)
    b = np.append(b, 13.1)
    [decision] = decide_cells(_design(5, 5, 1), 5, {"tpot.p50": (list(a), list(b))})
    gate = welch_log_ratio(b, a, 0.95)
    assert decision.ratio.value == pytest.approx(gate.value, rel=1e-12)
    assert decision.ratio.ci_low == pytest.approx(gate.ci_low, rel=1e-9)
    assert decision.ratio.ci_high == pytest.approx(gate.ci_high, rel=1e-9)
    assert decision.alpha_look == pytest.approx(0.05)
    assert decision.p_change == pytest.approx(
        stats.ttest_ind(np.log(b), np.log(a), equal_var=False).pvalue, rel=1e-10)


def test_mann_whitney_tests_match_scipy_exact() -> None:
    rng = np.random.default_rng(3)
    for n_a, n_b in ((4, 4), (3, 6), (7, 5)):
        a, b = rng.normal(0, 0.1, n_a), rng.normal(0.05, 0.1, n_b)
        result = mann_whitney_log_tests(a, b, 0.10)
        expected = stats.mannwhitneyu(b, a, alternative="two-sided", method="exact")
        assert float(result.p_change) == pytest.approx(expected.pvalue, rel=1e-9)
        margin = math.log(1.1)
        p_low = stats.mannwhitneyu(b + margin, a, alternative="greater", method="exact").pvalue
        p_high = stats.mannwhitneyu(b - margin, a, alternative="less", method="exact").pvalue
        assert float(result.p_equivalence) == pytest.approx(max(p_low, p_high), rel=1e-9)


def test_mann_whitney_beyond_the_exact_table_is_the_normal_approximation() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.normal(0, 0.1, 120), rng.normal(0.03, 0.1, 120)
    result = mann_whitney_log_tests(a, b, 0.10)
    expected = stats.mannwhitneyu(b, a, alternative="two-sided", method="asymptotic")
    assert float(result.p_change) == pytest.approx(expected.pvalue, rel=1e-6)


# ------------------------------------------------------------------------------------------
# spending and boundaries


@pytest.mark.parametrize("function", ["obrien-fleming", "pocock"])
def test_spending_sums_to_alpha(function: str) -> None:
    design = _design(3, 10, spending=function)
    assert alpha_spent(design, 2) == 0.0
    spent = [alpha_spent(design, n) for n in design.looks]
    assert spent == sorted(spent) and spent[-1] == pytest.approx(0.05, abs=1e-15)
    increments = np.diff([0.0, *spent])
    assert (increments > 0).all() and increments.sum() == pytest.approx(0.05, abs=1e-15)
    assert spending(1.0, 0.05, 1, function) == pytest.approx(0.05)  # type: ignore[arg-type]


@pytest.mark.parametrize(("sided", "function"), [(2, "obrien-fleming"), (1, "obrien-fleming"),
                                                 (2, "pocock")])
def test_boundaries_cross_with_the_spent_probabilities(sided: int, function: str) -> None:
    """Brownian motion observed at 3..10 of 10: the first crossing of the computed boundaries
    happens at each look with the spending increment's probability (Monte Carlo, 4 SE)."""
    looks = tuple(range(3, 11))
    levels = np.asarray(nominal_levels(looks, 10, 0.05, sided, function))  # type: ignore[arg-type]
    rng = np.random.default_rng(11)
    paths = np.cumsum(rng.standard_normal((200_000, 10)), axis=1)
    n = np.asarray(looks)
    z = paths[:, n - 1] / np.sqrt(n)
    bounds = stats.norm.isf(levels / sided)
    crossed = (np.abs(z) if sided == 2 else z) > bounds
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    spent = np.diff([0.0, *(spending(k / 10, 0.05, sided, function)  # type: ignore[arg-type]
                            for k in looks)])
    for k, expected in enumerate(spent):
        observed = float((first == k).mean())
        assert abs(observed - expected) < 4 * math.sqrt(expected / 200_000) + 1e-4, k
    assert float((first >= 0).mean()) == pytest.approx(0.05, abs=0.002)


def test_look_alpha() -> None:
    fixed = _design(4, 4)
    assert look_alpha(fixed, 4) == 0.05
    assert nominal_levels((4,), 4, 0.025, 1) == (0.025,)
    design = _design(3, 10)
    levels = [look_alpha(design, n) for n in design.looks]
    assert look_alpha(design, 2) == 0.0
    assert levels == sorted(levels) and 0.0 < levels[0] < levels[-1] < 0.05
    # the first look's level is what the spending grants it (nothing was spent before)
    assert levels[0] == pytest.approx(alpha_spent(design, 3), rel=1e-12)
    with pytest.raises(ValueError, match="beyond max_trials"):
        look_alpha(design, 11)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"min_trials": 0}, "min_trials"), ({"min_trials": 5, "max_trials": 4}, "max_trials"),
    ({"cells": 0}, "cells"), ({"test": "t-test"}, "test must be one of"),
    ({"spending": "linear"}, "spending must be one of"),
])
def test_design_validation(kwargs: dict[str, object], match: str) -> None:
    arguments: dict[str, object] = {"min_trials": 3, "max_trials": 10, "alpha": 0.05,
                                    "effect": 0.1, "cells": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        SequentialDesign(**arguments)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="effect"):
        SequentialDesign(3, 10, 0.05, 0.0, 2)
    with pytest.raises(ValueError, match="alpha"):
        SequentialDesign(3, 10, 1.5, 0.1, 2)


# ------------------------------------------------------------------------------------------
# the fixed design is the non-sequential test


@pytest.mark.parametrize("seed", range(8))
def test_fixed_design_is_welch_with_holm(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cells = {f"c{i}": (list(np.exp(rng.normal(0, 0.2, 5))),
                       list(np.exp(rng.normal(0.25 * i, 0.2, 5)))) for i in range(3)}
    decisions = decide_cells(_design(5, 5, 3), 5, cells)
    raw = [stats.ttest_ind(np.log(b), np.log(a), equal_var=False).pvalue
           for a, b in cells.values()]
    adjusted = holm_adjust(raw)
    for decision, p in zip(decisions, adjusted, strict=True):
        assert decision.p_change == pytest.approx(p, rel=1e-9)
        assert (decision.decision == "changed") == (p < 0.05)


@pytest.mark.parametrize("seed", range(8))
def test_fixed_design_is_mann_whitney_with_holm(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    cells = {f"c{i}": (list(np.exp(rng.normal(0, 0.2, 6))),
                       list(np.exp(rng.normal(0.3 * i, 0.2, 6)))) for i in range(2)}
    decisions = decide_cells(_design(6, 6, 2, "mann-whitney"), 6, cells)
    existing = with_holm([compare_trials(np.asarray(a), np.asarray(b)) for a, b in cells.values()])
    for decision, comparison in zip(decisions, existing, strict=True):
        assert decision.p_change == pytest.approx(comparison.p_adjusted, rel=1e-9)
        assert (decision.decision == "changed") == comparison.significant


# ------------------------------------------------------------------------------------------
# the design check


def test_check_design_refuses_the_h200_rank_design() -> None:
    """The shipped H200 A/Bs ran 4 + 4 trials, 2 compared cells, the rank test: no outcome could
    be significant after Holm. The smallest count agrees with compare's own floor."""
    check = check_design(_design(4, 4, 2, "mann-whitney"))
    assert not check.can_decide
    assert check.smallest_trials == min_trials_for_family(2, 0.05) == 5
    assert "use max trials >= 5" in check.reason and "welch-log" in check.reason
    assert check_design(_design(5, 5, 2, "mann-whitney")).can_decide
    welch = check_design(_design(4, 4, 2, "welch-log"))
    assert welch.can_decide and welch.smallest_trials is None and welch.reason == ""
    for cells in (1, 3, 6):
        assert check_design(_design(3, 3, cells, "mann-whitney")).smallest_trials == \
            min_trials_for_family(cells, 0.05)


def test_check_design_sequential_and_welch_floor() -> None:
    # a rank test that stops at 4 per arm can never decide 2 cells; at 10 it can
    short = check_design(_design(3, 4, 2, "mann-whitney"))
    assert not short.can_decide and short.smallest_trials is not None
    assert check_design(_design(3, short.smallest_trials, 2, "mann-whitney")).can_decide
    assert check_design(_design(3, 10, 2, "mann-whitney")).can_decide
    one = check_design(_design(1, 1, 1, "welch-log"))
    assert not one.can_decide and one.smallest_trials == 2 and ">= 2 trials" in one.reason


# ------------------------------------------------------------------------------------------
# decisions


def test_clear_threefold_change_on_three_trials_is_changed() -> None:
    values = {"itl.p50": ([15.1, 14.8, 15.3], [45.2, 44.1, 46.0]),
              "ttft.p50": ([50.2, 49.9, 50.4], [50.1, 50.3, 49.8])}
    for design in (_design(3, 10), _design(3, 3)):
        itl, ttft = decide_cells(design, 3, values)
        assert itl.decision == "changed" and itl.decision_trials == 3
        assert itl.ratio.value == pytest.approx(3.0, rel=0.02)
        assert itl.ratio.ci_low is not None and itl.ratio.ci_low > 1.0
        assert ttft.decision == "equivalent"
        assert ttft.ratio.ci_low is not None and ttft.ratio.ci_high is not None
        assert 1 / 1.1 < ttft.ratio.ci_low < 1.0 < ttft.ratio.ci_high < 1.1
        assert all_decided((itl, ttft))


def test_identical_values_are_equivalent() -> None:
    values = {"ttft.p50": ([100.0, 100.0, 100.0], [100.0, 100.0, 100.0])}
    [decision] = decide_cells(_design(3, 10, 1), 3, values)
    assert decision.decision == "equivalent" and decision.p_change == 1.0
    assert decision.ratio.value == 1.0
    assert any("no trial-to-trial variation" in w for w in decision.ratio.warnings)


def test_decided_cells_stay_decided() -> None:
    """Decided at look 3; later trials that alone would leave it undecided change nothing, and
    the decision names the look it was reached at."""
    a = [10.0, 10.1, 9.9, 30.0, 8.0, 25.0]
    b = [30.0, 30.3, 29.7, 10.0, 31.0, 9.0]
    design = _design(3, 10, 1)
    first = decide_cells(design, 3, {"x": (a, b)})[0]
    assert first.decision == "changed"
    later = decide_cells(design, 6, {"x": (a, b)})[0]
    assert later.p_change is not None and later.p_change > 0.05  # today's data alone: no change
    assert later.decision == "changed" and later.decision_trials == 3
    # an equivalent cell stays equivalent too
    a_eq = [100.0, 100.2, 99.8, 50.0, 200.0]
    b_eq = [100.1, 99.9, 100.0, 200.0, 50.0]
    assert decide_cells(design, 3, {"y": (a_eq, b_eq)})[0].decision == "equivalent"
    assert decide_cells(design, 5, {"y": (a_eq, b_eq)})[0].decision == "equivalent"


def test_a_decision_shows_the_evidence_that_made_it() -> None:
    """What a reader sees agrees with the decision: a cell decided at look 3 and kept at look 6
    (where today's data alone would not reject) shows look 3's ratio, interval (excluding 1)
    and unadjusted p below the level it was held to; an equivalent cell shows the TOST's p and
    an interval at 1 - 2 level inside the margin; an undecided one its current look, p >= level.
    """
    a = [10.0, 10.1, 9.9, 30.0, 8.0, 25.0]
    b = [30.0, 30.3, 29.7, 10.0, 31.0, 9.0]
    a_eq = [100.0, 100.2, 99.8, 50.0, 200.0, 100.0]
    b_eq = [100.1, 99.9, 100.0, 200.0, 50.0, 100.0]
    noisy = ([10.0, 12.0, 9.0, 11.0, 10.5, 9.5], [11.0, 9.5, 12.5, 10.0, 13.0, 8.5])
    design = _design(3, 10, 3)
    kept, equivalent, undecided = decide_cells(
        design, 6, {"x": (a, b), "y": (a_eq, b_eq), "z": noisy})
    assert kept.decision == "changed" and kept.shown_trials == 3
    assert kept.p_shown is not None and kept.p_shown < kept.level_shown
    assert kept.ratio.ci_low is not None and kept.ratio.ci_low > 1.0
    assert kept.ratio.confidence == pytest.approx(1.0 - kept.level_shown)
    assert equivalent.decision == "equivalent" and equivalent.shown_trials == 3
    assert equivalent.p_shown is not None and equivalent.p_shown < equivalent.level_shown
    assert equivalent.ratio.confidence == pytest.approx(1.0 - 2.0 * equivalent.level_shown)
    low, high = equivalent.ratio.ci_low, equivalent.ratio.ci_high
    assert low is not None and high is not None and low > 1 / 1.1 and high < 1.1
    assert undecided.decision == "undecided" and undecided.shown_trials == 6
    assert undecided.p_shown is not None and undecided.p_shown >= undecided.level_shown
    assert undecided.level_shown == undecided.alpha_look


def test_undecided_cells_wait_for_evidence() -> None:
    values = {"x": ([10.0, 12.0, 9.0], [11.0, 9.5, 12.5])}
    [decision] = decide_cells(_design(3, 10, 1), 3, values)
    assert decision.decision == "undecided" and decision.decision_trials is None
    assert not all_decided([decision]) and not all_decided([])


@pytest.mark.parametrize("test", ["welch-log", "mann-whitney"])
def test_missing_or_empty_values_are_undecided_with_a_warning(test: str) -> None:
    nan = float("nan")
    values = {"empty": ([], []), "nan": ([nan, nan, nan], [1.0, 2.0, 3.0]),
              "one": ([1.0, nan, nan], [2.0, nan, nan]),
              "zero": ([0.0, -1.0, 0.0], [1.0, 1.1, 1.2]),
              "ok": ([10.0, 10.1, 9.9], [30.0, 30.2, 29.8])}
    decisions = {d.cell: d for d in decide_cells(_design(3, 10, 5, test), 3, values)}
    for cell in ("empty", "nan", "zero"):
        assert decisions[cell].decision == "undecided"
        assert any("no test at 3 trials per arm" in w for w in decisions[cell].warnings)
        assert decisions[cell].p_change is None
    assert any("dropped 3 missing" in w for w in decisions["nan"].warnings)
    assert any("non-positive" in w for w in decisions["zero"].warnings)
    assert decisions["one"].decision == "undecided"
    early = decide_cells(_design(3, 10, 1, test), 2, {"ok": values["ok"]})[0]
    assert early.decision == "undecided" and any("no look before 3" in w for w in early.warnings)
    assert decide_cells(_design(3, 10, 1, test), 3, {}) == ()


# ------------------------------------------------------------------------------------------
# the simulation is the rule, and a small calibration


@pytest.mark.parametrize("test", ["welch-log", "mann-whitney"])
def test_simulation_applies_the_rule_of_decide_cells(test: str) -> None:
    design = _design(3, 8, 2, test)
    rng = np.random.default_rng(5)
    reps = 40
    log_a = instance_effects(rng, Scenario("lognormal", 0.15), (reps, 2, 8))
    log_b = instance_effects(rng, Scenario("lognormal", 0.15), (reps, 2, 8))
    log_b[:, 0] += np.log(rng.choice([1.0, 1.3, 3.0], size=(reps, 1)))
    outcome = run_sequential(design, log_a, log_b)
    for r in range(reps):
        n = int(outcome.stop_trials[r])
        values = {f"c{c}": (list(np.exp(log_a[r, c])), list(np.exp(log_b[r, c])))
                  for c in range(2)}
        decisions = decide_cells(design, n, values)
        assert [CODES[d.decision] for d in decisions] == list(outcome.decisions[r])
        stopped_early = n < design.max_trials
        assert all_decided(decisions) == (stopped_early or bool(
            (outcome.decisions[r] != UNDECIDED).all()))
        if stopped_early:
            assert not all_decided(decide_cells(design, n - 1, values)) or n == design.min_trials


def test_small_calibration() -> None:
    """2,000 A/A experiments of the default sequential design: the false-positive rate within
    4 SE of the 4.6% the full calibration measures; equivalence at the margin at most alpha;
    a 3x change found every time, on fewer server starts than the maximum."""
    reps = 2_000
    design = _design(3, 10, 2)
    aa = simulate(design, Scenario("lognormal", 0.2), reps, seed=1)
    se = math.sqrt(0.05 * 0.95 / reps)
    assert 0.03 - 2 * se < aa.any_changed < 0.07 + 2 * se
    margin = simulate(design, Scenario("lognormal", 0.05, 1.1), reps, seed=2)
    assert margin.any_equivalent < 0.05 + 3 * se
    big = simulate(design, Scenario("lognormal", 0.15, 3.0), reps, seed=3)
    assert big.changed == 1.0 and big.mean_server_starts < 10.0
