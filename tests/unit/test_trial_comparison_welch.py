"""The comparison's Welch-on-logs path (`compare_trials(test="welch-log")`, the default of
scenario `compare.test`): the benchstat table, `vllm-slo compare` and the sequential decisions
use one test, so they give one answer (issue 24, items 3 and 7)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.support.synthetic import write_synthetic_experiment as experiment
from vllm_slo import cli
from vllm_slo.analysis.wording import format_change
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.saved_runs import compare_saved_runs, plan_from_saved_run
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.stats.sequential import SequentialDesign, decide_cells
from vllm_slo.stats.trial_planning import trials_needed
from vllm_slo.stats.trial_statistics import (
    compare_trials,
    welch_log_p,
    welch_log_ratio,
    with_holm,
)

# the H200 eager A/B's per-trial values (issue 24): CUDA graphs vs eager, 4 + 4 fresh servers
GRAPHS_TPOT_S = np.array([2.7, 4.0, 3.8, 4.1]) / 1000
EAGER_TPOT_S = np.array([9.3, 10.7, 13.0, 12.3]) / 1000
GRAPHS_THROUGHPUT = np.array([17976.0, 13244, 13309, 12504])
EAGER_THROUGHPUT = np.array([5987.0, 5449, 4869, 5084])


def test_welch_p_and_interval_equal_scipy() -> None:
    rng = np.random.default_rng(11)
    for n_a, n_b in ((2, 2), (3, 5), (4, 4), (7, 3)):
        a = rng.lognormal(0.0, 0.2, n_a)
        b = rng.lognormal(0.3, 0.4, n_b)
        result = compare_trials(a, b, test="welch-log")
        expected = stats.ttest_ind(np.log(b), np.log(a), equal_var=False)
        assert result.test == "welch-log" and result.testable
        assert result.p_value == pytest.approx(float(expected.pvalue), rel=1e-10)
        assert welch_log_p(b, a) == result.p_value
        low, high = expected.confidence_interval(0.95)
        assert result.ratio.confidence == pytest.approx(0.95)
        assert result.ratio.ci_low == pytest.approx(math.exp(low), rel=1e-9)
        assert result.ratio.ci_high == pytest.approx(math.exp(high), rel=1e-9)
        geometric_a = math.exp(float(np.log(a).mean()))
        geometric_b = math.exp(float(np.log(b).mean()))
        assert (result.center_a, result.center_b) == pytest.approx((geometric_a, geometric_b))
        assert result.ratio.value == pytest.approx(geometric_b / geometric_a, rel=1e-12)
        # the shift: the difference of geometric means, its interval the ratio's mapped onto
        # the baseline's geometric mean
        assert result.shift.value == pytest.approx(geometric_b - geometric_a, rel=1e-9)
        assert result.shift.ci_low == pytest.approx(geometric_a * (math.exp(low) - 1), rel=1e-9)
        assert result.shift.ci_high == pytest.approx(geometric_a * (math.exp(high) - 1),
                                                     rel=1e-9)
        assert not any("can never reach" in w for w in result.warnings)


def test_one_welch_implementation_for_comparison_gate_and_decisions() -> None:
    a = np.array([10.2, 11.5, 9.8, 10.9, 10.1])
    b = np.array([12.9, 13.8, 12.1, 14.4, 13.1])
    shared = welch_log_ratio(b, a, 0.95)
    comparison = compare_trials(a, b, test="welch-log")
    design = SequentialDesign(5, 5, 0.05, 0.10, 1)
    [decision] = decide_cells(design, 5, {"tpot.p50": (list(a), list(b))})
    for estimate in (comparison.ratio, decision.ratio):
        assert (estimate.value, estimate.ci_low, estimate.ci_high) == (
            shared.value, shared.ci_low, shared.ci_high)
    assert decision.p_change == pytest.approx(comparison.p_value, rel=1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_interval_excludes_one_exactly_when_significant_after_holm(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cells = int(rng.integers(1, 7))
    family = []
    for _ in range(cells):
        n_a, n_b = (int(v) for v in rng.integers(2, 9, 2))
        effect = float(rng.choice([0.0, 0.1, 0.3, 1.0]))
        family.append(compare_trials(rng.lognormal(0.0, 0.25, n_a),
                                     rng.lognormal(effect, 0.25, n_b), test="welch-log"))
    adjusted = with_holm(family)
    for result in adjusted:
        assert result.testable and result.interval_agrees
        assert result.interval_confidence == pytest.approx(1 - 0.05 / result.holm_factor)
        excludes = result.ratio.ci_low > 1 or result.ratio.ci_high < 1
        assert excludes == result.significant, (seed, result.p_adjusted, result.ratio)
        assert (result.shift.ci_low > 0 or result.shift.ci_high < 0) == result.significant
        # the interval at the Holm level is the scipy Welch interval at that level
        a, b = np.log(result.values_a), np.log(result.values_b)
        low, high = stats.ttest_ind(b, a, equal_var=False).confidence_interval(
            result.interval_confidence)
        assert (result.ratio.ci_low, result.ratio.ci_high) == pytest.approx(
            (math.exp(low), math.exp(high)), rel=1e-8)


def test_eager_ab_is_significant_on_both_cells_with_welch_and_not_testable_with_ranks() -> None:
    cells = (("tpot.p50", GRAPHS_TPOT_S, EAGER_TPOT_S),
             ("output_throughput.mean", GRAPHS_THROUGHPUT, EAGER_THROUGHPUT))
    welch = with_holm([compare_trials(a, b, test="welch-log") for _, a, b in cells])
    for (cell, a, b), result in zip(cells, welch, strict=True):
        assert result.significant and result.testable and result.family_size == 2, cell
        assert result.p_adjusted < 0.05
        expected = stats.ttest_ind(np.log(b), np.log(a), equal_var=False).pvalue
        assert result.p_value == pytest.approx(float(expected), rel=1e-10)
        text = format_change(cell, result)
        assert not text.startswith("~") and "not testable" not in text, text
    assert welch[0].ratio.ci_low > 1 and welch[1].ratio.ci_high < 1  # slower, fewer tokens
    ranks = with_holm([compare_trials(a, b) for _, a, b in cells])
    for (cell, _, _), result in zip(cells, ranks, strict=True):
        assert result.test == "mann-whitney" and not result.testable and not result.significant
        assert "not testable with 4+4 trials" in format_change(cell, result)


def test_a_value_of_zero_falls_back_to_the_rank_test_with_a_warning() -> None:
    errors_a = np.array([0.0, 0.0, 0.01, 0.0])
    errors_b = np.array([0.02, 0.03, 0.02, 0.04])
    fallback = compare_trials(errors_a, errors_b, test="welch-log")
    assert fallback.test == "mann-whitney"
    assert fallback.p_value == compare_trials(errors_a, errors_b).p_value
    assert any("no logarithm" in w and "Mann-Whitney" in w for w in fallback.warnings)
    latency = compare_trials(GRAPHS_TPOT_S, EAGER_TPOT_S, test="welch-log")
    family = with_holm([latency, fallback])
    assert [c.test for c in family] == ["welch-log", "mann-whitney"]
    assert all(c.family_size == 2 for c in family)
    # the rank test's reachability note concerns the rank-test cell only
    assert any("can never reach" in w for w in family[1].warnings)
    assert not any("can never reach" in w for w in family[0].warnings)


def test_welch_needs_two_trials_a_side() -> None:
    result = compare_trials(np.array([1.0, 1.2, 1.1]), np.array([2.0]), test="welch-log")
    assert result.p_value is None and not result.testable and not result.significant
    assert result.ratio.value is not None and result.ratio.ci_low is None
    assert any("needs >= 2 trials per side" in w for w in result.warnings)
    [adjusted] = with_holm([result])
    assert adjusted.p_adjusted is None
    empty = compare_trials(np.array([]), np.array([1.0, 2.0]), test="welch-log")
    assert empty.test == "welch-log" and empty.p_value is None  # the footer names that test
    with pytest.raises(ValueError, match="test must be one of"):
        compare_trials(np.array([1.0, 2.0]), np.array([1.0, 2.0]), test="t")  # type: ignore[arg-type]


def test_planning_sizes_for_the_test_in_use() -> None:
    for effect in (0.1, 1.0):
        welch = trials_needed(0.15, effect, 0.05, test="welch-log")
        ranks = trials_needed(0.15, effect, 0.05)
        assert (welch.test, ranks.test) == ("welch-log", "mann-whitney")
        assert welch.trials_per_variant is not None and ranks.trials_per_variant is not None
        # the rank test plans with efficiency 0.864 and needs >= 4 trials per side at 0.05
        assert welch.trials_per_variant < ranks.trials_per_variant, effect
    assert trials_needed(0.15, 1.0, 0.05).trials_per_variant == 4  # the rank test's floor
    assert trials_needed(0.0, 0.5, 0.05, test="welch-log").trials_per_variant == 2


def test_experiment_table_and_compare_use_the_scenarios_test(tmp_path: Path) -> None:
    """trials=3 of a 2x TTFT change: Welch on logs (the default) decides it, the table's footer
    names the test; `compare --test mann-whitney` gives the rank test's answer."""
    run = experiment(tmp_path / "ab", {"a": 0.05, "b": 0.10}, trials=3, noise=0.05)
    rendered = render_experiment(run)
    cells = {c["cell"]: c for c in rendered.summary["comparisons"][0]["cells"]}
    assert cells["ttft.p50"]["test"] == "welch-log" and cells["ttft.p50"]["significant"]
    assert not any("can never reach" in w for w in rendered.summary["warnings"])
    assert "Welch t on log per-trial values (ratio of geometric means); Holm over the" in \
        rendered.text
    assert {p["test"] for p in rendered.summary["planning"]} == {"welch-log"}
    assert ("per-trial statistics; Welch t on log per-trial values (ratio of geometric means), "
            "Holm-corrected") in (run / "report.html").read_text()
    a = experiment(tmp_path / "a", {"x": 0.05}, trials=3, noise=0.05, seed=1)
    b = experiment(tmp_path / "b", {"x": 0.10}, trials=3, noise=0.05, seed=2)
    default = compare_saved_runs([a, b], ["ttft.p50"], 0.05, tmp_path / "welch")
    assert "Welch t on log per-trial values" in default.text
    summary = json.loads((tmp_path / "welch" / "summary.json").read_text())
    assert summary["scenario"]["compare"]["test"] == "welch-log"
    assert summary["comparisons"][0]["cells"][0]["significant"]
    ranks = compare_saved_runs([a, b], ["ttft.p50"], 0.05, tmp_path / "ranks",
                               test="mann-whitney")
    assert "Mann-Whitney U on per-trial values" in ranks.text
    summary = json.loads((tmp_path / "ranks" / "summary.json").read_text())
    assert summary["scenario"]["compare"]["test"] == "mann-whitney"
    assert not summary["comparisons"][0]["cells"][0]["testable"]
    assert "Welch t on log per-trial values" in plan_from_saved_run(a, 0.5, 0.05)


def test_compare_test_flag(tmp_path: Path) -> None:
    a = experiment(tmp_path / "a", {"x": 0.05}, trials=2, noise=0.05, seed=1)
    b = experiment(tmp_path / "b", {"x": 0.06}, trials=2, noise=0.05, seed=2)
    said: list[str] = []
    code = cli.main(["--runs-dir", str(tmp_path / "out"), "compare", str(a), str(b),
                     "--test", "mann-whitney"], said.append, said.append)
    assert code == ExitCode.PASS and "Mann-Whitney U on per-trial values" in "\n".join(said)
    code = cli.main(["compare", str(a), str(b), "--test", "t-test"], said.append, said.append)
    assert code == ExitCode.USAGE_ERROR


def test_an_error_rate_of_zero_falls_back_and_its_warning_says_whose_limit(
        tmp_path: Path) -> None:
    """A sequential welch-log experiment comparing TTFT and an error rate that is 0 in every
    trial: the error-rate cell is the rank test's (3 vs 3 over 2 cells can never be
    significant), TTFT is Welch's and significant; the closing warning names the fallback."""
    from vllm_slo.run_folder.run_files import STOPPING_FILE

    run = experiment(tmp_path / "seq", {"a": 0.05, "b": 0.10}, trials=3, noise=0.05,
                     scenario_patch={"trials": {"min": 3, "max": 6},
                                     "compare": {"cells": ["ttft.p50", "error_rate.rate"]}})
    (run / STOPPING_FILE).write_text(json.dumps({
        "reason": "max_trials", "rounds": 3, "looks": 1, "min_trials": 3, "max_trials": 6,
        "budget_s": None, "elapsed_s": 60.0, "detail": "stopped"}))
    rendered = render_experiment(run)
    cells = {c["cell"]: c for c in rendered.summary["comparisons"][0]["cells"]}
    errors = cells["error_rate.rate"]
    assert errors["test"] == "mann-whitney" and not errors["testable"]
    assert any("no logarithm" in w for w in errors["warnings"])
    assert cells["ttft.p50"]["test"] == "welch-log" and cells["ttft.p50"]["significant"]
    reach = [w for w in rendered.summary["warnings"] if "can never reach" in w]
    assert reach and all("the benchstat table uses where a value <= 0 has no logarithm; the "
                         "design's decisions use welch-log" in w for w in reach)
    assert ("Welch t on log per-trial values (ratio of geometric means); error_rate.rate: "
            "Mann-Whitney U on per-trial values") in rendered.text
