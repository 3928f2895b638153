"""Known values for reports.statistics: hand-computed cases and scipy as the reference."""

from __future__ import annotations

import ast
import dataclasses
import math
import re
import time
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.support.stats_simulation import stationary_ar1 as ar1
from vllm_slo.stats import effective_size, inputs, sequential, trial_planning, trial_statistics
from vllm_slo.stats import statistics as st
from vllm_slo.stats.effective_size import effective_sample_size, lag1_autocorrelation
from vllm_slo.stats.statistics import (
    Estimate,
    Verdict,
    across_trials_estimate,
    goodput_estimate,
    mean_estimate,
    order_statistic_interval,
    percentile_estimate,
    rate_estimate,
    slo_verdict,
)
from vllm_slo.stats.trial_planning import trials_needed
from vllm_slo.stats.trial_statistics import (
    Comparison,
    compare_trials,
    hodges_lehmann,
    holm_adjust,
    min_p_value_mann_whitney,
    non_inferiority,
    with_holm,
)


def estimate(low: float | None, high: float | None, value: float | None = 1.0) -> Estimate:
    return Estimate(value, low, high, 0.95, 10, 10.0, "test")


# --- results are small frozen values ------------------------------------------------------------


def test_results_are_frozen_slotted_dataclasses() -> None:
    result = percentile_estimate(np.arange(100.0), 50)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.value = 0.0  # type: ignore[misc]
    for cls in (Estimate, Comparison, trial_statistics.NonInferiority, trial_planning.TrialPlan):
        assert dataclasses.is_dataclass(cls)
        assert hasattr(cls, "__slots__")
    assert isinstance(result.warnings, tuple)
    assert Verdict.PASS == "PASS" and Verdict("INCONCLUSIVE") is Verdict.INCONCLUSIVE


@pytest.mark.parametrize("module", [inputs, effective_size, st, trial_statistics, trial_planning,
                                    sequential])
def test_module_is_pure_no_io_printing_or_plotting(module: object) -> None:
    tree = ast.parse(Path(module.__file__).read_text())
    called = {node.func.id for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not called & {"print", "open", "input"}
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom)
                for alias in (node.names if isinstance(node, ast.Import)
                              else [ast.alias(node.module or "")])}
    imported_here = {node.module for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module
                     and node.module.startswith("vllm_slo")}
    assert imported <= {"__future__", "math", "collections", "dataclasses", "enum", "functools",
                        "typing", "numpy", "scipy", "vllm_slo"}
    assert imported_here <= {f"vllm_slo.stats.{name}" for name in
                             ("inputs", "effective_size", "statistics", "trial_statistics")}


# --- autocorrelation and effective sample size ---------------------------------------------


def test_lag1_autocorrelation_hand_computed() -> None:
    # centered [-2, -1, 0, 1, 2]: (2 + 0 + 0 + 2) / 10
    assert lag1_autocorrelation(np.array([1.0, 2, 3, 4, 5])) == pytest.approx(0.4)
    assert lag1_autocorrelation(np.array([1.0, -1.0] * 50)) == pytest.approx(-0.99)
    assert lag1_autocorrelation(np.array([3.0, 3.0, 3.0])) is None
    assert lag1_autocorrelation(np.array([1.0, 2.0])) is None
    assert lag1_autocorrelation(np.array([1.0, np.nan, 2.0, 3.0])) == pytest.approx(0.0)


def test_effective_sample_size_iid_is_about_n() -> None:
    x = np.random.default_rng(0).standard_normal(20_000)
    assert 0.9 * x.size <= effective_sample_size(x) <= x.size


@pytest.mark.parametrize("rho", [0.5, 0.8, 0.9])
def test_effective_sample_size_ar1_matches_theory(rho: float) -> None:
    x = ar1(200_000, rho, seed=1)
    expected = x.size * (1 - rho) / (1 + rho)
    assert effective_sample_size(x) == pytest.approx(expected, rel=0.1)


def test_effective_sample_size_edges() -> None:
    assert effective_sample_size(np.array([])) == 0.0
    assert effective_sample_size(np.full(50, 2.0)) == 50.0
    assert effective_sample_size(np.array([1.0, 5.0])) == 2.0
    assert effective_sample_size(np.cumsum(np.ones(100))) >= 1.0  # a trend: very few, not < 1


# --- percentiles --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [50, 200, 1000, 5000])
@pytest.mark.parametrize("q", [0.1, 0.5, 0.9, 0.95, 0.99])
@pytest.mark.parametrize("confidence", [0.9, 0.95])
def test_order_statistic_interval_equals_scipy_quantile_test(
    n: int, q: float, confidence: float
) -> None:
    x = np.random.default_rng(n).lognormal(size=n)
    ci = stats.quantile_test(x, q=1.0, p=q).confidence_interval(confidence)
    ours = order_statistic_interval(np.sort(x), q, float(n), confidence)
    if np.isnan(ci.low) or np.isnan(ci.high):
        assert ours is None
    else:
        assert ours == (ci.low, ci.high)


@pytest.mark.parametrize("percentile", [50.0, 90.0, 95.0, 99.0])
def test_percentile_estimate_iid_is_close_to_scipy(percentile: float) -> None:
    x = np.random.default_rng(3).lognormal(size=2000)
    result = percentile_estimate(x, percentile)
    assert result.value == pytest.approx(np.quantile(x, percentile / 100))
    assert result.method == "order-statistic-ess"
    assert 0.85 * x.size <= result.n_effective <= x.size
    ci = stats.quantile_test(x, q=1.0, p=percentile / 100).confidence_interval(0.95)
    sorted_x = np.sort(x)
    # within a few order statistics of the exact iid interval (n_eff is estimated, not n)
    assert ci.low >= result.ci_low >= sorted_x[max(0, np.searchsorted(sorted_x, ci.low) - 8)]
    assert ci.high <= result.ci_high <= sorted_x[min(x.size - 1,
                                                     np.searchsorted(sorted_x, ci.high) + 8)]


def test_percentile_ci_widens_with_autocorrelation_same_values() -> None:
    ordered = np.exp(0.8 * ar1(2000, 0.85, seed=4))
    shuffled = np.random.default_rng(5).permutation(ordered)
    a, b = percentile_estimate(ordered, 90), percentile_estimate(shuffled, 90)
    assert a.value == b.value
    assert a.n_effective < 0.35 * b.n_effective
    assert (a.ci_high - a.ci_low) > 1.8 * (b.ci_high - b.ci_low)


def test_percentile_tail_rule_iid() -> None:
    x = np.random.default_rng(6).lognormal(size=100)
    result = percentile_estimate(x, 99)
    # the observed p99 is shown; its upper bound rests on ~1 sample beyond it: open
    assert result.value == pytest.approx(np.quantile(x, 0.99))
    assert result.ci_high is None
    assert result.ci_low is not None and result.ci_low <= result.value
    (message,) = result.warnings
    match = re.match(r"insufficient samples for p99 \(need >= (\d+), have 100\)", message)
    assert match and int(match.group(1)) >= 500
    enough = percentile_estimate(np.random.default_rng(6).lognormal(size=1000), 99)
    assert enough.ci_low is not None and enough.ci_high is not None and enough.warnings == ()


def test_open_bounds_sit_on_the_tail_side() -> None:
    x = np.random.default_rng(3).lognormal(size=40)
    low_tail = percentile_estimate(x, 2)  # ~0.8 samples below p2: the lower bound is open
    assert low_tail.value == pytest.approx(np.quantile(x, 0.02))
    assert low_tail.ci_low is None and low_tail.ci_high is not None
    tiny = percentile_estimate(np.array([0.3, 0.1, 0.2]), 50)  # 1.5 effective per side
    assert tiny.value == pytest.approx(0.2) and tiny.ci_low is None and tiny.ci_high is None


def test_percentile_tail_rule_counts_effective_samples() -> None:
    # 600 requests: 2 per sectioning block beyond p99, too few for the fallback too
    series = np.exp(ar1(600, 0.9, seed=7))
    result = percentile_estimate(series, 99)
    assert result.value == pytest.approx(np.quantile(series, 0.99)) and result.ci_high is None
    assert result.method == st.ORDER_STATISTIC_METHOD
    assert result.warnings[0].startswith("insufficient samples for p99 (need >= ")
    assert "effective" in result.warnings[0]


def test_sectioning_interval_known_values() -> None:
    # three time blocks, the second and third the first scaled by 2 and 4: block p90s are
    # b, 2b and 4b exactly (a quantile is scale-equivariant), so the interval is by hand
    base = np.random.default_rng(21).lognormal(size=400)
    series = np.concatenate([base, 2.0 * base, 4.0 * base])
    b, center = float(np.quantile(base, 0.9)), float(np.quantile(series, 0.9))
    logs = np.log([b, 2.0 * b, 4.0 * b]) - math.log(center)
    half = stats.t.ppf(0.975, 2) * math.sqrt(float(np.sum(logs**2)) / 2.0) / math.sqrt(3.0)
    interval = st.sectioning_interval(series, 0.9)
    assert interval is not None
    low, high = interval
    assert (low, high) == pytest.approx((center * math.exp(-half), center * math.exp(half)))
    assert st.sectioning_interval(series, 0.9, center=center) == (low, high)
    # 99% confidence: t(2) at 0.995 instead of 0.975, the same spread
    wide = st.sectioning_interval(series, 0.9, confidence=0.99)
    assert wide is not None and wide[1] / center == pytest.approx(
        math.exp(half * stats.t.ppf(0.995, 2) / stats.t.ppf(0.975, 2)))
    with pytest.raises(ValueError):
        st.sectioning_interval(series, 1.0)


def test_sectioning_needs_tail_samples_in_every_block_and_positive_quantiles() -> None:
    series = np.exp(ar1(1200, 0.5, seed=2))
    # 400 per block: 4 beyond p99 each (enough), 0.4 beyond p99.9 (not)
    assert st.sectioning_interval(series, 0.99) is not None
    assert st.sectioning_interval(series, 0.999) is None
    assert st.sectioning_interval(series[:890], 0.99) is None  # 296 per block: 2.96 < 3
    assert st.sectioning_interval(series - 10.0, 0.99) is None  # logs of negative quantiles
    assert st.sectioning_interval(series, 0.01) is not None  # the lower tail counts the same


def test_an_open_order_statistic_bound_falls_back_to_sectioning() -> None:
    series = np.exp(ar1(1000, 0.9, seed=7))  # ~2 effective samples beyond p99
    result = percentile_estimate(series, 99)
    assert result.method == st.SECTIONING_METHOD
    assert result.value == pytest.approx(np.quantile(series, 0.99))
    assert result.ci_low is not None and result.ci_high is not None
    assert (result.ci_low, result.ci_high) == pytest.approx(
        st.sectioning_interval(series, 0.99))
    assert result.ci_low < result.value < result.ci_high
    # the effective size is the order-statistic one that left the bound open, and says so
    assert result.n_effective * 0.01 < st.MIN_EFFECTIVE_TAIL_SAMPLES
    (note,) = result.warnings
    assert note.startswith("p99: interval from sectioning (3 consecutive time blocks")
    assert "leave the order-statistic bound open" in note
    # p50 of the same series has its order-statistic interval: no fallback
    assert percentile_estimate(series, 50).method == st.ORDER_STATISTIC_METHOD
    # time order matters: shuffled, the same values have enough effective samples
    shuffled = percentile_estimate(np.random.default_rng(1).permutation(series), 99)
    assert shuffled.method == st.ORDER_STATISTIC_METHOD and shuffled.ci_high is not None


def test_percentile_edges() -> None:
    empty = percentile_estimate(np.array([]), 95)
    assert empty.value is None and empty.n == 0
    assert empty.warnings[0].startswith("insufficient samples for p95 (need >= 100, have 0)")
    for extreme in (0.0, 100.0):  # the sample extreme: shown, never bounded
        edge = percentile_estimate(np.arange(1000.0), extreme)
        assert edge.value == extreme * 9.99 and edge.ci_low is None and edge.ci_high is None
    with pytest.raises(ValueError):
        percentile_estimate(np.arange(10.0), 101)
    with pytest.raises(ValueError):
        percentile_estimate(np.arange(10.0), 50, confidence=1.0)
    constant = percentile_estimate(np.full(200, 0.25), 50)
    assert (constant.value, constant.ci_low, constant.ci_high) == (0.25, 0.25, 0.25)


def test_percentile_drops_nan_with_warning() -> None:
    x = np.random.default_rng(8).lognormal(size=500)
    with_nan = np.insert(x, [10, 20, 30], np.nan)
    result = percentile_estimate(with_nan, 50)
    assert result.n == 500
    assert result.value == pytest.approx(np.quantile(x, 0.5))
    assert "dropped 3 NaN values from series" in result.warnings


def test_percentile_is_deterministic_and_fast() -> None:
    x = np.exp(ar1(100_000, 0.8, seed=9))
    start = time.perf_counter()
    first = percentile_estimate(x, 99)
    elapsed = time.perf_counter() - start
    assert first == percentile_estimate(x.copy(), 99)
    assert first.value is not None
    assert elapsed < 0.5


# --- means, rates, trials, goodput ------------------------------------------------------------


def test_time_ordered_sorts_stably_by_time() -> None:
    values = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    times = np.array([0.3, 0.1, np.nan, 0.1, 0.2])
    assert st.time_ordered(values, times).tolist() == [2.0, 4.0, 5.0, 1.0, 3.0]
    with pytest.raises(ValueError, match="equal length"):
        st.time_ordered(values, times[:4])
    with pytest.raises(ValueError, match="1-D"):
        st.time_ordered(values.reshape(5, 1), times.reshape(5, 1))


def _lock_step_gaps(streams: int, steps: int, seed: int) -> tuple[np.ndarray, np.ndarray,
                                                                    np.ndarray]:
    """Streams decoding in lock step, stalls (5% of steps, 5x) shared by all of them.

    Returns the gaps pooled stream by stream (one request per stream), the same gaps and their
    arrival times in generation order.
    """
    rng = np.random.default_rng(seed)
    step_s = 0.01 * np.exp(0.05 * rng.standard_normal(steps))
    step_s[rng.random(steps) < 0.05] *= 5.0
    arrival_s = np.cumsum(step_s)[None, :] + rng.exponential(1e-4, (streams, steps))
    gaps = np.diff(arrival_s, axis=1)
    return gaps.ravel(), gaps.T.ravel(), arrival_s[:, 1:].T.ravel()


def test_itl_percentile_estimate_counts_shared_stalls_once() -> None:
    request_ordered, gap_s, arrival_s = _lock_step_gaps(streams=20, steps=2000, seed=3)
    pooled = percentile_estimate(request_ordered, 99.0)
    itl = st.itl_percentile_estimate(gap_s, arrival_s, 99.0)
    assert itl.value == pooled.value  # the same gaps: only the interval changes
    assert itl.method == "order-statistic-ess" and itl.n == pooled.n == 20 * 1999
    # about 2000 independent steps carry the information (each stall is one event, not 20);
    # pooled by request the 20 copies of a stall look independent
    assert pooled.n_effective > 0.9 * pooled.n
    assert 1500 < itl.n_effective < 2500
    assert itl.ci_low is not None and itl.ci_high is not None
    assert pooled.ci_low is not None and pooled.ci_high is not None
    assert itl.ci_high - itl.ci_low > 3.0 * (pooled.ci_high - pooled.ci_low)
    assert itl == percentile_estimate(st.time_ordered(gap_s, arrival_s), 99.0)


def test_itl_percentile_estimate_of_time_ordered_gaps_is_percentile_estimate() -> None:
    gaps = np.exp(ar1(3000, 0.6, seed=4))
    times = np.arange(3000.0)
    assert st.itl_percentile_estimate(gaps, times, 90.0) == percentile_estimate(gaps, 90.0)
    empty = st.itl_percentile_estimate(np.empty(0), np.empty(0), 50.0)
    assert empty.value is None and "insufficient samples" in empty.warnings[0]


def test_mean_estimate_equals_t_interval_when_independent() -> None:
    rng = np.random.default_rng(10)
    x = np.tile([1.0, 3.0], 100) + 0.1 * rng.standard_normal(200)  # negative lag-1: n_eff = n
    result = mean_estimate(x)
    assert result.n_effective == 200
    low, high = stats.t.interval(0.95, 199, loc=x.mean(), scale=stats.sem(x))
    assert (result.value, result.ci_low, result.ci_high) == pytest.approx((x.mean(), low, high))


def test_mean_estimate_autocorrelated_is_wider_and_edges() -> None:
    x = ar1(5000, 0.8, seed=11)
    result = mean_estimate(x)
    naive = stats.t.interval(0.95, x.size - 1, loc=x.mean(), scale=stats.sem(x))
    assert (result.ci_high - result.ci_low) > 2.5 * (naive[1] - naive[0])
    assert mean_estimate(np.array([])).value is None
    assert mean_estimate(np.array([1.0])).value is None
    assert mean_estimate(np.array([1.0, np.inf, 3.0, 2.0])).n == 3


@pytest.mark.parametrize(("k", "n"), [(0, 10), (1, 10), (3, 100), (50, 100), (100, 100), (1, 7)])
def test_rate_estimate_equals_scipy_clopper_pearson(k: int, n: int) -> None:
    result = rate_estimate(k, n)
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    assert result.value == pytest.approx(k / n)
    assert (result.ci_low, result.ci_high) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert result.method == "clopper-pearson"


def test_clopper_pearson_interval_with_effective_counts() -> None:
    ci = stats.binomtest(3, 40).proportion_ci(method="exact")
    assert st.clopper_pearson_interval(3, 40) == pytest.approx((ci.low, ci.high))
    low, high = st.clopper_pearson_interval(1.5, 20.0)  # halved effective counts: wider
    assert low < ci.low and high > ci.high
    with pytest.raises(ValueError):
        st.clopper_pearson_interval(3, 0)


def test_quantile_effective_size_is_the_one_percentile_estimate_uses() -> None:
    x = np.exp(ar1(3000, 0.7, seed=18))
    result = percentile_estimate(x, 95)
    assert st.quantile_effective_size(x, 0.95, result.value) == result.n_effective
    assert st.quantile_effective_size(np.array([np.nan]), 0.5, 1.0) == 0.0


def test_rate_estimate_edges() -> None:
    assert rate_estimate(0, 0).value is None
    with pytest.raises(ValueError):
        rate_estimate(5, 3)


def test_across_trials_estimate_is_a_t_interval_on_logs() -> None:
    # logs of 1, 4, 16 are 0, 2 ln 2, 4 ln 2: mean 2 ln 2 (geometric mean 4), sd 2 ln 2
    result = across_trials_estimate(np.array([1.0, 4.0, 16.0]))
    t_2 = 4.302652729911275  # t(0.975, 2 df)
    half = t_2 * 2.0 * math.log(2.0) / math.sqrt(3.0)
    assert result.method == "t-log-across-trials"
    assert (result.value, result.ci_low, result.ci_high) == pytest.approx(
        (4.0, 4.0 * math.exp(-half), 4.0 * math.exp(half)))
    assert (result.n, result.n_effective, result.warnings) == (3, 3.0, ())
    values = np.array([1.2, 0.9, 1.4, 1.1, 1.0])
    logs = np.log(values)
    low, high = stats.t.interval(0.95, 4, loc=logs.mean(), scale=stats.sem(logs))
    result = across_trials_estimate(values)
    assert (result.value, result.ci_low, result.ci_high) == pytest.approx(
        (math.exp(logs.mean()), math.exp(low), math.exp(high)))


def test_across_trials_estimate_stays_positive_with_two_trials() -> None:
    # 2 and 8 s: geometric mean 4, half-width t(0.975, 1) * ln 2 on the log scale, so the
    # interval is [2^(2 - 12.71), 2^(2 + 12.71)]; the raw-scale t interval would be
    # 5 ± 12.71 * 3 = [-33.1, 43.1] s, a negative latency.
    result = across_trials_estimate(np.array([2.0, 8.0]))
    t_1 = 12.706204736174698  # t(0.975, 1 df)
    assert (result.value, result.ci_low, result.ci_high) == pytest.approx(
        (4.0, 2.0 ** (2.0 - t_1), 2.0 ** (2.0 + t_1)))
    assert result.ci_low is not None and result.ci_low > 0.0


def test_across_trials_estimate_falls_back_to_raw_scale_for_zeros() -> None:
    # error rates 0, 2%, 1%: mean 0.01, sd 0.01, t(0.975, 2) * 0.01 / sqrt(3) = 0.024841
    result = across_trials_estimate(np.array([0.0, 0.02, 0.01]))
    assert result.method == "t-across-trials"
    assert (result.value, result.ci_low, result.ci_high) == pytest.approx(
        (0.01, 0.01 - 0.0248414, 0.01 + 0.0248414), abs=1e-7)
    negative = across_trials_estimate(np.array([-1.0, 1.0]))
    assert (negative.method, negative.value) == ("t-across-trials", 0.0)
    zeros = across_trials_estimate(np.zeros(3))
    assert (zeros.value, zeros.ci_low, zeros.ci_high) == (0.0, None, None)  # no spread


def test_across_trials_estimate_edges() -> None:
    constant = across_trials_estimate(np.full(3, 0.25))
    assert constant.value == pytest.approx(0.25)
    assert (constant.ci_low, constant.ci_high) == (None, None)  # no spread: no point interval
    single = across_trials_estimate(np.array([1.5]))
    assert (single.value, single.ci_low, single.ci_high) == (1.5, None, None)
    assert single.method == "t-log-across-trials"
    assert "single trial" in single.warnings[0]
    assert across_trials_estimate(np.array([])).value is None
    with_nan = across_trials_estimate(np.array([2.0, np.nan, 8.0]))
    assert with_nan.n == 2 and with_nan.value == pytest.approx(4.0)
    assert "dropped 1 non-finite value" in with_nan.warnings[0]


def test_goodput_estimate_independent_equals_clopper_pearson() -> None:
    met = np.tile([True, False, True, True, True, True, True, False], 50)  # negative lag-1
    times_s = np.linspace(0.0, 59.9, met.size)
    result = goodput_estimate(met, times_s, window_s=60.0)
    assert result.n_effective == met.size
    ci = stats.binomtest(int(met.sum()), met.size).proportion_ci(method="exact")
    scale = met.size / 60.0
    assert result.value == pytest.approx(met.sum() / 60.0)
    assert (result.ci_low, result.ci_high) == pytest.approx((ci.low * scale, ci.high * scale))


def test_goodput_clustered_misses_widen_and_edges() -> None:
    met = np.ones(1000, dtype=bool)
    met[200:300] = False  # one outage
    times_s = np.arange(1000) * 0.1
    clustered = goodput_estimate(met, times_s, 100.0)
    spread = goodput_estimate(np.random.default_rng(12).permutation(met), times_s, 100.0)
    assert clustered.value == spread.value == pytest.approx(9.0)
    assert (clustered.ci_high - clustered.ci_low) > 3 * (spread.ci_high - spread.ci_low)
    assert goodput_estimate(np.array([], dtype=bool), np.array([]), 10.0).value is None
    with pytest.raises(ValueError):
        goodput_estimate(met, times_s[:-1], 100.0)
    with pytest.raises(ValueError):
        goodput_estimate(met, times_s, 0.0)


# --- Mann-Whitney, Hodges-Lehmann, Holm ---------------------------------------------------------


def test_min_p_value_mann_whitney() -> None:
    assert min_p_value_mann_whitney(3, 3) == pytest.approx(0.1)
    assert min_p_value_mann_whitney(4, 4) == pytest.approx(2 / 70)
    assert min_p_value_mann_whitney(5, 5) == pytest.approx(2 / 252)
    assert min_p_value_mann_whitney(0, 5) == 1.0
    assert min_p_value_mann_whitney(1, 1) == 1.0
    for n_a, n_b in [(3, 3), (4, 6), (8, 8)]:
        separated = stats.mannwhitneyu(np.arange(n_a), np.arange(n_b) + 100.0, method="exact")
        assert min_p_value_mann_whitney(n_a, n_b) == pytest.approx(separated.pvalue)


@pytest.mark.parametrize(("n_a", "n_b"), [(3, 3), (4, 7), (8, 8), (10, 10), (12, 9), (25, 30)])
def test_compare_trials_p_value_equals_scipy_exact(n_a: int, n_b: int) -> None:
    rng = np.random.default_rng(n_a * 100 + n_b)
    for _ in range(5):
        a, b = rng.lognormal(0, 0.3, n_a), rng.lognormal(0.2, 0.3, n_b)
        result = compare_trials(a, b)
        assert result.p_value == pytest.approx(stats.mannwhitneyu(b, a, method="exact").pvalue)
        assert result.p_adjusted == result.p_value
        assert result.center_a == np.median(a) and result.center_b == np.median(b)
        assert result.significant == (result.p_value < 0.05)


def test_hodges_lehmann_hand_computed() -> None:
    a, b = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    shift = hodges_lehmann(a, b)  # differences 1,2,2,3,3,3,4,4,5
    assert shift.value == 3.0 and shift.ci_low is None  # 3 vs 3 cannot reach 95%
    ratio = hodges_lehmann(a, b, log_scale=True)  # ratios 4/3 .. 6, median 2.5
    assert ratio.value == pytest.approx(2.5)
    # 5 vs 5: two-sided critical U at 0.05 is 2 (P(U <= 2) = 4/252), so the CI is
    # [D_(3), D_(23)] of the 25 sorted differences.
    a5, b5 = np.array([1.0, 4, 9, 16, 25]), np.array([2.0, 30, 40, 50, 60])
    differences = np.sort(np.subtract.outer(b5, a5).ravel())
    result = hodges_lehmann(a5, b5)
    assert result.value == np.median(differences)
    assert (result.ci_low, result.ci_high) == (differences[2], differences[22])


def test_hodges_lehmann_interval_is_dual_to_the_exact_test() -> None:
    rng = np.random.default_rng(13)
    for _ in range(200):
        a, b = rng.lognormal(0, 0.3, 6), rng.lognormal(0.3, 0.3, 7)
        result = compare_trials(a, b)
        significant = result.p_value <= 0.05
        assert (result.shift.ci_low > 0 or result.shift.ci_high < 0) == significant
        assert (result.ratio.ci_low > 1 or result.ratio.ci_high < 1) == significant


def test_hodges_lehmann_large_samples_use_normal_approximation() -> None:
    rng = np.random.default_rng(14)
    a, b = rng.normal(0, 1, 150), rng.normal(0.5, 1, 150)
    result = hodges_lehmann(a, b)
    assert result.ci_low < 0.5 < result.ci_high
    assert result.ci_low < result.value < result.ci_high


def test_compare_trials_warnings_and_edges() -> None:
    result = compare_trials(np.array([1.0, 2, 3]), np.array([4.0, 5, 6]))
    assert "3 trials per side can never reach p<0.05 (minimum possible p=0.1)" in result.warnings
    assert result.p_value == pytest.approx(0.1) and not result.significant
    unequal = compare_trials(np.array([1.0, 2]), np.array([4.0, 5, 6, 7]))
    assert any(w.startswith("2 vs 4 trials can never reach") for w in unequal.warnings)
    empty = compare_trials(np.array([]), np.array([1.0, 2.0]))
    assert empty.p_value is None and not empty.significant and empty.center_a is None
    assert compare_trials(np.array([1.0, np.nan, 2, 3, 4]), np.arange(5.0) + 10).n_a == 4
    negative = compare_trials(np.array([-1.0, 2, 3, 4]), np.array([5.0, 6, 7, 8]))
    assert negative.ratio.value is None and negative.shift.value is not None


def test_compare_trials_with_ties_uses_seeded_permutation() -> None:
    a = np.array([1.0, 2, 2, 3, 5])
    b = np.array([4.0, 5, 6, 6, 7])
    result = compare_trials(a, b)
    assert any("ties" in w for w in result.warnings)
    assert result == compare_trials(a, b)
    # 252 arrangements: enumerated exactly, so close to the tie-corrected normal approximation
    assert result.p_value == pytest.approx(stats.mannwhitneyu(b, a).pvalue, abs=0.02)


def test_holm_adjust_hand_computed() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 -> 4x, 3x, 2x, 1x = 0.02, 0.03, 0.06, 0.04 -> monotone
    assert holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx((0.03, 0.06, 0.06, 0.02))
    assert holm_adjust([None, 0.01, 0.04]) == (None, pytest.approx(0.02), pytest.approx(0.04))
    assert holm_adjust([0.5, 0.9]) == (1.0, 1.0)
    assert holm_adjust([]) == ()
    with pytest.raises(ValueError):
        holm_adjust([1.5])


def test_with_holm_updates_copies() -> None:
    rng = np.random.default_rng(15)
    comparisons = [compare_trials(rng.normal(0, 1, 10), rng.normal(shift, 1, 10))
                   for shift in (0.0, 1.5, 3.0)]
    adjusted = with_holm(comparisons)
    expected = holm_adjust([c.p_value for c in comparisons])
    for original, new, p_adj in zip(comparisons, adjusted, expected, strict=True):
        assert original.p_adjusted == original.p_value  # the originals are untouched
        assert new.p_adjusted == p_adj and new.p_value == original.p_value
        assert new.significant == (p_adj < 0.05)


def test_with_holm_warns_when_family_is_out_of_reach() -> None:
    separated = [compare_trials(np.arange(5.0), np.arange(5.0) + 100) for _ in range(7)]
    adjusted = with_holm(separated)  # 7 * 2/252 = 0.056
    assert all(not c.significant for c in adjusted)
    assert any(w.startswith("with Holm over 7 comparisons, 5 trials per side can never reach")
               for w in adjusted[0].warnings)
    again = with_holm(adjusted)
    assert again[0].warnings == adjusted[0].warnings


# --- verdicts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("comparator", "low", "high", "threshold", "verdict"),
    [
        ("<", 1.0, 1.5, 2.0, Verdict.PASS),
        ("<", 1.0, 2.0, 2.0, Verdict.INCONCLUSIVE),
        ("<", 2.0, 3.0, 2.0, Verdict.FAIL),
        ("<", 1.0, 3.0, 2.0, Verdict.INCONCLUSIVE),
        ("<=", 1.0, 2.0, 2.0, Verdict.PASS),
        ("<=", 2.0, 3.0, 2.0, Verdict.INCONCLUSIVE),
        ("<=", 2.1, 3.0, 2.0, Verdict.FAIL),
        (">", 2.5, 3.0, 2.0, Verdict.PASS),
        (">", 2.0, 3.0, 2.0, Verdict.INCONCLUSIVE),
        (">", 1.0, 2.0, 2.0, Verdict.FAIL),
        (">=", 2.0, 3.0, 2.0, Verdict.PASS),
        (">=", 1.0, 2.0, 2.0, Verdict.INCONCLUSIVE),
        (">=", 1.0, 1.9, 2.0, Verdict.FAIL),
    ],
)
def test_slo_verdict_from_bounds(
    comparator: str, low: float, high: float, threshold: float, verdict: Verdict
) -> None:
    assert slo_verdict(estimate(low, high), comparator, threshold) is verdict


def test_slo_verdict_without_interval_is_inconclusive() -> None:
    assert slo_verdict(estimate(None, None, None), "<", 2.0) is Verdict.INCONCLUSIVE
    assert slo_verdict(estimate(None, None, 1.0), "<", 2.0) is Verdict.INCONCLUSIVE
    with pytest.raises(ValueError):
        slo_verdict(estimate(1.0, 2.0), "==", 2.0)


def test_non_inferiority_matches_welch_on_logs() -> None:
    rng = np.random.default_rng(16)
    candidate, baseline = rng.lognormal(0.0, 0.1, 8), rng.lognormal(0.05, 0.1, 10)
    result = non_inferiority(candidate, baseline, margin=0.05)
    welch = stats.ttest_ind(np.log(candidate), np.log(baseline), equal_var=False)
    ci = welch.confidence_interval(0.95)
    assert result.ratio.method == "welch-log-ratio"
    assert (result.ratio.ci_low, result.ratio.ci_high) == pytest.approx(
        (math.exp(ci.low), math.exp(ci.high)))


def test_non_inferiority_verdicts() -> None:
    rng = np.random.default_rng(17)
    baseline = rng.lognormal(0.0, 0.05, 12)
    better = non_inferiority(0.8 * rng.lognormal(0.0, 0.05, 12), baseline, margin=0.05)
    worse = non_inferiority(1.4 * rng.lognormal(0.0, 0.05, 12), baseline, margin=0.05)
    noisy = non_inferiority(rng.lognormal(0.0, 0.2, 3), rng.lognormal(0.0, 0.2, 3), margin=0.05)
    assert better.verdict is Verdict.PASS
    assert worse.verdict is Verdict.FAIL
    assert noisy.verdict is Verdict.INCONCLUSIVE
    # throughput: higher is better, so a 40% rise passes and a 20% drop fails
    assert non_inferiority(1.4 * baseline, baseline, 0.05, lower_is_better=False).verdict \
        is Verdict.PASS
    assert non_inferiority(0.8 * rng.lognormal(0, 0.05, 12), baseline, 0.05,
                           lower_is_better=False).verdict is Verdict.FAIL


def test_non_inferiority_single_trial_is_inconclusive_with_reason() -> None:
    result = non_inferiority(np.array([1.0]), np.array([2.0]), margin=0.05)
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.ratio.value == pytest.approx(0.5) and result.ratio.ci_low is None
    assert any("needs >= 2 trials per side" in w for w in result.warnings)
    with pytest.raises(ValueError):
        non_inferiority(np.array([1.0, 2.0]), np.array([1.0, 2.0]), margin=-0.1)


# --- planning ---------------------------------------------------------------------------------


def test_trials_needed_minimum_is_where_mann_whitney_can_reach_alpha() -> None:
    assert trials_needed(0.01, 0.5).trials_per_variant == 4  # 2/70 < 0.05 <= 2/20
    assert trials_needed(0.01, 0.5, alpha=0.01).trials_per_variant == 5  # 2/252 < 0.01
    assert trials_needed(0.0, 0.1).trials_per_variant == 4


def test_trials_needed_follows_the_normal_approximation() -> None:
    cv, effect = 0.2, 0.1
    sigma, delta = math.sqrt(math.log1p(cv**2)), math.log1p(effect)
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    approximate = 2 * z**2 * (sigma / delta) ** 2 / trial_planning.MW_PLANNING_EFFICIENCY
    plan = trials_needed(cv, effect)
    assert plan.trials_per_variant is not None
    assert approximate <= plan.trials_per_variant <= approximate + 3
    assert (plan.cv, plan.effect, plan.alpha, plan.power) == (cv, effect, 0.05, 0.8)


def test_trials_needed_monotone_and_capped() -> None:
    counts = [trials_needed(cv, 0.1).trials_per_variant for cv in (0.05, 0.1, 0.2, 0.3)]
    assert counts == sorted(counts)
    capped = trials_needed(0.37, 0.1)
    assert capped.trials_per_variant is None
    assert "needs more than 200 trials per variant" in capped.warnings[0]
    assert trials_needed(0.2, 0.0).trials_per_variant is None
    assert trials_needed(0.2, -0.1).trials_per_variant == trials_needed(0.2, 1 / 0.9 - 1)\
        .trials_per_variant
    with pytest.raises(ValueError):
        trials_needed(-0.1, 0.1)


def test_identical_trials_give_no_point_interval() -> None:
    """Zero spread across trials is no evidence of zero uncertainty: no interval, a warning,
    and an SLO on it stays undecided."""
    result = across_trials_estimate(np.array([250.0, 250.0, 250.0]))
    assert result.value == pytest.approx(250.0)
    assert result.ci_low is None and result.ci_high is None
    assert "same value" in result.warnings[-1]
    assert slo_verdict(result, ">", 100.0) is Verdict.INCONCLUSIVE
    zeros = across_trials_estimate(np.zeros(4))  # error rates: the raw scale, same rule
    assert zeros.value == 0.0 and zeros.ci_high is None


def test_trials_for_gate_reaches_its_power_in_simulation() -> None:
    """The planned trial count makes the gate PASS about `power` of the time at ratio 1, and
    one trial fewer does not."""
    from vllm_slo.stats.trial_planning import trials_for_gate

    cv, margin = 0.05, 0.10
    k = trials_for_gate(cv, margin)
    assert k is not None and 3 <= k <= 10
    assert trials_for_gate(0.10, 0.10) == pytest.approx(18, abs=2)  # margin = CV: many
    sigma = math.sqrt(math.log1p(cv**2))
    rng = np.random.default_rng(21)

    def pass_rate(trials: int) -> float:
        passes = sum(non_inferiority(np.exp(rng.normal(0, sigma, trials)),
                                     np.exp(rng.normal(0, sigma, trials)), margin).verdict
                     is Verdict.PASS for _ in range(2000))
        return passes / 2000

    assert pass_rate(k) == pytest.approx(0.8, abs=0.04)
    assert pass_rate(k - 1) < 0.8
    assert trials_for_gate(0.0, 0.05) == 2
    assert trials_for_gate(0.4, 0.01) is None  # more than the planner looks at
    assert trials_for_gate(0.05, 0.05) > trials_for_gate(0.03, 0.05)


def test_mean_of_nonnegative_values_never_has_a_negative_bound() -> None:
    """An outage mid-run (token bins collapsing to 0) once printed a throughput interval of
    [-236.8, 578.1] tok/s."""
    from vllm_slo.stats.statistics import mean_estimate

    bins = np.array([600.0] * 6 + [0.0] * 12)
    estimate = mean_estimate(bins)
    assert estimate.ci_low == 0.0 and estimate.ci_high > estimate.value > 0
    assert any("cut there" in w for w in estimate.warnings)
    signed = mean_estimate(bins - 300.0)  # values that can be negative keep their interval
    assert signed.ci_low < 0
