"""The large-run code paths give the small-run answers: ITL gaps in arrival order without
copies, tokens by arrival in steps, blocked and sparse autocovariances, batched percentiles,
float32 ECDFs. Each large path is forced onto small inputs (thresholds patched) and compared
with the direct computation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy.signal import lfilter

from vllm_slo.analysis import chunk_times
from vllm_slo.analysis.run_metrics import pooled_gaps
from vllm_slo.reports.render import figures
from vllm_slo.stats import effective_size
from vllm_slo.stats.statistics import (
    percentile_estimate,
    percentile_estimates,
    time_ordered,
)


def offset_lists(rng: np.random.Generator, rows: int, *, nulls: bool = False,
                 dtype: type = np.float32) -> tuple[pa.ListArray, np.ndarray]:
    lengths = rng.integers(0, 12, rows)
    flat = np.concatenate([np.cumsum(rng.exponential(0.02, k)) + 0.05 for k in lengths]
                          ).astype(dtype)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    mask = pa.array(rng.random(rows) < 0.1) if nulls else None
    lists = pa.ListArray.from_arrays(pa.array(bounds), pa.array(flat), mask=mask)
    # sends on a coarse grid: many gaps end at the same instant (ties keep row order)
    send = 1.8e9 + np.sort(np.round(rng.uniform(0, 5, rows), 2))
    return lists, send


def reference_gaps(lists: pa.ListArray, send: np.ndarray, rows: np.ndarray) -> np.ndarray:
    keep = pa.array(rows)
    return time_ordered(*pooled_gaps(lists.filter(keep), send[rows]))


@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gaps_in_arrival_order_are_the_time_ordered_pooled_gaps(seed: int, nulls: bool) -> None:
    rng = np.random.default_rng(seed)
    lists, send = offset_lists(rng, 400, nulls=nulls)
    rows = rng.random(400) < 0.8
    expected = reference_gaps(lists, send, rows)
    actual = chunk_times.gaps_in_arrival_order(lists, send, rows)
    assert actual.dtype == np.float64
    np.testing.assert_array_equal(actual, expected)


def test_gaps_fall_back_to_a_stable_argsort_when_times_need_more_bits() -> None:
    rng = np.random.default_rng(3)
    lists, send = offset_lists(rng, 200, dtype=np.float64)
    send = send - 1.8e9  # times from 0: their bit patterns span many binades
    rows = np.ones(200, dtype=bool)
    arrival = np.abs(rng.random(1000)) + 1e-300
    assert chunk_times._order_by_packed_key(arrival * 1e300, 10) is None
    np.testing.assert_array_equal(chunk_times.gaps_in_arrival_order(lists, send, rows),
                                  reference_gaps(lists, send, rows))


def test_gaps_of_no_rows_are_empty() -> None:
    lists, send = offset_lists(np.random.default_rng(4), 50)
    assert chunk_times.gaps_in_arrival_order(lists, send, np.zeros(50, dtype=bool)).size == 0


def test_tokens_by_arrival_in_steps_match_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(5)
    lists, send = offset_lists(rng, 300)
    tokens = rng.integers(0, 20, 300).astype(float)
    tokens[::17] = np.nan
    rows = rng.random(300) < 0.9
    flat = np.asarray(lists.flatten().to_numpy(), dtype=np.float64)
    counts = np.diff(lists.offsets.to_numpy())
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(counts > 0, np.nan_to_num(tokens) / counts, 0.0)
    arrival = np.repeat(send, counts) + flat
    weight = np.repeat(np.where(rows, share, np.nan), counts)
    index = np.floor((arrival - send[0]) / 0.5)
    inside = (index >= 0) & (index < 8) & np.isfinite(weight)
    expected = np.zeros(8)
    np.add.at(expected, index[inside].astype(int), weight[inside])
    one_pass = chunk_times.tokens_by_arrival(lists, send, tokens, rows, send[0], 0.5, 8)
    np.testing.assert_array_equal(one_pass, expected)
    monkeypatch.setattr(chunk_times, "_STEP", 64)  # many steps: sums agree to rounding
    np.testing.assert_allclose(
        chunk_times.tokens_by_arrival(lists, send, tokens, rows, send[0], 0.5, 8), expected,
        rtol=1e-12)


def ar1(n: int, rho: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return lfilter([1.0], [1.0, -rho], rng.lognormal(0.0, 0.5, n))


@pytest.mark.parametrize(("n", "rho"), [(50_000, 0.0), (80_001, 0.9), (60_000, 0.995)])
def test_blocked_autocovariance_gives_the_full_fft_effective_sizes(
        monkeypatch: pytest.MonkeyPatch, n: int, rho: float) -> None:
    x = ar1(n, rho, seed=n)
    threshold = float(np.quantile(x, 0.9))
    full = (effective_size.effective_sample_size(x),
            effective_size.indicator_effective_size(x, threshold))
    monkeypatch.setattr(effective_size, "BLOCKED_ABOVE", 1000)
    monkeypatch.setattr(effective_size, "FIRST_BLOCK", 256)  # escalates for rho = 0.995
    monkeypatch.setattr(effective_size, "_BATCH_SAMPLES", 4096)
    blocked = (effective_size.effective_sample_size(x),
               effective_size.indicator_effective_size(x, threshold))
    np.testing.assert_allclose(blocked, full, rtol=1e-12)


def test_sparse_indicator_autocovariance_is_the_fft_one() -> None:
    rng = np.random.default_rng(6)
    n = 20_000
    positions = np.unique(np.concatenate([rng.choice(n, 40, replace=False),
                                          np.arange(5000, 5030)]))
    indicator = np.zeros(n)
    indicator[positions] = 1.0
    centered = indicator - indicator.mean()
    direct = np.array([np.dot(centered[: n - k], centered[k:]) for k in range(64)])
    sparse = effective_size.sparse_indicator_autocovariance(positions, n, 64)
    np.testing.assert_allclose(sparse, direct, rtol=1e-9, atol=1e-9 * direct[0])


def test_a_rare_tail_indicator_takes_the_sparse_path(monkeypatch: pytest.MonkeyPatch) -> None:
    x = ar1(40_000, 0.8, seed=7)
    threshold = float(np.quantile(x, 0.9995))  # 20 samples above
    full = effective_size.indicator_effective_size(x, threshold)
    monkeypatch.setattr(effective_size, "BLOCKED_ABOVE", 1000)

    def no_blocks(*args: object) -> None:
        raise AssertionError("the sparse path should have decided")

    monkeypatch.setattr(effective_size, "blocked_autocovariance", no_blocks)
    assert effective_size.indicator_effective_size(x, threshold) == pytest.approx(full,
                                                                                   rel=1e-12)


@pytest.mark.parametrize("n", [0, 1, 7, 300, 5000])
def test_percentile_estimates_are_each_percentile_estimate(n: int) -> None:
    x = ar1(n, 0.7, seed=n) if n else np.empty(0)
    if n > 10:
        x[3] = np.nan
        x = np.round(x, 2)  # ties
    percentiles = (0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 100.0)
    batched = percentile_estimates(x, percentiles)
    assert list(batched) == list(percentiles)
    for p in percentiles:
        assert batched[p] == percentile_estimate(x, p)
    with pytest.raises(ValueError):
        percentile_estimates(x, (50.0, 101.0))


def test_long_ecdfs_are_float32_quantiles(monkeypatch: pytest.MonkeyPatch) -> None:
    values = ar1(20_000, 0.5, seed=8)
    values[5] = np.nan
    exact_x, exact_y = figures.ecdf_points(values, max_points=200)
    monkeypatch.setattr(figures, "ECDF_FLOAT32_ABOVE", 1000)
    x, y = figures.ecdf_points(values, max_points=200)
    np.testing.assert_array_equal(y, exact_y)
    np.testing.assert_array_equal(x, exact_x.astype(np.float32).astype(np.float64))
    assert x.dtype == np.float64
