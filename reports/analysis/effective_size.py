"""Autocorrelation and effective sample size of time-ordered request series.

Requests inside one run share batches and queues, so consecutive latencies are correlated; an
interval that treats them as independent is too narrow. These pure functions give the effective
(independent-equivalent) number of samples: Geyer's initial monotone sequence on the FFT
autocorrelation, for the series itself or for the indicator ``x_t <= threshold`` that a
quantile's interval depends on (docs/statistics.md).
"""

from __future__ import annotations

import numpy as np
from scipy import fft as scipy_fft

from vllm_slo.reports.analysis.inputs import as_1d_float

#: The autocorrelation of a tail indicator is estimated from the requests beyond the percentile;
#: with fewer than this many of them the estimate is too noisy to trust on its own, so the tail
#: is never credited with *less* dependence than the nearest level that has this many.
MIN_EXCEEDANCES_FOR_TAIL_ACF: int = 50


def _autocorrelation(x: np.ndarray) -> np.ndarray | None:
    """Sample autocorrelation at lags 0..n-1 (divisor n, FFT); None for a constant series."""
    n = x.size
    centered = x - x.mean()
    size = scipy_fft.next_fast_len(2 * n - 1, real=True)
    spectrum = scipy_fft.rfft(centered, size, workers=-1)
    acov = scipy_fft.irfft(np.abs(spectrum) ** 2, size, workers=-1)[:n]
    if not acov[0] > 1e-12 * max(float(np.dot(x, x)), 1e-300) / n:
        return None
    return acov / acov[0]


def _integrated_autocorrelation_time(x: np.ndarray) -> float:
    """Geyer's initial monotone sequence estimate of ``tau = 1 + 2 * sum(rho_k)``, at least 1.

    Autocorrelations are summed in adjacent pairs ``rho_2m + rho_2m+1`` until the first
    non-positive pair, and the pair sums are forced to be non-increasing (Geyer 1992). For
    independent samples ``tau`` is 1 and the effective sample size ``n / tau`` is n.
    """
    if x.size < 4:
        return 1.0
    rho = _autocorrelation(x)
    if rho is None:
        return 1.0
    n_pairs = rho.size // 2
    pair_sums = rho[: 2 * n_pairs].reshape(n_pairs, 2).sum(axis=1)
    non_positive = np.flatnonzero(pair_sums <= 0.0)
    stop = int(non_positive[0]) if non_positive.size else n_pairs
    pair_sums = np.minimum.accumulate(pair_sums[:stop])
    return max(-1.0 + 2.0 * float(pair_sums.sum()), 1.0)


def effective_sample_size(series: np.ndarray) -> float:
    """Effective number of independent samples in a time-ordered series.

    ``n / tau`` with ``tau`` the integrated autocorrelation time from Geyer's initial monotone
    sequence, clipped to ``[1, n]``: n for independent samples, about ``n (1 - rho) / (1 + rho)``
    for an AR(1) series with lag-1 autocorrelation rho. Non-finite values are dropped; an empty
    series gives 0, a constant one (no information about dependence) gives n.
    """
    x = as_1d_float(series, "series")
    x = x[np.isfinite(x)]
    n = x.size
    if n == 0:
        return 0.0
    return float(min(float(n), max(1.0, n / _integrated_autocorrelation_time(x))))


def lag1_autocorrelation(series: np.ndarray) -> float | None:
    """Lag-1 sample autocorrelation of a time-ordered series; None below 3 values or if constant."""
    x = as_1d_float(series, "series")
    x = x[np.isfinite(x)]
    if x.size < 3:
        return None
    centered = x - x.mean()
    denominator = float(np.dot(centered, centered))
    if not denominator > 1e-12 * max(float(np.dot(x, x)), 1e-300):
        return None
    return float(np.dot(centered[:-1], centered[1:]) / denominator)


def indicator_effective_size(x: np.ndarray, threshold: float) -> float:
    indicator = (x <= threshold).astype(float)
    return float(min(float(x.size), max(1.0, x.size / _integrated_autocorrelation_time(indicator))))


def tail_reference_level(q: float, n: int) -> float:
    """The level whose indicator autocorrelation the tail at q may not undercut (see constant)."""
    side = min(q, 1.0 - q)
    if side * n >= MIN_EXCEEDANCES_FOR_TAIL_ACF:
        return q
    ref_side = min(0.5, MIN_EXCEEDANCES_FOR_TAIL_ACF / n) if n > 0 else 0.5
    return ref_side if q < 0.5 else 1.0 - ref_side


def capped_quantile_effective_size(x: np.ndarray, q: float, value: float) -> float:
    n_eff = indicator_effective_size(x, value)
    ref = tail_reference_level(q, x.size)
    if ref != q:
        n_eff = min(n_eff, indicator_effective_size(x, float(np.quantile(x, ref))))
    return n_eff
