"""Statistics of one run: percentile CIs under autocorrelation, means, rates, SLO verdicts.

Pure functions over 1-D numpy arrays. Every result is a small frozen dataclass carrying
``warnings``; "not enough data" is a value (``value=None`` plus a warning), never 0 and never an
exception. Exceptions are raised only for invalid arguments (a percentile of 120, a confidence of
0, an unknown comparator): those are programming or configuration errors. Nothing here prints,
plots or touches files; anything random takes an explicit ``seed``.

Across trials (Mann-Whitney, Hodges-Lehmann, Holm, non-inferiority, planning):
``trial_statistics``; effective sample sizes: ``effective_size``. Methods, thresholds and the
measured calibration are documented in ``docs/statistics.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
from scipy import special, stats

from vllm_slo.stats.effective_size import (
    capped_quantile_effective_size,
    effective_sample_size,
)
from vllm_slo.stats.inputs import (
    as_1d_float,
    check_confidence,
    drop_nan,
    drop_nonfinite,
)

#: A percentile gets a value only when at least this many *effective* (independent-equivalent)
#: samples lie beyond it: ``n_eff * min(q, 1 - q) >= 5``. Below that the order-statistic interval
#: rests on a handful of clustered tail requests (and at 95% confidence it stops existing at
#: about 3.7), so the answer is "insufficient samples", never a number.
MIN_EFFECTIVE_TAIL_SAMPLES: float = 5.0

#: When the tail rule leaves a percentile's order-statistic interval open, the interval comes
#: from sectioning instead (``sectioning_interval``): the series is cut into this many
#: consecutive time blocks. Three, because the batch quantiles of fewer, longer blocks are the
#: least biased; with more blocks the calibration's coverage fell below 93% (docs/statistics.md).
SECTIONS: int = 3
#: Sectioning needs at least this many samples beyond the percentile in each block (expected
#: count ``n // SECTIONS * min(q, 1 - q)``): a p99 needs 900 requests, a p99.9 9,000. Below
#: that a block's quantile is its maximum or near it and the interval stays open.
MIN_SECTION_TAIL_SAMPLES: float = 3.0
ORDER_STATISTIC_METHOD = "order-statistic-ess"
SECTIONING_METHOD = "sectioning-log"

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


def percentile_label(percentile: float) -> str:
    """``99 -> "p99"``, ``99.9 -> "p99.9"``, ``50.0 -> "p50"``."""
    return f"p{percentile:g}"


# --------------------------------------------------------------------------------------------
# percentiles


def _order_statistic_ranks(n: int, q: float, n_effective: float, confidence: float
                           ) -> tuple[int | None, int | None]:
    """The 1-based ranks of ``order_statistic_bounds`` (None: beyond the sample, open)."""
    m = math.floor(min(n_effective, float(n)))
    if n == 0 or m < 1:
        return None, None
    tail = (1.0 - confidence) / 2.0
    binomial = stats.binom(m, q)
    k_lo = float(binomial.ppf(tail))
    k_hi = float(binomial.isf(tail)) + 1.0
    scale = (n + 1) / (m + 1)
    rank_lo = math.floor(k_lo * scale + 1e-9)
    rank_hi = math.ceil(k_hi * scale - 1e-9)
    return (rank_lo if rank_lo >= 1 else None), (rank_hi if rank_hi <= n else None)


def order_statistic_bounds(
    sorted_values: np.ndarray, q: float, n_effective: float, confidence: float = 0.95
) -> tuple[float | None, float | None]:
    """Distribution-free confidence bounds for the q-quantile from order statistics, using an
    effective size; each bound is None when it would need a rank beyond the sample (open).

    With ``m = floor(n_effective)`` independent-equivalent samples, the exact binomial interval
    picks order statistics ``k_lo = Binom(m, q).ppf(a/2)`` and ``k_hi = Binom(m, q).isf(a/2) + 1``
    (1-based, as ``scipy.stats.quantile_test``); those ranks are mapped onto the n actual samples
    as ``k (n + 1) / (m + 1)``, rounded outwards. With ``n_effective == n`` this is exactly
    scipy's interval.
    """
    check_confidence(confidence)
    rank_lo, rank_hi = _order_statistic_ranks(sorted_values.size, q, n_effective, confidence)
    low = None if rank_lo is None else float(sorted_values[rank_lo - 1])
    high = None if rank_hi is None else float(sorted_values[rank_hi - 1])
    return low, high


def order_statistic_interval(
    sorted_values: np.ndarray, q: float, n_effective: float, confidence: float = 0.95
) -> tuple[float, float] | None:
    """The two-sided interval of ``order_statistic_bounds``; None when either bound is open."""
    low, high = order_statistic_bounds(sorted_values, q, n_effective, confidence)
    return None if low is None or high is None else (low, high)


def quantile_effective_size(series_time_ordered: np.ndarray, q: float, threshold: float) -> float:
    """Effective sample size of the indicator ``x_t <= threshold`` for the q-quantile (q in [0,1]).

    The effective size ``percentile_estimate`` uses (with ``threshold`` its point estimate),
    including the far-tail cap; NaNs are dropped. 0 for an empty series.
    """
    x, _ = drop_nan(series_time_ordered, "series")
    if x.size == 0:
        return 0.0
    return capped_quantile_effective_size(x, q, threshold)


def _check_percentile(percentile: float) -> None:
    if not (0.0 <= percentile <= 100.0) or math.isnan(percentile):
        raise ValueError(f"percentile must be within [0, 100], got {percentile!r}")


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

    The observed percentile is always the value when there is data (``value=None`` only for an
    empty series). Tail rule: with fewer than ``MIN_EFFECTIVE_TAIL_SAMPLES`` effective samples
    beyond the percentile, the bound on the tail's side is open (None: an upper bound for
    p > 50, a lower one for p < 50, both for p50) and the warning says
    ``"insufficient samples for p99 (need >= N, have M)"`` with N and M in requests (N assumes
    the autocorrelation stays as measured); a bound whose order statistic lies beyond the sample
    is open too. NaNs are dropped (with a warning). The method is deterministic.

    Fallback, method ``sectioning-log``: where a bound is open, the interval comes from
    `sectioning_interval` (``SECTIONS`` consecutive time blocks, a t interval on the logarithms
    of their percentiles around the whole run's) when every block holds at least
    ``MIN_SECTION_TAIL_SAMPLES`` samples beyond the percentile and the quantiles are positive;
    a note replaces the "insufficient samples" warning. So a clear case decides (a TTFT p99 of
    54 ms against 5 s) while a run with too few requests (a p99 from < 900) stays open.
    """
    return percentile_estimates(series_time_ordered, (percentile,), confidence)[percentile]


def percentile_estimates(
    series_time_ordered: np.ndarray,
    percentiles: Sequence[float],
    confidence: float = 0.95,
) -> dict[float, Estimate]:
    """``percentile_estimate`` of each percentile (the same Estimates), sharing the work: the
    series is partitioned twice for all of them (values, then bounds), never sorted, so
    250 M ITL gaps cost seconds, not minutes."""
    for percentile in percentiles:
        _check_percentile(percentile)
    check_confidence(confidence)
    x, warnings = drop_nan(series_time_ordered, "series")
    n = x.size
    method = ORDER_STATISTIC_METHOD
    if n == 0:
        return {p: Estimate(None, None, None, confidence, 0, 0.0, method, (
            *warnings, f"insufficient samples for {percentile_label(p)} (need >= "
                       f"{_need_text(p / 100.0, 0, 0.0)}, have 0): no samples"))
                for p in percentiles}
    quantiles = np.quantile(x, [p / 100.0 for p in percentiles])
    pending: dict[float, tuple[float, float, int | None, int | None]] = {}
    out: dict[float, Estimate] = {}
    for percentile, quantile in zip(percentiles, quantiles, strict=True):
        q = percentile / 100.0
        value = float(quantile)
        if min(q, 1.0 - q) == 0.0:
            label = percentile_label(percentile)
            out[percentile] = Estimate(value, None, None, confidence, n, float(n), method, (
                *warnings, f"insufficient samples for {label} (need >= an unbounded number, "
                           f"have {n}): {label} is the sample extreme and has no confidence "
                           "bound"))
            continue
        n_eff = capped_quantile_effective_size(x, q, value)
        pending[percentile] = (value, n_eff, *_order_statistic_ranks(n, q, n_eff, confidence))
    ranks = sorted({r for _, _, *bounds in pending.values() for r in bounds if r is not None})
    ordered = np.partition(x, [r - 1 for r in ranks]) if ranks else x
    for percentile, (value, n_eff, rank_lo, rank_hi) in pending.items():
        low = None if rank_lo is None else float(ordered[rank_lo - 1])
        high = None if rank_hi is None else float(ordered[rank_hi - 1])
        estimate = _tail_rule(percentile, value, low, high, n, n_eff, confidence, warnings)
        if estimate.ci_low is None or estimate.ci_high is None:
            estimate = _sectioned(estimate, x, percentile)
        out[percentile] = estimate
    return {p: out[p] for p in percentiles}


def sectioning_interval(series_time_ordered: np.ndarray, q: float, confidence: float = 0.95,
                        center: float | None = None) -> tuple[float, float] | None:
    """A confidence interval for the q-quantile (q in (0, 1)) of a positive, autocorrelated
    series by sectioning (Asmussen & Glynn 2007, IV.5): the series is cut into ``SECTIONS``
    consecutive time blocks (``np.array_split``), the q-quantile of each block is taken, and
    the interval is ``exp(log c ± t(B - 1) * s / sqrt(B))`` with ``c`` the whole series'
    quantile (`center`, computed when None) and ``s^2 = sum((log c_b - log c)^2) / (B - 1)``.

    Blocks far longer than the correlation time are nearly independent, so the spread of
    their quantiles measures the quantile's uncertainty whatever the dependence inside them;
    centering on the whole-run quantile keeps the short blocks' bias out of the center and in
    the spread (conservative), and logarithms make the right-skewed spread of latency
    quantiles symmetric. Unlike order statistics it can bound a percentile beyond the largest
    sample; it assumes the block quantiles are roughly log-normal (the calibration in
    docs/statistics.md measures the coverage). None (no interval) when a block holds fewer than
    ``MIN_SECTION_TAIL_SAMPLES`` samples beyond the quantile or a quantile is not positive.
    NaNs must have been dropped."""
    check_confidence(confidence)
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must be within (0, 1), got {q!r}")
    x = np.asarray(series_time_ordered, dtype=np.float64)
    if x.size // SECTIONS * min(q, 1.0 - q) < MIN_SECTION_TAIL_SAMPLES:
        return None
    whole = float(np.quantile(x, q)) if center is None else center
    blocks = np.array([np.quantile(block, q) for block in np.array_split(x, SECTIONS)])
    if not (whole > 0.0 and bool((blocks > 0.0).all())):
        return None
    log_center = math.log(whole)
    spread = math.sqrt(float(np.sum((np.log(blocks) - log_center) ** 2)) / (SECTIONS - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, SECTIONS - 1)) * spread / math.sqrt(
        SECTIONS)
    return math.exp(log_center - half), math.exp(log_center + half)


def _sectioned(estimate: Estimate, x: np.ndarray, percentile: float) -> Estimate:
    """`estimate` (order-statistic interval open) with the `sectioning_interval` instead, when
    the series allows one; else unchanged."""
    assert estimate.value is not None  # only called with a value
    q = percentile / 100.0
    interval = sectioning_interval(x, q, estimate.confidence, estimate.value)
    if interval is None:
        return estimate
    label = percentile_label(percentile)
    effective_tail = estimate.n_effective * min(q, 1.0 - q)
    note = (f"{label}: interval from sectioning ({SECTIONS} consecutive time blocks, t interval "
            f"on the logarithms of their {label}), not order statistics: "
            f"{effective_tail:.1f} effective samples beyond {label} (autocorrelation leaves "
            f"~{estimate.n_effective:.0f} effective of {estimate.n} samples) leave the "
            "order-statistic bound open")
    kept = tuple(w for w in estimate.warnings if not w.startswith(
        (f"insufficient samples for {label} ", f"{label}: no order-statistic bound")))
    return Estimate(estimate.value, interval[0], interval[1], estimate.confidence, estimate.n,
                    estimate.n_effective, SECTIONING_METHOD, (*kept, note))


def _need_text(q: float, n: int, n_eff: float) -> str:
    side = min(q, 1.0 - q)
    if side == 0.0:
        return "an unbounded number"
    inflation = n / n_eff if n > 0 and n_eff > 0 else 1.0
    return str(math.ceil(MIN_EFFECTIVE_TAIL_SAMPLES / side * inflation))


def _tail_rule(percentile: float, value: float, low: float | None, high: float | None, n: int,
               n_eff: float, confidence: float, warnings: tuple[str, ...]) -> Estimate:
    """The Estimate of a percentile whose bounds are known: the tail side opens with too few
    effective samples beyond it (see `percentile_estimate`)."""
    q = percentile / 100.0
    label = percentile_label(percentile)
    effective_tail = n_eff * min(q, 1.0 - q)
    if effective_tail < MIN_EFFECTIVE_TAIL_SAMPLES:
        if q >= 0.5:
            high = None
        if q <= 0.5:
            low = None
        warnings = (*warnings, (
            f"insufficient samples for {label} (need >= {_need_text(q, n, n_eff)}, have {n}): "
            f"{effective_tail:.1f} effective samples beyond {label}, "
            f"{MIN_EFFECTIVE_TAIL_SAMPLES:g} required (autocorrelation leaves ~{n_eff:.0f} "
            f"effective of {n} requests); the observed value is shown, its interval is open"))
    elif low is None or high is None:
        warnings = (*warnings, f"{label}: no order-statistic bound at {confidence:.0%} on "
                               f"one side with ~{n_eff:.0f} effective samples (open)")
    return Estimate(value, low, high, confidence, n, n_eff, ORDER_STATISTIC_METHOD, warnings)


def time_ordered(values: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``values`` sorted by ``times`` (stable: equal times keep their input order; NaN times go
    last). Both must be 1-D of equal length.

    The percentile and mean intervals assume their input is in time order; this puts a series
    that was collected in another order (ITL gaps pooled request by request) into it.
    """
    x = as_1d_float(values, "values")
    t = as_1d_float(times, "times")
    if x.shape != t.shape:
        raise ValueError(f"values and times must have equal length, got {x.size} and {t.size}")
    return x[np.argsort(t, kind="stable")]


def itl_percentile_estimate(
    gap_s: np.ndarray,
    gap_arrival_s: np.ndarray,
    percentile: float,
    confidence: float = 0.95,
) -> Estimate:
    """An inter-token-latency percentile with a CI, from gaps ordered by arrival time.

    ``gap_arrival_s[i]`` is the wall-clock arrival of the later chunk of gap i (any clock shared
    by all streams, e.g. intended send + chunk offset). A decode step delivers one token to every
    running stream at once, so a stall (a prefill, a preemption) lengthens the gaps of all
    concurrent streams at the same moment. Pooled request by request, those copies of one stall
    land far apart and the autocorrelation of the series misses them: the effective size comes
    out near the number of gaps and the interval far too narrow (simulated 95% intervals
    covered the true ITL p50/p99 in 17-45% of runs). In arrival order they are neighbours and
    ``percentile_estimate`` counts them as the one event they are (95.7-97.7% covered,
    docs/statistics.md). Method ``order-statistic-ess`` on ``time_ordered(gap_s,
    gap_arrival_s)``; the point value equals that of any other order. NaN gaps are dropped with
    a warning.
    """
    return percentile_estimate(time_ordered(gap_s, gap_arrival_s), percentile, confidence)


# --------------------------------------------------------------------------------------------
# means, rates, trials


def mean_estimate(series_time_ordered: np.ndarray, confidence: float = 0.95) -> Estimate:
    """Mean of a run with a t interval on the effective sample size (``method="t-ess"``).

    ``mean ± t(n_eff - 1) * sd / sqrt(n_eff)`` where ``n_eff`` comes from the autocorrelation of
    the series. Non-finite values are dropped with a warning; fewer than 2 samples (or 2
    effective) give ``value=None``.
    """
    check_confidence(confidence)
    x, warnings = drop_nonfinite(series_time_ordered, "series")
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
    low = value - half
    if low < 0.0 <= float(x.min()):  # the mean of values >= 0 cannot be negative: the interval
        low = 0.0  # is cut at 0 (coverage unchanged); so erratic a series deserves a word
        warnings = (*warnings, "the interval of the mean reached below 0 and was cut there: "
                               "the series is too erratic for a symmetric interval")
    return Estimate(value, low, value + half, confidence, n, n_eff, method, warnings)


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
    check_confidence(confidence)
    if not (0.0 <= successes <= trials) or trials <= 0.0:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes} of "
                         f"{trials}")
    return _clopper_pearson(float(successes), float(trials), confidence)


def rate_estimate(successes: int, trials: int, confidence: float = 0.95) -> Estimate:
    """Binomial proportion with the Clopper-Pearson (exact) interval, e.g. an error rate.

    Assumes independent trials; ``trials == 0`` gives ``value=None`` with a warning.
    """
    check_confidence(confidence)
    if trials < 0 or successes < 0 or successes > trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    method = "clopper-pearson"
    if trials == 0:
        return Estimate(None, None, None, confidence, 0, 0.0, method,
                        ("insufficient samples for a rate (need >= 1, have 0)",))
    low, high = _clopper_pearson(float(successes), float(trials), confidence)
    return Estimate(successes / trials, low, high, confidence, trials, float(trials), method)


def across_trials_estimate(per_trial_values: np.ndarray, confidence: float = 0.95) -> Estimate:
    """Center of k trial values with a t interval that respects the sign of the values.

    Trials are independent (fresh server instances), so no autocorrelation correction applies.

    * All values > 0 (latencies, throughputs, ratios): ``method="t-log-across-trials"``, a t
      interval on the logarithms, exponentiated: value ``exp(mean(log x))`` (the geometric
      mean), interval ``exp(mean(log x) ± t(k - 1) sd(log x) / sqrt(k))``. The interval stays
      positive whatever k (a raw-scale t interval with 2 trials easily reaches below 0) and
      matches the multiplicative trial-to-trial variation of latency statistics (the geometric
      mean is the center the non-inferiority gate compares).
    * Any value <= 0 (an error rate of 0): ``method="t-across-trials"``, the arithmetic mean
      with a t interval on the raw values.

    Non-finite values are dropped with a warning. k = 1 gives the value with no interval and a
    warning; k = 0 gives ``value=None``. k >= 2 identical values give the value with no
    interval and a warning: zero spread between trials (e.g. an open loop's throughput, set by
    the offered load) is not evidence of zero uncertainty, and a point interval would make
    every verdict on it decisive.
    """
    check_confidence(confidence)
    x, warnings = drop_nonfinite(per_trial_values, "per_trial_values")
    k = x.size
    log_scale = k > 0 and bool((x > 0.0).all())
    method = "t-log-across-trials" if log_scale else "t-across-trials"
    if k == 0:
        return Estimate(None, None, None, confidence, 0, 0.0, method,
                        (*warnings, "insufficient trials (need >= 1, have 0)"))
    scale = np.log(x) if log_scale else x
    center = float(scale.mean())
    value = math.exp(center) if log_scale else center
    if k == 1:
        return Estimate(float(x[0]), None, None, confidence, 1, 1.0, method,
                        (*warnings, "a single trial has no confidence interval "
                                    "(need >= 2 trials, have 1)"))
    spread = float(scale.std(ddof=1))
    if spread == 0.0:
        return Estimate(value, None, None, confidence, k, float(k), method,
                        (*warnings, f"all {k} trials gave the same value: no between-trial "
                                    "spread to build an interval from"))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, k - 1)) * spread / math.sqrt(k)
    if log_scale:
        low, high = math.exp(center - half), math.exp(center + half)
    else:
        low, high = center - half, center + half
    return Estimate(value, low, high, confidence, k, float(k), method, warnings)


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
    check_confidence(confidence)
    if not (window_s > 0.0) or math.isinf(window_s):
        raise ValueError(f"window_s must be a positive finite number of seconds, got {window_s!r}")
    met = np.asarray(ok_and_met, dtype=bool)
    times = as_1d_float(send_times_s, "send_times_s")
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
