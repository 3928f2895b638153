"""Statistics that don't lie: percentile CIs under autocorrelation, trial comparisons, verdicts.

Pure functions over 1-D numpy arrays. Every result is a small frozen dataclass carrying
``warnings``; "not enough data" is a value (``value=None`` plus a warning), never 0 and never an
exception. Exceptions are raised only for invalid arguments (a percentile of 120, a confidence of
0, an unknown comparator): those are programming or configuration errors. Nothing here prints,
plots or touches files; anything random takes an explicit ``seed``.

Methods, thresholds and the measured calibration are documented in ``docs/statistics.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import lru_cache

import numpy as np
from scipy import fft as scipy_fft
from scipy import special, stats

__all__ = [
    "MAX_TRIALS_PER_VARIANT",
    "MIN_EFFECTIVE_TAIL_SAMPLES",
    "MIN_EXCEEDANCES_FOR_TAIL_ACF",
    "MW_PLANNING_EFFICIENCY",
    "Comparison",
    "Estimate",
    "NonInferiority",
    "TrialPlan",
    "Verdict",
    "across_trials_estimate",
    "clopper_pearson_interval",
    "compare_trials",
    "effective_sample_size",
    "goodput_estimate",
    "hodges_lehmann",
    "holm_adjust",
    "lag1_autocorrelation",
    "mean_estimate",
    "min_p_value_mann_whitney",
    "non_inferiority",
    "order_statistic_interval",
    "percentile_estimate",
    "percentile_label",
    "quantile_effective_size",
    "rate_estimate",
    "slo_verdict",
    "trials_needed",
    "with_holm",
]

#: A percentile gets a value only when at least this many *effective* (independent-equivalent)
#: samples lie beyond it: ``n_eff * min(q, 1 - q) >= 5``. Below that the order-statistic interval
#: rests on a handful of clustered tail requests (and at 95% confidence it stops existing at
#: about 3.7), so the answer is "insufficient samples", never a number.
MIN_EFFECTIVE_TAIL_SAMPLES: float = 5.0

#: The autocorrelation of a tail indicator is estimated from the requests beyond the percentile;
#: with fewer than this many of them the estimate is too noisy to trust on its own, so the tail
#: is never credited with *less* dependence than the nearest level that has this many.
MIN_EXCEEDANCES_FOR_TAIL_ACF: int = 50

#: Exact Mann-Whitney null distributions are computed up to this many trials per side; beyond,
#: the normal approximation is used (trial counts that large are rare and it is then accurate).
_EXACT_MW_MAX_PER_SIDE: int = 100

#: ``trials_needed`` gives up (returns None) above this many trials per variant.
MAX_TRIALS_PER_VARIANT: int = 200

#: Asymptotic relative efficiency of Mann-Whitney versus the t-test used for planning: 108/125,
#: the smallest it can be for any continuous distribution (Hodges & Lehmann 1956). For normal
#: trial values it is 3/pi = 0.955, which plans ~10% fewer trials but then only just reaches
#: the requested power (81% for 80% in our simulation), and less for lighter-tailed trial data.
MW_PLANNING_EFFICIENCY: float = 108.0 / 125.0


class Verdict(str, Enum):
    """Three-valued SLO verdict resting on confidence bounds, not point estimates."""

    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"


@dataclass(frozen=True, slots=True)
class Estimate:
    """A point estimate with a confidence interval.

    ``value is None`` means there were not enough samples (``ci_low``/``ci_high`` are then None
    too, and ``warnings`` says why). ``value`` set with a None interval means a number exists but
    no honest interval does (e.g. a single trial).
    """

    value: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    n: int
    n_effective: float
    method: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Comparison:
    """B versus A on per-trial statistics (the unit of comparison is the trial)."""

    n_a: int
    n_b: int
    center_a: float | None
    center_b: float | None
    p_value: float | None
    p_adjusted: float | None
    shift: Estimate
    ratio: Estimate
    significant: bool
    alpha: float
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NonInferiority:
    """Candidate/baseline ratio with its CI and the gate's verdict against ``1 ± margin``."""

    ratio: Estimate
    margin: float
    verdict: Verdict
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TrialPlan:
    """How many trials per variant a Mann-Whitney comparison needs (None: more than the cap)."""

    trials_per_variant: int | None
    cv: float
    effect: float
    alpha: float
    power: float
    warnings: tuple[str, ...]


# --------------------------------------------------------------------------------------------
# argument checks (invalid arguments are errors; missing data is not)


def _check_confidence(confidence: float) -> None:
    if not (0.0 < confidence < 1.0) or math.isnan(confidence):
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")


def _check_alpha(alpha: float) -> None:
    if not (0.0 < alpha < 1.0) or math.isnan(alpha):
        raise ValueError(f"alpha must be strictly between 0 and 1, got {alpha!r}")


def _as_1d_float(values: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    return arr


def _drop_nan(values: np.ndarray, name: str) -> tuple[np.ndarray, tuple[str, ...]]:
    arr = _as_1d_float(values, name)
    nan = np.isnan(arr)
    n_nan = int(nan.sum())
    if n_nan == 0:
        return arr, ()
    return arr[~nan], (f"dropped {n_nan} NaN value{'s' if n_nan != 1 else ''} from {name}",)


def _drop_nonfinite(values: np.ndarray, name: str) -> tuple[np.ndarray, tuple[str, ...]]:
    arr = _as_1d_float(values, name)
    bad = ~np.isfinite(arr)
    n_bad = int(bad.sum())
    if n_bad == 0:
        return arr, ()
    return arr[~bad], (
        f"dropped {n_bad} non-finite value{'s' if n_bad != 1 else ''} from {name}",
    )


def percentile_label(percentile: float) -> str:
    """``99 -> "p99"``, ``99.9 -> "p99.9"``, ``50.0 -> "p50"``."""
    return f"p{percentile:g}"


# --------------------------------------------------------------------------------------------
# autocorrelation and effective sample size


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
    x = _as_1d_float(series, "series")
    x = x[np.isfinite(x)]
    n = x.size
    if n == 0:
        return 0.0
    return float(min(float(n), max(1.0, n / _integrated_autocorrelation_time(x))))


def lag1_autocorrelation(series: np.ndarray) -> float | None:
    """Lag-1 sample autocorrelation of a time-ordered series; None below 3 values or if constant."""
    x = _as_1d_float(series, "series")
    x = x[np.isfinite(x)]
    if x.size < 3:
        return None
    centered = x - x.mean()
    denominator = float(np.dot(centered, centered))
    if not denominator > 1e-12 * max(float(np.dot(x, x)), 1e-300):
        return None
    return float(np.dot(centered[:-1], centered[1:]) / denominator)


def _indicator_ess(x: np.ndarray, threshold: float) -> float:
    indicator = (x <= threshold).astype(float)
    return float(min(float(x.size), max(1.0, x.size / _integrated_autocorrelation_time(indicator))))


# --------------------------------------------------------------------------------------------
# percentiles


def order_statistic_interval(
    sorted_values: np.ndarray, q: float, n_effective: float, confidence: float = 0.95
) -> tuple[float, float] | None:
    """Distribution-free CI for the q-quantile from order statistics, using an effective size.

    With ``m = floor(n_effective)`` independent-equivalent samples, the exact binomial interval
    picks order statistics ``k_lo = Binom(m, q).ppf(a/2)`` and ``k_hi = Binom(m, q).isf(a/2) + 1``
    (1-based, as ``scipy.stats.quantile_test``); those ranks are mapped onto the n actual samples
    as ``k (n + 1) / (m + 1)``, rounded outwards. With ``n_effective == n`` this is exactly
    scipy's interval. None when the interval would need ranks beyond the sample.
    """
    _check_confidence(confidence)
    n = sorted_values.size
    m = math.floor(min(n_effective, float(n)))
    if n == 0 or m < 1:
        return None
    tail = (1.0 - confidence) / 2.0
    binomial = stats.binom(m, q)
    k_lo = float(binomial.ppf(tail))
    k_hi = float(binomial.isf(tail)) + 1.0
    scale = (n + 1) / (m + 1)
    rank_lo = math.floor(k_lo * scale + 1e-9)
    rank_hi = math.ceil(k_hi * scale - 1e-9)
    if rank_lo < 1 or rank_hi > n:
        return None
    return float(sorted_values[rank_lo - 1]), float(sorted_values[rank_hi - 1])


def _tail_reference_level(q: float, n: int) -> float:
    """The level whose indicator autocorrelation the tail at q may not undercut (see constant)."""
    side = min(q, 1.0 - q)
    if side * n >= MIN_EXCEEDANCES_FOR_TAIL_ACF:
        return q
    ref_side = min(0.5, MIN_EXCEEDANCES_FOR_TAIL_ACF / n) if n > 0 else 0.5
    return ref_side if q < 0.5 else 1.0 - ref_side


def _quantile_effective_size(x: np.ndarray, q: float, value: float) -> float:
    n_eff = _indicator_ess(x, value)
    ref = _tail_reference_level(q, x.size)
    if ref != q:
        n_eff = min(n_eff, _indicator_ess(x, float(np.quantile(x, ref))))
    return n_eff


def quantile_effective_size(series_time_ordered: np.ndarray, q: float, threshold: float) -> float:
    """Effective sample size of the indicator ``x_t <= threshold`` for the q-quantile (q in [0,1]).

    The effective size ``percentile_estimate`` uses (with ``threshold`` its point estimate),
    including the far-tail cap; NaNs are dropped. 0 for an empty series.
    """
    x, _ = _drop_nan(series_time_ordered, "series")
    if x.size == 0:
        return 0.0
    return _quantile_effective_size(x, q, threshold)


def percentile_estimate(
    series_time_ordered: np.ndarray,
    percentile: float,
    confidence: float = 0.95,
) -> Estimate:
    """A percentile of one run with a CI that accounts for autocorrelation between requests.

    Method ``order-statistic-ess``: the point estimate is ``np.quantile`` (linear interpolation);
    the CI is the exact binomial order-statistic interval (as ``scipy.stats.quantile_test``)
    computed with the effective sample size of the indicator series ``x_t <= estimate`` in time
    order (Geyer initial monotone sequence). That is the right effective size for a quantile:
    what matters is how clustered the requests beyond the percentile are, not the raw latency
    correlation. For far tails (fewer than ``MIN_EXCEEDANCES_FOR_TAIL_ACF`` requests beyond
    the percentile) the effective size is capped by the one at the nearest level that has that
    many, because a tail autocorrelation from a few requests is too noisy to trust.

    Tail rule: fewer than ``MIN_EFFECTIVE_TAIL_SAMPLES`` effective samples beyond the
    percentile gives ``value=None`` and the warning
    ``"insufficient samples for p99 (need >= N, have M)"`` with N and M in requests (N assumes
    the autocorrelation stays as measured). NaNs are dropped (with a warning). The method is
    deterministic.
    """
    if not (0.0 <= percentile <= 100.0) or math.isnan(percentile):
        raise ValueError(f"percentile must be within [0, 100], got {percentile!r}")
    _check_confidence(confidence)
    x, warnings = _drop_nan(series_time_ordered, "series")
    n = x.size
    q = percentile / 100.0
    label = percentile_label(percentile)
    method = "order-statistic-ess"
    side = min(q, 1.0 - q)

    def insufficient(n_eff: float, detail: str) -> Estimate:
        if side > 0.0:
            inflation = n / n_eff if n > 0 and n_eff > 0 else 1.0
            need = str(math.ceil(MIN_EFFECTIVE_TAIL_SAMPLES / side * inflation))
        else:
            need = "an unbounded number"
        message = f"insufficient samples for {label} (need >= {need}, have {n})"
        return Estimate(
            None, None, None, confidence, n, n_eff, method, (*warnings, f"{message}: {detail}")
        )

    if n == 0:
        return insufficient(0.0, "no samples")
    if side == 0.0:
        return insufficient(float(n), f"{label} is the sample extreme and has no upper bound")
    sorted_x = np.sort(x)
    value = float(np.quantile(sorted_x, q))
    n_eff = _quantile_effective_size(x, q, value)
    effective_tail = n_eff * side
    if effective_tail < MIN_EFFECTIVE_TAIL_SAMPLES:
        return insufficient(
            n_eff,
            f"{effective_tail:.1f} effective samples beyond {label}, "
            f"{MIN_EFFECTIVE_TAIL_SAMPLES:g} required; autocorrelation leaves "
            f"~{n_eff:.0f} effective of {n} requests",
        )
    interval = order_statistic_interval(sorted_x, q, n_eff, confidence)
    if interval is None:
        return insufficient(
            n_eff, f"no order-statistic interval at {confidence:.0%} with ~{n_eff:.0f} effective"
        )
    return Estimate(value, interval[0], interval[1], confidence, n, n_eff, method, warnings)


# --------------------------------------------------------------------------------------------
# means, rates, trials


def mean_estimate(series_time_ordered: np.ndarray, confidence: float = 0.95) -> Estimate:
    """Mean of a run with a t interval on the effective sample size (``method="t-ess"``).

    ``mean ± t(n_eff - 1) * sd / sqrt(n_eff)`` where ``n_eff`` comes from the autocorrelation of
    the series. Non-finite values are dropped with a warning; fewer than 2 samples (or 2
    effective) give ``value=None``.
    """
    _check_confidence(confidence)
    x, warnings = _drop_nonfinite(series_time_ordered, "series")
    n = x.size
    method = "t-ess"
    if n == 0:
        return Estimate(None, None, None, confidence, 0, 0.0, method,
                        (*warnings, "insufficient samples for the mean (need >= 2, have 0)"))
    value = float(x.mean())
    n_eff = effective_sample_size(x)
    if n < 2 or n_eff < 2.0:
        return Estimate(None, None, None, confidence, n, n_eff, method,
                        (*warnings, f"insufficient samples for the mean (need >= 2 effective, "
                                    f"have {n_eff:.1f} of {n})"))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, n_eff - 1.0)) * float(
        x.std(ddof=1)) / math.sqrt(n_eff)
    return Estimate(value, value - half, value + half, confidence, n, n_eff, method, warnings)


def _clopper_pearson(successes: float, trials: float, confidence: float) -> tuple[float, float]:
    tail = (1.0 - confidence) / 2.0
    low = 0.0 if successes <= 0 else float(special.betaincinv(successes, trials - successes + 1,
                                                                 tail))
    high = 1.0 if successes >= trials else float(
        special.betaincinv(successes + 1, trials - successes, 1.0 - tail))
    return low, high


def clopper_pearson_interval(
    successes: float, trials: float, confidence: float = 0.95
) -> tuple[float, float]:
    """Clopper-Pearson interval for a proportion; non-integer (effective) counts are allowed."""
    _check_confidence(confidence)
    if not (0.0 <= successes <= trials) or trials <= 0.0:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes} of "
                         f"{trials}")
    return _clopper_pearson(float(successes), float(trials), confidence)


def rate_estimate(successes: int, trials: int, confidence: float = 0.95) -> Estimate:
    """Binomial proportion with the Clopper-Pearson (exact) interval, e.g. an error rate.

    Assumes independent trials; ``trials == 0`` gives ``value=None`` with a warning.
    """
    _check_confidence(confidence)
    if trials < 0 or successes < 0 or successes > trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    method = "clopper-pearson"
    if trials == 0:
        return Estimate(None, None, None, confidence, 0, 0.0, method,
                        ("insufficient samples for a rate (need >= 1, have 0)",))
    low, high = _clopper_pearson(float(successes), float(trials), confidence)
    return Estimate(successes / trials, low, high, confidence, trials, float(trials), method)


def across_trials_estimate(per_trial_values: np.ndarray, confidence: float = 0.95) -> Estimate:
    """Mean over k trials with a t interval on the trial values (``method="t-across-trials"``).

    Trials are independent (fresh server instances), so no autocorrelation correction applies.
    k = 1 gives the value with no interval and a warning; k = 0 gives ``value=None``.
    """
    _check_confidence(confidence)
    x, warnings = _drop_nonfinite(per_trial_values, "per_trial_values")
    k = x.size
    method = "t-across-trials"
    if k == 0:
        return Estimate(None, None, None, confidence, 0, 0.0, method,
                        (*warnings, "insufficient trials (need >= 1, have 0)"))
    value = float(x.mean())
    if k == 1:
        return Estimate(value, None, None, confidence, 1, 1.0, method,
                        (*warnings, "a single trial has no confidence interval "
                                    "(need >= 2 trials, have 1)"))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, k - 1)) * float(x.std(ddof=1)) / math.sqrt(k)
    return Estimate(value, value - half, value + half, confidence, k, float(k), method, warnings)


def goodput_estimate(
    ok_and_met: np.ndarray,
    send_times_s: np.ndarray,
    window_s: float,
    confidence: float = 0.95,
) -> Estimate:
    """Requests per second that succeeded and met every latency SLO, with a CI.

    ``value = count(ok_and_met) / window_s``. The interval is Clopper-Pearson on the fraction
    that met the SLOs, with effective counts from the autocorrelation of the met/not-met series
    ordered by send time (SLO misses cluster), scaled by ``n / window_s``
    (``method="clopper-pearson-ess"``). It is conditional on the number of requests sent: the
    variation of the offered load itself is not part of the interval.
    """
    _check_confidence(confidence)
    if not (window_s > 0.0) or math.isinf(window_s):
        raise ValueError(f"window_s must be a positive finite number of seconds, got {window_s!r}")
    met = np.asarray(ok_and_met, dtype=bool)
    times = _as_1d_float(send_times_s, "send_times_s")
    if met.ndim != 1 or met.shape != times.shape:
        raise ValueError(
            f"ok_and_met and send_times_s must be 1-D of equal length, got {met.shape} and "
            f"{times.shape}")
    method = "clopper-pearson-ess"
    n = met.size
    if n == 0:
        return Estimate(None, None, None, confidence, 0, 0.0, method,
                        ("insufficient samples for goodput (need >= 1 request, have 0)",))
    warnings: tuple[str, ...] = ()
    order = np.argsort(times, kind="stable")
    indicator = met[order].astype(float)
    span_s = float(np.nanmax(times) - np.nanmin(times)) if np.isfinite(times).any() else 0.0
    if span_s > window_s * (1.0 + 1e-9):
        warnings += (f"send times span {span_s:.3g} s, longer than the {window_s:.3g} s window",)
    n_eff = effective_sample_size(indicator)
    fraction = float(indicator.mean())
    low, high = _clopper_pearson(fraction * n_eff, n_eff, confidence)
    scale = n / window_s
    return Estimate(fraction * scale, low * scale, high * scale, confidence, n, n_eff, method,
                    warnings)


# --------------------------------------------------------------------------------------------
# Mann-Whitney, Hodges-Lehmann, Holm


def min_p_value_mann_whitney(n_a: int, n_b: int) -> float:
    """Smallest two-sided exact Mann-Whitney p-value with these sample sizes: 2 / C(n_a+n_b, n_a).

    3 vs 3 trials: 0.1, so such a comparison can never be significant at 0.05; 4 vs 4: 0.029.
    """
    if n_a < 0 or n_b < 0:
        raise ValueError(f"sample sizes must be >= 0, got {n_a} and {n_b}")
    if n_a == 0 or n_b == 0:
        return 1.0
    return float(min(1.0, 2.0 / math.comb(n_a + n_b, n_a)))


@lru_cache(maxsize=256)
def _mann_whitney_null_cdf(n_a: int, n_b: int) -> tuple[float, ...]:
    """Exact null CDF of U (0..n_a*n_b) for continuous data, by the standard recurrence.

    ``P_{i,j}(u) = i/(i+j) P_{i-1,j}(u-j) + j/(i+j) P_{i,j-1}(u)`` in probabilities (only
    additions of non-negative numbers, so it is numerically stable).
    """
    previous_row: list[np.ndarray] = [np.ones(1) for _ in range(n_b + 1)]  # i = 0: U = 0
    for i in range(1, n_a + 1):
        row: list[np.ndarray] = [np.ones(1)]  # j = 0: U = 0
        for j in range(1, n_b + 1):
            pmf = np.zeros(i * j + 1)
            upper = previous_row[j]  # (i-1, j): shifted by j
            pmf[j: j + upper.size] += (i / (i + j)) * upper
            left = row[j - 1]  # (i, j-1)
            pmf[: left.size] += (j / (i + j)) * left
            row.append(pmf)
        previous_row = row
    cdf = np.minimum(np.cumsum(previous_row[n_b]), 1.0)
    return tuple(float(v) for v in cdf)


def _hodges_lehmann_rank(n_a: int, n_b: int, confidence: float) -> int:
    """Largest k with ``2 P(U <= k - 1) <= 1 - confidence`` (0: no interval exists).

    The CI for the shift is then ``[D_(k), D_(n_a n_b + 1 - k)]`` over the sorted pairwise
    differences (Moses/Lehmann), dual to the exact two-sided Mann-Whitney test.
    """
    tail = (1.0 - confidence) / 2.0
    if max(n_a, n_b) <= _EXACT_MW_MAX_PER_SIDE:
        cdf = np.asarray(_mann_whitney_null_cdf(n_a, n_b))
        return int(np.searchsorted(cdf, tail * (1.0 + 1e-12), side="right"))
    mu = n_a * n_b / 2.0
    sigma = math.sqrt(n_a * n_b * (n_a + n_b + 1) / 12.0)
    return max(0, math.floor(mu + 0.5 + float(stats.norm.ppf(tail)) * sigma))


def hodges_lehmann(
    a: np.ndarray, b: np.ndarray, confidence: float = 0.95, log_scale: bool = False
) -> Estimate:
    """Hodges-Lehmann shift ``b - a`` (median of all pairwise differences) with its exact CI.

    With ``log_scale=True`` the shift is computed on logarithms and returned as a ratio
    ``b / a`` (``method="hodges-lehmann-log-ratio"``); values must then be positive. The
    interval is distribution-free under a location-shift model and has no value when the sample
    sizes cannot reach the confidence (e.g. 3 vs 3 at 95%): value set, CI None, warning.
    """
    _check_confidence(confidence)
    xa = _as_1d_float(a, "a")
    xb = _as_1d_float(b, "b")
    method = "hodges-lehmann-log-ratio" if log_scale else "hodges-lehmann"
    n_a, n_b = xa.size, xb.size
    n = n_a + n_b
    if n_a == 0 or n_b == 0:
        return Estimate(None, None, None, confidence, n, float(n), method,
                        (f"insufficient trials for a shift (need >= 1 per side, have {n_a} vs "
                         f"{n_b})",))
    if log_scale:
        if (xa <= 0).any() or (xb <= 0).any():
            return Estimate(None, None, None, confidence, n, float(n), method,
                            ("a ratio needs positive values on both sides",))
        xa, xb = np.log(xa), np.log(xb)
    differences = np.sort(np.subtract.outer(xb, xa).ravel())
    center = float(np.median(differences))
    k = _hodges_lehmann_rank(n_a, n_b, confidence)
    warnings: tuple[str, ...] = ()
    low: float | None
    high: float | None
    if k < 1:
        low = high = None
        warnings = (f"{n_a} vs {n_b} trials are too few for a {confidence:.0%} interval "
                    f"(minimum possible p={min_p_value_mann_whitney(n_a, n_b):.2g})",)
    else:
        low, high = float(differences[k - 1]), float(differences[differences.size - k])
    if log_scale:
        center = math.exp(center)
        low = None if low is None else math.exp(low)
        high = None if high is None else math.exp(high)
    return Estimate(center, low, high, confidence, n, float(n), method, warnings)


def _mann_whitney_p(a: np.ndarray, b: np.ndarray, seed: int) -> tuple[float, str | None]:
    """Two-sided Mann-Whitney p: exact without ties, a seeded permutation test with ties."""
    pooled = np.concatenate([a, b])
    has_ties = np.unique(pooled).size < pooled.size
    if not has_ties:
        if max(a.size, b.size) <= _EXACT_MW_MAX_PER_SIDE:
            method: object = "exact"
        else:
            method = "asymptotic"
        note = None
    else:
        method = stats.PermutationMethod(n_resamples=9999, rng=np.random.default_rng(seed))
        note = "ties among per-trial values: p-value from a permutation test"
    result = stats.mannwhitneyu(b, a, alternative="two-sided", method=method)
    return float(result.pvalue), note


def _trials_phrase(n_a: int, n_b: int) -> str:
    return f"{n_a} trials per side" if n_a == n_b else f"{n_a} vs {n_b} trials"


def compare_trials(
    a: np.ndarray,
    b: np.ndarray,
    alpha: float = 0.05,
    confidence: float = 0.95,
    seed: int = 0,
) -> Comparison:
    """B versus A where each value is one trial's statistic (e.g. the p95 TTFT of a run).

    Two-sided Mann-Whitney U (exact without ties, seeded permutation test with ties), the
    Hodges-Lehmann shift ``b - a`` and the Hodges-Lehmann ratio on logarithms ``b / a``, both
    with their distribution-free CIs (dual to the exact test), and the medians of each side.
    ``p_adjusted`` equals ``p_value`` until ``with_holm`` adjusts a family. NaNs are dropped.
    """
    _check_alpha(alpha)
    _check_confidence(confidence)
    xa, warn_a = _drop_nan(a, "a")
    xb, warn_b = _drop_nan(b, "b")
    warnings: tuple[str, ...] = (*warn_a, *warn_b)
    n_a, n_b = xa.size, xb.size
    center_a = float(np.median(xa)) if n_a else None
    center_b = float(np.median(xb)) if n_b else None
    shift = hodges_lehmann(xa, xb, confidence)
    ratio = hodges_lehmann(xa, xb, confidence, log_scale=True)
    if n_a == 0 or n_b == 0:
        warnings += (f"nothing to compare ({n_a} vs {n_b} trials)",)
        return Comparison(n_a, n_b, center_a, center_b, None, None, shift, ratio, False, alpha,
                          warnings)
    p_value, note = _mann_whitney_p(xa, xb, seed)
    if note:
        warnings += (note,)
    min_p = min_p_value_mann_whitney(n_a, n_b)
    if min_p >= alpha:
        warnings += (f"{_trials_phrase(n_a, n_b)} can never reach p<{alpha:g} "
                     f"(minimum possible p={min_p:.2g})",)
    return Comparison(n_a, n_b, center_a, center_b, p_value, p_value, shift, ratio,
                      p_value < alpha, alpha, warnings)


def holm_adjust(p_values: Sequence[float | None]) -> tuple[float | None, ...]:
    """Holm step-down adjusted p-values; None entries stay None and do not count in the family."""
    indexed = [(p, i) for i, p in enumerate(p_values) if p is not None]
    for p, _ in indexed:
        if not (0.0 <= p <= 1.0):
            raise ValueError(f"p-values must lie in [0, 1], got {p!r}")
    m = len(indexed)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(indexed)):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return tuple(adjusted)


_HOLM_WARNING_PREFIX = "with Holm over "


def with_holm(comparisons: Sequence[Comparison]) -> tuple[Comparison, ...]:
    """Copies with ``p_adjusted``/``significant`` from Holm over the whole family.

    Adds a warning to comparisons whose trial counts cannot be significant after the
    correction at all (smallest possible adjusted p is ``m * min_p``).
    """
    adjusted = holm_adjust([c.p_value for c in comparisons])
    m = sum(1 for c in comparisons if c.p_value is not None)
    result = []
    for comparison, p_adj in zip(comparisons, adjusted, strict=True):
        warnings = tuple(w for w in comparison.warnings if not w.startswith(_HOLM_WARNING_PREFIX))
        if p_adj is not None and m > 1:
            best = min(1.0, m * min_p_value_mann_whitney(comparison.n_a, comparison.n_b))
            if best >= comparison.alpha:
                warnings += (f"{_HOLM_WARNING_PREFIX}{m} comparisons, "
                             f"{_trials_phrase(comparison.n_a, comparison.n_b)} can never reach "
                             f"p<{comparison.alpha:g} (minimum possible adjusted p={best:.2g})",)
        result.append(replace(comparison, p_adjusted=p_adj,
                              significant=p_adj is not None and p_adj < comparison.alpha,
                              warnings=warnings))
    return tuple(result)


# --------------------------------------------------------------------------------------------
# verdicts


_COMPARATORS = ("<", "<=", ">", ">=")


def slo_verdict(estimate: Estimate, comparator: str, threshold: float) -> Verdict:
    """PASS/FAIL/INCONCLUSIVE for ``metric <comparator> threshold`` from the CI bounds.

    ``"<"``: PASS if ``ci_high < threshold``, FAIL if ``ci_low >= threshold``; ``"<="``: PASS if
    ``ci_high <= threshold``, FAIL if ``ci_low > threshold``; ``">"`` and ``">="`` mirror them.
    Anything else (no value, no interval, interval straddling the threshold) is INCONCLUSIVE.
    """
    if comparator not in _COMPARATORS:
        raise ValueError(f"comparator must be one of {', '.join(_COMPARATORS)}, got {comparator!r}")
    if math.isnan(threshold):
        raise ValueError("threshold must not be NaN")
    low, high = estimate.ci_low, estimate.ci_high
    if estimate.value is None or low is None or high is None:
        return Verdict.INCONCLUSIVE
    if comparator == "<":
        passed, failed = high < threshold, low >= threshold
    elif comparator == "<=":
        passed, failed = high <= threshold, low > threshold
    elif comparator == ">":
        passed, failed = low > threshold, high <= threshold
    else:
        passed, failed = low >= threshold, high < threshold
    if passed:
        return Verdict.PASS
    if failed:
        return Verdict.FAIL
    return Verdict.INCONCLUSIVE


def _welch_log_ratio(candidate: np.ndarray, baseline: np.ndarray, confidence: float) -> Estimate:
    """Ratio of geometric means with a Welch t interval on the logarithms."""
    n = candidate.size + baseline.size
    log_c, log_b = np.log(candidate), np.log(baseline)
    difference = float(log_c.mean() - log_b.mean())
    var_c = float(log_c.var(ddof=1)) / log_c.size
    var_b = float(log_b.var(ddof=1)) / log_b.size
    se = math.sqrt(var_c + var_b)
    method = "welch-log-ratio"
    if se == 0.0:
        value = math.exp(difference)
        return Estimate(value, value, value, confidence, n, float(n), method,
                        ("no trial-to-trial variation on either side; interval is a point",))
    df = (var_c + var_b) ** 2 / (var_c**2 / (log_c.size - 1) + var_b**2 / (log_b.size - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, df)) * se
    return Estimate(math.exp(difference), math.exp(difference - half), math.exp(difference + half),
                    confidence, n, float(n), method)


def non_inferiority(
    candidate_trials: np.ndarray,
    baseline_trials: np.ndarray,
    margin: float,
    lower_is_better: bool = True,
    confidence: float = 0.95,
) -> NonInferiority:
    """Release gate: is the candidate no worse than the baseline by more than ``margin``?

    The ratio candidate/baseline is the ratio of geometric means of the per-trial values, with a
    Welch t interval on their logarithms (trial-to-trial variation of latency percentiles is
    multiplicative and roughly log-normal). Needs >= 2 trials per side: with one trial per side
    the restart-to-restart variation (41% in median TTFT on an H200) is unobservable, and a
    bootstrap over requests would ignore it, so the verdict is INCONCLUSIVE with a warning.

    ``lower_is_better`` (latency): PASS when the upper bound < 1 + margin, FAIL when the lower
    bound > 1 + margin. Otherwise (throughput): PASS when the lower bound > 1 - margin, FAIL when
    the upper bound < 1 - margin. Everything else is INCONCLUSIVE. With a two-sided 95% interval
    the chance of a false PASS at a true ratio of exactly the margin is 2.5%.
    """
    _check_confidence(confidence)
    if not (0.0 <= margin < 1.0) or math.isnan(margin):
        raise ValueError(f"margin must be within [0, 1), got {margin!r}")
    xc, warn_c = _drop_nan(candidate_trials, "candidate_trials")
    xb, warn_b = _drop_nan(baseline_trials, "baseline_trials")
    warnings: tuple[str, ...] = (*warn_c, *warn_b)
    n_c, n_b = xc.size, xb.size
    n = n_c + n_b
    method = "welch-log-ratio"
    if (xc <= 0).any() or (xb <= 0).any():
        ratio = Estimate(None, None, None, confidence, n, float(n), method,
                         ("a ratio needs positive values on both sides",))
    elif n_c < 2 or n_b < 2:
        value = float(np.exp(np.log(xc).mean() - np.log(xb).mean())) if n_c and n_b else None
        ratio = Estimate(value, None, None, confidence, n, float(n), method,
                         (f"non-inferiority needs >= 2 trials per side (have {n_c} candidate, "
                          f"{n_b} baseline): one trial cannot separate a change from "
                          "restart-to-restart variation",))
    else:
        ratio = _welch_log_ratio(xc, xb, confidence)
    bound = 1.0 + margin if lower_is_better else 1.0 - margin
    verdict = Verdict.INCONCLUSIVE
    if ratio.ci_low is not None and ratio.ci_high is not None:
        if lower_is_better:
            if ratio.ci_high < bound:
                verdict = Verdict.PASS
            elif ratio.ci_low > bound:
                verdict = Verdict.FAIL
        elif ratio.ci_low > bound:
            verdict = Verdict.PASS
        elif ratio.ci_high < bound:
            verdict = Verdict.FAIL
    return NonInferiority(ratio, margin, verdict, (*warnings, *ratio.warnings))


# --------------------------------------------------------------------------------------------
# planning


def _min_trials_for_alpha(alpha: float) -> int:
    n = 1
    while min_p_value_mann_whitney(n, n) >= alpha:
        n += 1
    return n


def _mann_whitney_power(n: int, sigma_log: float, delta_log: float, alpha: float) -> float:
    """Approximate power of two-sided MW with n per side: a t-test with ``n * ARE`` per side."""
    n_t = n * MW_PLANNING_EFFICIENCY
    df = 2.0 * n_t - 2.0
    if df <= 0:
        return 0.0
    noncentrality = delta_log / sigma_log * math.sqrt(n_t / 2.0)
    critical = float(stats.t.ppf(1.0 - alpha / 2.0, df))
    upper = float(stats.nct.sf(critical, df, noncentrality))
    lower = float(stats.nct.cdf(-critical, df, noncentrality))  # NaN far out in the tail
    return upper + (lower if math.isfinite(lower) else 0.0)


def trials_needed(
    trial_to_trial_cv: float,
    relative_effect: float,
    alpha: float = 0.05,
    power: float = 0.8,
) -> TrialPlan:
    """Trials per variant for Mann-Whitney to detect a relative change with the given power.

    ``trial_to_trial_cv`` is the coefficient of variation (sd/mean) of the per-trial statistic
    (from a pilot), ``relative_effect`` the change to detect (0.1 = 10%). Works on the log
    scale (sd ``sqrt(log(1 + cv^2))``, effect ``log(1 + effect)``), takes the power of a
    two-sample t-test (noncentral t) with ``n * MW_PLANNING_EFFICIENCY`` t-test-equivalent
    trials per side (the worst-case Mann-Whitney efficiency 0.864 rather than the normal-theory
    3/pi, so the plan holds whatever the shape of the trial distribution), never fewer than the
    minimum at which the exact test can reach ``alpha`` at all (4 per side at 0.05). Above
    ``MAX_TRIALS_PER_VARIANT`` it returns None with a warning.
    """
    _check_alpha(alpha)
    if not (0.0 < power < 1.0) or math.isnan(power):
        raise ValueError(f"power must be strictly between 0 and 1, got {power!r}")
    if not (trial_to_trial_cv >= 0.0) or math.isinf(trial_to_trial_cv):
        raise ValueError(f"trial_to_trial_cv must be >= 0, got {trial_to_trial_cv!r}")
    if not (relative_effect > -1.0) or math.isinf(relative_effect):
        raise ValueError(f"relative_effect must be > -1, got {relative_effect!r}")
    warnings: tuple[str, ...] = ()
    n_min = _min_trials_for_alpha(alpha)
    if n_min > MAX_TRIALS_PER_VARIANT:
        return TrialPlan(None, trial_to_trial_cv, relative_effect, alpha, power,
                         (f"alpha={alpha:g} needs more than {MAX_TRIALS_PER_VARIANT} trials per "
                          "variant",))
    delta_log = abs(math.log1p(relative_effect))
    sigma_log = math.sqrt(math.log1p(trial_to_trial_cv**2))
    if delta_log == 0.0:
        return TrialPlan(None, trial_to_trial_cv, relative_effect, alpha, power,
                         ("a relative effect of 0 cannot be detected with any number of trials",))
    if sigma_log == 0.0:
        warnings += ("trial-to-trial CV of 0: the minimum trial count suffices; check the pilot",)
        return TrialPlan(n_min, trial_to_trial_cv, relative_effect, alpha, power, warnings)
    for n in range(n_min, MAX_TRIALS_PER_VARIANT + 1):
        if _mann_whitney_power(n, sigma_log, delta_log, alpha) >= power:
            return TrialPlan(n, trial_to_trial_cv, relative_effect, alpha, power, warnings)
    return TrialPlan(None, trial_to_trial_cv, relative_effect, alpha, power,
                     (f"detecting a {relative_effect:.0%} change with trial-to-trial CV "
                      f"{trial_to_trial_cv:.0%} needs more than {MAX_TRIALS_PER_VARIANT} trials "
                      "per variant; reduce the trial-to-trial variation or target a larger "
                      "effect",))
