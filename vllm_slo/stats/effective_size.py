"""Autocorrelation and effective sample size of time-ordered request series.

Requests inside one run share batches and queues, so consecutive latencies are correlated; an
interval that treats them as independent is too narrow. These pure functions give the effective
(independent-equivalent) number of samples: Geyer's initial monotone sequence on the FFT
autocorrelation, for the series itself or for the indicator ``x_t <= threshold`` that a
quantile's interval depends on (docs/statistics.md). Series of more than ``BATCHED_ABOVE``
samples get the same quantity from the means of consecutive batches (``batch_means_tau``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import fft as scipy_fft

from vllm_slo.stats.inputs import as_1d_float

#: The autocorrelation of a tail indicator is estimated from the requests beyond the percentile;
#: with fewer than this many of them the estimate is too noisy to trust on its own, so the tail
#: is never credited with *less* dependence than the nearest level that has this many.
MIN_EXCEEDANCES_FOR_TAIL_ACF: int = 50


#: In the exact estimate (`exact_series_tau`, `exact_indicator_tau`: the report's path up to
#: ``BATCHED_ABOVE``, and the calibration's reference beyond), series longer than this get
#: their autocorrelation from blocks (below), shorter ones from one FFT of the whole series.
#: Both give the same numbers up to floating-point rounding (~1e-15).
BLOCKED_ABOVE: int = 1 << 22
#: Lags the blocked estimate covers at first (block length); twice as many while Geyer's
#: sequence has not stopped inside them.
FIRST_BLOCK: int = 1 << 18
#: A long indicator whose rarer value occurs at most this often (a threshold far in a tail)
#: gets its autocovariances from the positions of those samples (pairs of them at each lag).
SPARSE_MINORITY: int = 4096
SPARSE_LAGS: int = 1 << 12
_BATCH_SAMPLES = 1 << 22  # samples transformed at once (~100 MB of FFT buffers)

#: Series longer than this get tau from batch means (`batch_means_tau`, a method of its own,
#: calibrated in docs/statistics.md) instead of from their autocorrelation at every lag;
#: shorter ones keep the exact estimate above, bit for bit.
BATCHED_ABOVE: int = 1 << 22
_REDUCE_SAMPLES = 1 << 22  # samples reduced to batch sums at once (bounds temporaries)

# A series for the blocked estimate: (start, stop) -> its centered values there, float64.
BlockSource = Callable[[int, int], np.ndarray]


def _autocorrelation(x: np.ndarray) -> np.ndarray | None:
    """Sample autocorrelation at lags 0..n-1 (divisor n, FFT); None for a constant series."""
    n = x.size
    centered = x - x.mean()
    size = scipy_fft.next_fast_len(2 * n - 1, real=True)
    spectrum = scipy_fft.rfft(centered, size, workers=-1)
    acov: np.ndarray = scipy_fft.irfft(np.abs(spectrum) ** 2, size, workers=-1)[:n]
    if not acov[0] > 1e-12 * max(float(np.dot(x, x)), 1e-300) / n:
        return None
    rho: np.ndarray = acov / acov[0]
    return rho


def blocked_autocovariance(source: BlockSource, n: int, block: int) -> np.ndarray:
    """``sum_t c_t c_{t+k}`` for lags k < block, from blocks of ``block`` samples.

    Each block is transformed once (zero-padded to twice its length); a lag below the block
    length pairs a sample with one in its own block or the next, so the sum of each block's
    power spectrum (pairs inside blocks) and of each block's cross spectrum with the next
    (pairs across a boundary, read at offset ``block`` of its inverse) give every pair once:
    the same sums as one FFT of the whole series (what `_autocorrelation` computes), in
    O(n log block) time and O(batch) memory."""
    size = 2 * block
    auto = np.zeros(block + 1)
    cross = np.zeros(block + 1, dtype=complex)
    previous: np.ndarray | None = None
    rows = max(1, _BATCH_SAMPLES // block)
    frame = np.zeros((rows, size))  # reused: the padding half stays zero
    product = np.empty(block + 1, dtype=complex)
    for first in range(0, n, rows * block):
        values = source(first, min(n, first + rows * block))
        full, rest = divmod(values.size, block)
        if full:
            frame[:full, :block] = values[:full * block].reshape(full, block)
        if rest:  # the series' last, partial block
            frame[full, :rest] = values[full * block:]
            frame[full, rest:block] = 0.0
        used = full + (1 if rest else 0)
        spectra = scipy_fft.rfft(frame[:used], axis=1, workers=-1)
        pairs = spectra.view(np.float64).reshape(used, block + 1, 2)
        auto += np.einsum("ijk,ijk->j", pairs, pairs)
        for row in range(used):  # each block's cross spectrum with the next one
            if previous is not None:
                np.conjugate(previous, out=product)
                product *= spectra[row]
                cross += product
            previous = spectra[row]
        previous = previous.copy() if previous is not None else None
    sums: np.ndarray = (scipy_fft.irfft(auto, size, workers=-1)[:block]
                        + scipy_fft.irfft(cross, size, workers=-1)[block:])
    return sums


def _geyer_tau(rho: np.ndarray, complete: bool) -> float | None:
    """``-1 + 2 * sum`` of Geyer's initial monotone pair sums of the autocorrelations ``rho``
    (lag 0 first); None when ``rho`` is a prefix (``complete`` False) that the sequence has
    not stopped inside."""
    n_pairs = rho.size // 2
    pair_sums = rho[: 2 * n_pairs].reshape(n_pairs, 2).sum(axis=1)
    non_positive = np.flatnonzero(pair_sums <= 0.0)
    if not non_positive.size and not complete:
        return None
    stop = int(non_positive[0]) if non_positive.size else n_pairs
    pair_sums = np.minimum.accumulate(pair_sums[:stop])
    return max(-1.0 + 2.0 * float(pair_sums.sum()), 1.0)


def _complete_tau(rho: np.ndarray) -> float:
    """`_geyer_tau` of all the autocorrelations: the sequence always stops inside them."""
    tau = _geyer_tau(rho, complete=True)
    assert tau is not None  # complete: never None
    return tau


def _blocked_tau(source: BlockSource, n: int, sum_squares: float) -> float | None:
    """Geyer's tau from blocked autocovariances (lags covered grow until it stops); None for
    a constant series. `sum_squares`: ``sum(x**2)`` of the uncentered series."""
    block = FIRST_BLOCK
    while True:
        complete = block >= n
        acov = blocked_autocovariance(source, n, min(block, n))
        if not acov[0] > 1e-12 * max(sum_squares, 1e-300) / n:
            return None
        tau = _geyer_tau(acov / acov[0], complete)
        if tau is not None:
            return tau
        block *= 2


def batch_length(n: int) -> int:
    """Samples per batch for a series of n: ``ceil(sqrt(n))``, so about sqrt(n) batches.

    The classical rule for batch means (Flegal & Jones 2010): batch length and number of
    batches both grow without bound, the condition under which the batch-means variance is
    consistent. Long batches matter here: correlation spread thinly over many lags (requests
    that share a slow spell, each contributing gaps over seconds) is below the noise of each
    single-lag autocorrelation, where Geyer's sequence stops, but not below that of batch means
    that sum it (docs/statistics.md: on the analysis benchmark's runs the exact estimate
    claimed ~100x too many effective samples for ITL p99; sqrt(n)-sample batches did not)."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    return math.isqrt(n - 1) + 1


def batch_sums(x: np.ndarray, batch: int) -> np.ndarray:
    """Sums of each complete batch of `batch` consecutive samples, as float64 (the last
    ``n mod batch`` samples are left out; a boolean series gives counts)."""
    count = x.size // batch
    rows = x[: count * batch].reshape(count, batch)
    step = max(1, _REDUCE_SAMPLES // batch)
    out = np.empty(count)
    for first in range(0, count, step):
        out[first:first + step] = rows[first:first + step].sum(axis=1)
    return out


def batch_means_tau(means: np.ndarray, batch: int, variance: float) -> float:
    """tau of a series from the means of its consecutive batches of `batch` samples: ``b
    gamma_0(Y) tau_Y / gamma_0(x)``, at least 1; `variance` is ``gamma_0(x)`` (divisor n).

    Why it estimates the same tau: for a stationary series with summable autocovariances
    ``gamma_k`` the long-run variance of the batch means ``Y`` is exactly ``(1 / b) * sum_k
    gamma_k`` whatever b (every pair of samples is counted once, inside a batch or across
    batches), so ``sum_k gamma_k = b * gamma_0(Y) * tau_Y``, and ``tau = sum_k gamma_k /
    gamma_0``. ``tau_Y`` is Geyer's initial monotone sequence on the means, the estimator of
    the exact path; only lags below b lose their resolution, and those matter to the sum only
    through the batch means' variance, which holds them exactly. Unlike batch means with a
    single batch length (``b * var(Y)``), the identity does not need b much longer than the
    correlation; b sets the noise (that of Geyer's estimate on n / b samples) and how much
    correlation is summed before the sequence looks at it (`batch_length`)."""
    if not variance > 0.0:
        return 1.0
    rho = _autocorrelation(means)
    if rho is None:  # all batch means equal: no long-run variance left
        return 1.0
    tau_means = float(_complete_tau(rho))
    return max(1.0, batch * float(np.var(means)) * tau_means / variance)


def _centered_sum_squares(x: np.ndarray, mean: float) -> float:
    total = 0.0
    for first in range(0, x.size, _REDUCE_SAMPLES):
        part = x[first:first + _REDUCE_SAMPLES] - mean
        total += float(np.dot(part, part))
    return total


def batched_series_tau(x: np.ndarray, batch: int) -> float:
    """`batch_means_tau` of the series itself (1 for a constant series, as the exact path)."""
    mean = float(x.mean())
    variance = _centered_sum_squares(x, mean) / x.size
    # the exact path's test (sum of centered squares > 1e-12 sum(x^2) / n), with sum(x^2) / n
    # as variance + mean^2 rather than another pass
    if not variance * x.size > 1e-12 * max(variance + mean * mean, 1e-300):
        return 1.0
    return batch_means_tau(batch_sums(x, batch) / batch, batch, variance)


def batched_indicator_tau(x: np.ndarray, threshold: float, batch: int) -> float:
    """`batch_means_tau` of the indicator ``x <= threshold``: its batch means are the shares
    of each batch's samples at or below the threshold (binned counts)."""
    below = x <= threshold
    return _batched_indicator_tau(below, int(np.count_nonzero(below)), batch)


def _batched_indicator_tau(below: np.ndarray, ones: int, batch: int) -> float:
    if ones in (0, below.size):
        return 1.0
    share = ones / below.size
    return batch_means_tau(batch_sums(below, batch) / batch, batch, share * (1.0 - share))


def exact_series_tau(x: np.ndarray) -> float:
    """Geyer's tau from the series' autocorrelations at every lag the sequence needs (one FFT
    up to ``BLOCKED_ABOVE`` samples, blocked beyond): the reference the batched estimate is
    calibrated against."""
    if x.size <= BLOCKED_ABOVE:
        rho = _autocorrelation(x)
        return 1.0 if rho is None else float(_complete_tau(rho))
    mean = x.mean()
    tau = _blocked_tau(lambda a, b: x[a:b] - mean, x.size, float(np.dot(x, x)))
    return 1.0 if tau is None else tau


def _series_tau(x: np.ndarray) -> float:
    if x.size > BATCHED_ABOVE:
        return batched_series_tau(x, batch_length(x.size))
    return exact_series_tau(x)


def sparse_indicator_autocovariance(positions: np.ndarray, n: int, lags: int) -> np.ndarray:
    """``sum_t (J_t - p)(J_{t+k} - p)`` for lags k < `lags`, where J is 1 exactly at the
    sorted `positions` of a series of n: the pair counts at each lag, corrected for the mean
    (``C_k - p (#{P < n-k} + #{P >= k}) + (n - k) p^2``), the same sums an FFT gives."""
    m = positions.size
    share = m / n
    counts = np.zeros(lags)
    counts[0] = m
    for distance in range(1, m):
        gaps = positions[distance:] - positions[:-distance]
        if gaps.min() >= lags:
            break  # sorted positions: later distances only span longer lags
        counts += np.bincount(gaps[gaps < lags], minlength=lags)
    lag = np.arange(lags)
    before_end = np.searchsorted(positions, n - lag, side="left")
    from_lag = m - np.searchsorted(positions, lag, side="left")
    corrected: np.ndarray = counts - share * (before_end + from_lag) + (n - lag) * share * share
    return corrected


def _indicator_tau(x: np.ndarray, threshold: float) -> float:
    """Geyer's tau of the indicator ``x <= threshold`` (long ones: from the positions of the
    rarer value when it is rare, else from batch means above ``BATCHED_ABOVE``)."""
    if x.size <= BLOCKED_ABOVE:
        return _integrated_autocorrelation_time((x <= threshold).astype(float))
    return _long_indicator_tau(x, threshold, batched=x.size > BATCHED_ABOVE)


def exact_indicator_tau(x: np.ndarray, threshold: float) -> float:
    """Geyer's tau of the indicator ``x <= threshold`` from its autocorrelations at every lag
    the sequence needs, at any length: the reference the batched estimate is calibrated
    against."""
    if x.size <= BLOCKED_ABOVE:
        return _integrated_autocorrelation_time((x <= threshold).astype(float))
    return _long_indicator_tau(x, threshold, batched=False)


def _long_indicator_tau(x: np.ndarray, threshold: float, batched: bool) -> float:
    """tau of the indicator of a long series: 1 when constant, from the positions of the rarer
    value when it is rare, else from batch means (`batched`) or blocked autocovariances."""
    n = x.size
    below = x <= threshold
    ones = int(np.count_nonzero(below))
    if ones in (0, n):
        return 1.0  # constant: no information about dependence
    if min(ones, n - ones) <= SPARSE_MINORITY:
        positions = np.flatnonzero(below if ones <= n - ones else ~below)
        acov = sparse_indicator_autocovariance(positions, n, SPARSE_LAGS)
        tau = _geyer_tau(acov / acov[0], complete=False)
        if tau is not None:
            return tau
    if batched:
        return _batched_indicator_tau(below, ones, batch_length(n))
    del below
    share = ones / n
    tau = _blocked_tau(lambda a, b: (x[a:b] <= threshold) - share, n, float(ones))
    return 1.0 if tau is None else tau


def _integrated_autocorrelation_time(x: np.ndarray) -> float:
    """Geyer's initial monotone sequence estimate of ``tau = 1 + 2 * sum(rho_k)``, at least 1.

    Autocorrelations are summed in adjacent pairs ``rho_2m + rho_2m+1`` until the first
    non-positive pair, and the pair sums are forced to be non-increasing (Geyer 1992). For
    independent samples ``tau`` is 1 and the effective sample size ``n / tau`` is n. Series
    longer than ``BATCHED_ABOVE`` get tau from batch means (`batch_means_tau`).
    """
    if x.size < 4:
        return 1.0
    return _series_tau(x)


def effective_sample_size(series: np.ndarray) -> float:
    """Effective number of independent samples in a time-ordered series.

    ``n / tau`` with ``tau`` the integrated autocorrelation time from Geyer's initial monotone
    sequence, clipped to ``[1, n]``: n for independent samples, about ``n (1 - rho) / (1 + rho)``
    for an AR(1) series with lag-1 autocorrelation rho. Non-finite values are dropped; an empty
    series gives 0, a constant one (no information about dependence) gives n.
    """
    x = as_1d_float(series, "series")
    finite = np.isfinite(x)
    if not finite.all():
        x = x[finite]
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
    """Effective size of the indicator ``x <= threshold`` of a time-ordered series."""
    tau = 1.0 if x.size < 4 else _indicator_tau(x, threshold)
    return float(min(float(x.size), max(1.0, x.size / tau)))


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
