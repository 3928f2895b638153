"""Quantised rate cells (vllm_slo/analysis/quantised_cells.py) and the bias box of
`compare_trials` they are tested over; coverage by simulation of a closed loop in waves
(tests/support/wave_simulation.py; the full table:
benchmarks/quantised_throughput_calibration.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from tests.support.wave_simulation import WaveArm, random_arm, wave_trials
from vllm_slo.analysis.comparison import Group, compare_pair
from vllm_slo.analysis.quantised_cells import (
    counts_quantisation,
    pair_bias_log,
    quantisation,
)
from vllm_slo.stats.trial_statistics import compare_trials, with_holm

CELL = "output_throughput.mean"


def test_identical_counts_are_quantised_with_one_wave_as_the_step() -> None:
    found = counts_quantisation(CELL, "no-caching", [320, 320, 320, 320], users=64)
    assert found is not None
    assert found.relative_step == pytest.approx(0.2)
    assert found.bias_log == pytest.approx(-math.log(0.8))
    assert "all 4 trials completed 320 requests" in found.text()
    assert "64 users" in found.text() and "±20.0%" in found.text()


@pytest.mark.parametrize("counts", [[320, 320, 384], [320], [], [0, 0]])
def test_differing_or_too_few_counts_are_not_quantised(counts: list[int]) -> None:
    assert counts_quantisation(CELL, "x", counts, users=64) is None


def test_a_window_of_about_one_wave_is_capped_not_infinite() -> None:
    found = counts_quantisation(CELL, "x", [64, 64], users=64)
    assert found is not None and found.bias_log == pytest.approx(math.log(100.0))


def test_bias_zero_is_the_plain_test() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.lognormal(0.0, 0.05, 4), rng.lognormal(0.1, 0.05, 4)
    for test in ("welch-log", "mann-whitney"):
        plain = compare_trials(a, b, test=test)
        boxed = compare_trials(a, b, test=test, bias_log=0.0)
        assert boxed == plain


def test_the_box_is_the_union_of_its_corners_and_p_is_the_larger() -> None:
    a = np.array([100.0, 101.0, 99.0, 100.5])
    b = a * 1.3
    beta = 0.1
    boxed = compare_trials(a, b, test="welch-log", bias_log=beta)
    low = compare_trials(a, b * math.exp(-beta), test="welch-log")
    high = compare_trials(a, b * math.exp(beta), test="welch-log")
    assert boxed.p_value == pytest.approx(max(low.p_value, high.p_value))
    assert boxed.ratio.ci_low == pytest.approx(low.ratio.ci_low)
    assert boxed.ratio.ci_high == pytest.approx(high.ratio.ci_high)
    assert boxed.ratio.value == pytest.approx(1.3)
    assert boxed.bias_log == beta and boxed.ratio.method.endswith("+bias-box")


def test_a_change_inside_the_box_decides_nothing() -> None:
    a = np.array([100.0, 100.1, 99.9, 100.05])
    boxed = compare_trials(a, a * 1.05, test="welch-log", bias_log=0.1)
    assert boxed.p_value == 1.0 and not boxed.significant
    assert boxed.ratio.ci_low < 1.0 < boxed.ratio.ci_high
    assert compare_trials(a, a * 1.05, test="welch-log").significant  # the plain test "finds" it


@pytest.mark.parametrize("test", ["welch-log", "mann-whitney"])
def test_interval_and_p_agree_in_the_box_after_holm(test: str) -> None:
    rng = np.random.default_rng(11)
    for _ in range(200):
        a = rng.lognormal(0.0, 0.05, 6)
        b = rng.lognormal(float(rng.normal(0.0, 0.2)), 0.05, 6)
        other = compare_trials(a, rng.lognormal(0.0, 0.05, 6), test=test)
        beta = float(rng.uniform(0.0, 0.2))
        for result in with_holm([compare_trials(a, b, test=test, bias_log=beta), other])[:1]:
            if result.testable and result.interval_agrees:
                excludes = result.ratio.ci_low > 1.0 or result.ratio.ci_high < 1.0
                assert excludes == result.significant


def test_a_negative_or_infinite_bias_is_refused() -> None:
    a = np.array([1.0, 1.1])
    with pytest.raises(ValueError, match="bias_log"):
        compare_trials(a, a, bias_log=-0.1)
    with pytest.raises(ValueError, match="bias_log"):
        compare_trials(a, a, bias_log=math.inf)


def test_waves_break_the_plain_interval_and_the_box_covers() -> None:
    """A 1.3x change between two closed loops of 64 users, 4 trials each, 20 s windows of ~5
    cycles, trials sharing their arm's phase: the plain interval covers the true ratio far
    less than 95% of the time; the box at least 95%."""
    rng = np.random.default_rng(2026)
    covered_plain = covered_box = 0
    experiments = 200
    for _ in range(experiments):
        base, cand = random_arm(rng, 4.0), random_arm(rng, 4.0 / 1.3)
        truth = cand.true_rate / base.true_rate
        sides, values = [], []
        for arm in (base, cand):
            rates, counts = wave_trials(arm, 4, 20.0, rng)
            sides.append(counts_quantisation(CELL, "arm", list(counts), arm.users))
            values.append(rates)
        plain = compare_trials(values[0], values[1], test="welch-log")
        boxed = compare_trials(values[0], values[1], test="welch-log",
                               bias_log=pair_bias_log(sides))
        covered_plain += plain.ratio.ci_low <= truth <= plain.ratio.ci_high
        covered_box += boxed.ratio.ci_low <= truth <= boxed.ratio.ci_high
    assert covered_plain / experiments < 0.8
    assert covered_box / experiments >= 0.95


def test_the_wave_model_counts_whole_waves() -> None:
    arm = WaveArm(period_s=4.0, phase=0.5, users=64)
    rates, counts = wave_trials(arm, 3, 20.0, np.random.default_rng(0), restart_sd=0.0,
                                phase_sd=0.0)
    assert list(counts) == [320, 320, 320]  # 5 cycles of 64 users
    assert rates == pytest.approx([arm.true_rate] * 3)  # a whole number of cycles: no bias


# ---- through compare_pair: trials of a closed loop with identical counts -------------------

@dataclass
class _Series:
    counted: int
    rate: float
    counted_end_unix_s: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.counted_end_unix_s = np.arange(self.counted, dtype=float)


def _trial(kind: str, users: int, counted: int, rate: float, key: str) -> Any:
    arrival = SimpleNamespace(kind=kind, users=users)
    return SimpleNamespace(
        valid=True, variant="v", run_dir=key, parts={},
        scenario=SimpleNamespace(traffic=SimpleNamespace(arrival=arrival)),
        series=_Series(counted, rate), provenance={"server_instance": {"label": key}})


def _group(label: str, kind: str, counts: list[int], rates: list[float]) -> Group:
    trials = tuple(_trial(kind, 64, c, r, f"{label}{i}")
                   for i, (c, r) in enumerate(zip(counts, rates, strict=True)))
    return Group(label, trials)  # type: ignore[arg-type]


def test_compare_pair_tests_a_quantised_cell_over_its_box(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    import vllm_slo.analysis.comparison as comparison

    monkeypatch.setattr(comparison, "trial_cell_value", lambda t, cell: t.series.rate)
    base = _group("defaults", "closed", [320] * 4, [3502.6, 3661.3, 3665.2, 3639.6])
    cand = _group("tuned", "closed", [320] * 4, [3700.0, 3702.0, 3698.0, 3701.0])
    _, (judged,) = compare_pair(base, cand, [CELL], 0.05, "welch-log")
    assert any("quantised" in w for w in judged.comparison.warnings)
    assert judged.comparison.bias_log == pytest.approx(2 * -math.log(0.8))
    assert not judged.comparison.significant  # +2.5% inside a ±20% phase bias per side
    open_loop = _group("open", "poisson", [320] * 4, [3502.6, 3661.3, 3665.2, 3639.6])
    other = _group("open2", "poisson", [320] * 4, [3700.0, 3702.0, 3698.0, 3701.0])
    _, (plain,) = compare_pair(open_loop, other, [CELL], 0.05, "welch-log")
    assert plain.comparison.bias_log == 0.0
    assert not any("quantised" in w for w in plain.comparison.warnings)


def test_rates_only_and_every_trial_closed() -> None:
    closed = [_trial("closed", 64, 320, 1.0, f"k{i}") for i in range(3)]
    assert quantisation("x", closed, "ttft.p50") is None
    assert quantisation("x", closed, CELL) is not None
    mixed = [*closed[:2], _trial("poisson", 64, 320, 1.0, "p")]
    assert quantisation("x", mixed, CELL) is None


def test_the_tuner_ranks_a_quantised_objective_over_its_box() -> None:
    from vllm_slo.analysis.tuning import CandidateResult, rank_candidates

    def candidate(name: str, values: list[float], bias: float) -> CandidateResult:
        return CandidateResult(name=name, origin="grid", changed={}, args={},
                               objective_values=tuple(values),
                               objective_quantised="q" if bias else None,
                               objective_bias_log=bias)

    close = [3700.0, 3702.0, 3698.0, 3701.0]
    base = [3600.0, 3605.0, 3598.0, 3602.0]
    plain = rank_candidates([candidate("a", close, 0.0), candidate("b", base, 0.0)])
    boxed = rank_candidates([candidate("a", close, 0.223), candidate("b", base, 0.223)])
    versus_plain = plain.entries[1].versus_best
    versus_boxed = boxed.entries[1].versus_best
    assert versus_plain is not None and versus_boxed is not None
    assert versus_plain.significant and not versus_boxed.significant
    assert versus_boxed.bias_log == pytest.approx(0.446)
    assert boxed.tied_with_best == ("b",)


def test_a_decision_holds_only_where_the_box_agrees() -> None:
    from vllm_slo.analysis.quantised_cells import decision_over_box
    from vllm_slo.stats.sequential import SequentialDesign, decide_cells

    design = SequentialDesign(3, 3, 0.05, 0.10, 1)
    base = [3600.0, 3605.0, 3598.0]
    close = [3700.0, 3702.0, 3698.0]  # +2.7%: "changed" on its spread alone
    (decision,) = decide_cells(design, 3, {CELL: (base, close)})
    assert decision.decision == "changed"
    assert decision_over_box(decision, base, close, 0.0, "welch-log", 0.1) is None
    boxed = decision_over_box(decision, base, close, 0.2, "welch-log", 0.1)
    assert boxed is not None and boxed.without_box == "changed"
    assert boxed.decision.decision == "undecided" and boxed.decision.decision_trials is None
    assert boxed.box.ci_low < 1.0 < boxed.box.ci_high
    assert "without the closed loop's phase bias" in boxed.decision.warnings[-1]
    far = [7200.0, 7210.0, 7190.0]  # x2: beyond any bias of 0.2
    (clear,) = decide_cells(design, 3, {CELL: (base, far)})
    kept = decision_over_box(clear, base, far, 0.2, "welch-log", 0.1)
    assert kept is not None and kept.decision is clear and kept.without_box is None
