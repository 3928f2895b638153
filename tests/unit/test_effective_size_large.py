"""Effective sizes of long series (> ``BATCHED_ABOVE`` samples) from batch means.

The batched estimate (``effective_size.batch_means_tau``) is a method of its own: it is checked
against the exact Geyer estimate where both run (equal with batches of one sample; within a
stated tolerance on autocorrelated series; far larger than the exact one where correlation is
spread thinly over many lags, which is why it exists, see docs/statistics.md), and the exact
path of ordinary series is shown to be untouched.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.signal import lfilter

from tests.support.stats_simulation import stationary_ar1
from vllm_slo.stats import effective_size
from vllm_slo.stats.statistics import (
    mean_estimate,
    percentile_estimate,
    time_ordered,
)


def ar1_lognormal(n: int, rho: float, seed: int) -> np.ndarray:
    """exp(0.7 z), z a stationary Gaussian AR(1) with lag-1 autocorrelation rho."""
    return np.exp(0.7 * stationary_ar1(n, rho, seed))


def test_the_batch_length_is_the_ceiling_of_the_square_root() -> None:
    for n in (1, 2, 4, 5, 4_194_305, 246_556_563, 10**12):
        b = effective_size.batch_length(n)
        assert (b - 1) ** 2 < n <= b * b
    assert effective_size.batch_length(4_200_000) == 2050
    assert effective_size.batch_length(246_556_563) == 15_703
    with pytest.raises(ValueError, match="positive"):
        effective_size.batch_length(0)


@pytest.mark.parametrize("dtype", [np.float64, np.bool_])
def test_batch_sums_sum_each_complete_batch(monkeypatch: pytest.MonkeyPatch,
                                            dtype: type) -> None:
    rng = np.random.default_rng(0)
    x = (rng.random(10_007) < 0.3) if dtype is np.bool_ else rng.standard_normal(10_007)
    expected = x[: 10_007 // 13 * 13].reshape(-1, 13).sum(axis=1, dtype=np.float64)
    np.testing.assert_allclose(effective_size.batch_sums(x, 13), expected, rtol=1e-12)
    monkeypatch.setattr(effective_size, "_REDUCE_SAMPLES", 100)  # many reduction steps
    np.testing.assert_allclose(effective_size.batch_sums(x, 13), expected, rtol=1e-12)


@pytest.mark.parametrize("rho", [0.0, 0.6, 0.95])
def test_batches_of_one_sample_give_the_exact_estimate(rho: float) -> None:
    """With b = 1 the batch means are the series, and ``b gamma_0(Y) tau_Y / gamma_0(x)`` is
    the exact tau: the identity the method rests on, to rounding."""
    x = ar1_lognormal(100_000, rho, seed=1)
    threshold = float(np.quantile(x, 0.9))
    assert effective_size.batched_series_tau(x, 1) == pytest.approx(
        effective_size.exact_series_tau(x), rel=1e-9)
    assert effective_size.batched_indicator_tau(x, threshold, 1) == pytest.approx(
        effective_size.exact_indicator_tau(x, threshold), rel=1e-9)


# Tolerances: the batched tau is Geyer's estimate on n / b batch means, so its noise is that
# of m = n / b samples: measured over 6 seeds at n = 2^21, rho 0-0.99, the mean's series and
# the p50 / p99 indicators, its relative difference from the exact tau had a standard
# deviation of at most 0.6% with 2^20 means (b = 2) and 2.1% with 2^16 (b = 32; largest
# difference 5.7%). The tolerances are about 3 of those standard deviations: 2% and 8%.
@pytest.mark.parametrize("rho", [0.0, 0.9, 0.99])
def test_the_batched_estimate_agrees_with_the_exact_one_on_ar1(rho: float) -> None:
    x = ar1_lognormal(1 << 21, rho, seed=int(rho * 100))
    thresholds = [float(np.quantile(x, q)) for q in (0.5, 0.99)]
    exact = [effective_size.exact_series_tau(x),
             *(effective_size.exact_indicator_tau(x, t) for t in thresholds)]
    for batch, tolerance in ((2, 0.02), (32, 0.08)):
        batched = [effective_size.batched_series_tau(x, batch),
                   *(effective_size.batched_indicator_tau(x, t, batch) for t in thresholds)]
        assert batched == pytest.approx(exact, rel=tolerance), batch


def test_the_rule_s_batches_agree_with_the_exact_estimate_on_ar1() -> None:
    """At the rule's batch length (sqrt(n): 1449 samples, 1447 means at n = 2^21) the noise is
    that of Geyer's estimate on ~1,450 samples, about 10%, and the estimate runs a little high
    (the sequence keeps a pair sum or two that noise made positive, on few means: the report
    errs towards fewer effective samples). Over 6 series of rho 0.5-0.99, the mean's series
    and the p90 indicator: every ratio batched / exact within [0.8, 1.25], the median within
    [0.97, 1.12] (measured: 0.93-1.20, median 1.06, with 8 series)."""
    ratios = []
    for seed, rho in enumerate(np.linspace(0.5, 0.99, 6)):
        x = ar1_lognormal(1 << 21, float(rho), seed=100 + seed)
        b = effective_size.batch_length(x.size)
        ratios.append(effective_size.batched_series_tau(x, b)
                      / effective_size.exact_series_tau(x))
        threshold = float(np.quantile(x, 0.9))
        ratios.append(effective_size.batched_indicator_tau(x, threshold, b)
                      / effective_size.exact_indicator_tau(x, threshold))
    assert 0.97 <= float(np.median(ratios)) <= 1.12, ratios
    assert all(0.8 <= r <= 1.25 for r in ratios), ratios


def lockstep_itl_gaps(streams: int, steps: int, step_rho: float, seed: int) -> np.ndarray:
    """Gaps of `streams` streams decoding in lock step (a shared AR(1) step time, 5% of it
    per-stream noise), in arrival order: correlated within a step and across steps."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(steps)
    noise[1:] *= math.sqrt(1.0 - step_rho**2)
    step_s = 0.02 * np.exp(0.3 * lfilter([1.0], [1.0, -step_rho], noise))
    arrival = np.cumsum(step_s)[:, None] + rng.exponential(0.001, (steps, streams))
    gaps = np.diff(arrival, axis=0)
    return time_ordered(gaps.ravel(), arrival[1:].ravel())


def test_the_batched_estimate_agrees_on_lockstep_itl_gaps() -> None:
    gaps = lockstep_itl_gaps(32, 40_000, 0.9, seed=3)  # 1.28 M gaps
    for batch, tolerance in ((16, 0.05), (effective_size.batch_length(gaps.size), 0.25)):
        assert effective_size.batched_series_tau(gaps, batch) == pytest.approx(
            effective_size.exact_series_tau(gaps), rel=tolerance)
        for q in (0.5, 0.99):
            threshold = float(np.quantile(gaps, q))
            assert effective_size.batched_indicator_tau(gaps, threshold, batch) == pytest.approx(
                effective_size.exact_indicator_tau(gaps, threshold), rel=tolerance)


def open_loop_gaps(n_requests: int, chunks: int, seed: int) -> np.ndarray:
    """The analysis benchmark's model in small: each request's gaps share its level (an AR(1)
    over requests), ~160 requests a second stream at once, gaps in arrival order."""
    rng = np.random.default_rng(seed)
    send = np.sort(rng.uniform(0.0, n_requests / 160.0, n_requests))
    noise = rng.standard_normal(n_requests)
    noise[1:] *= math.sqrt(1.0 - 0.81)
    level = lfilter([1.0], [1.0, -0.9], noise)
    gaps = (0.015 * np.exp(0.25 * level))[:, None] * rng.lognormal(0.0, 0.35,
                                                                   (n_requests, chunks))
    arrival = send[:, None] + np.cumsum(gaps, axis=1)
    return time_ordered(gaps.ravel(), arrival.ravel())


def test_long_batches_see_correlation_spread_over_many_lags() -> None:
    """A request's level correlates its gaps, ~600 positions apart, over ~150,000 positions:
    a little at every lag, below the noise of each lag's autocorrelation, where Geyer's
    sequence stops. In the calibration's runs of this model (4.5 M gaps) the p99 indicator's
    tau was ~250 by replication, 2 by the exact estimate and 179 by the rule's batches."""
    gaps = open_loop_gaps(6000, 250, seed=4)  # 1.5 M gaps
    threshold = float(np.quantile(gaps, 0.99))
    exact = effective_size.exact_indicator_tau(gaps, threshold)
    batched = effective_size.batched_indicator_tau(gaps, threshold,
                                                   effective_size.batch_length(gaps.size))
    assert exact < 5.0
    assert batched > 10.0 * exact


def test_long_series_take_the_batched_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above BATCHED_ABOVE the report's own functions use batch means with the rule's batch
    length (thresholds lowered so that a small series is long)."""
    x = ar1_lognormal(200_000, 0.8, seed=5)
    monkeypatch.setattr(effective_size, "BLOCKED_ABOVE", 1000)
    monkeypatch.setattr(effective_size, "BATCHED_ABOVE", 1000)
    b = effective_size.batch_length(x.size)
    value = float(np.quantile(x, 0.9))
    n = float(x.size)
    assert percentile_estimate(x, 90.0).n_effective == pytest.approx(
        n / effective_size.batched_indicator_tau(x, value, b), rel=1e-12)
    assert mean_estimate(x).n_effective == pytest.approx(
        n / effective_size.batched_series_tau(x, b), rel=1e-12)


def test_series_up_to_the_threshold_keep_the_exact_path(monkeypatch: pytest.MonkeyPatch) -> None:
    x = ar1_lognormal(100_000, 0.8, seed=6)
    before = (percentile_estimate(x, 95.0), mean_estimate(x),
              effective_size.effective_sample_size(x))

    def no_batches(*args: object) -> float:
        raise AssertionError("a series at or below BATCHED_ABOVE took the batched path")

    monkeypatch.setattr(effective_size, "batch_means_tau", no_batches)
    monkeypatch.setattr(effective_size, "BATCHED_ABOVE", x.size)  # exactly at the threshold
    after = (percentile_estimate(x, 95.0), mean_estimate(x),
             effective_size.effective_sample_size(x))
    assert after == before  # bit for bit
    assert before[2] == x.size / effective_size.exact_series_tau(x)


def test_batched_edge_cases_match_the_exact_path() -> None:
    constant = np.full(10_000, 3.0)
    alternating = np.tile([1.0, -1.0], 5000)
    for x in (constant, alternating):
        assert effective_size.batched_series_tau(x, 100) == effective_size.exact_series_tau(x)
    assert effective_size.batched_indicator_tau(constant, 5.0, 100) == 1.0  # all below
    assert effective_size.batched_indicator_tau(alternating, 0.0, 2) == 1.0  # batch means equal


def test_a_rare_tail_indicator_stays_sparse_on_the_batched_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    x = ar1_lognormal(40_000, 0.8, seed=7)
    threshold = float(np.quantile(x, 0.9995))  # 20 samples above
    exact = effective_size.indicator_effective_size(x, threshold)
    monkeypatch.setattr(effective_size, "BLOCKED_ABOVE", 1000)
    monkeypatch.setattr(effective_size, "BATCHED_ABOVE", 1000)
    monkeypatch.setattr(effective_size, "batch_means_tau", lambda *a: 1 / 0)
    assert effective_size.indicator_effective_size(x, threshold) == pytest.approx(exact,
                                                                                  rel=1e-12)
