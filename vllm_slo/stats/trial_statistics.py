"""Statistics across trials: the trial (one full run on a fresh server) is the unit of
comparison. Welch t on per-trial logarithms (ratio of geometric means) or Mann-Whitney U with
Hodges-Lehmann effects, Holm's correction, and the non-inferiority gate. Pure functions over
1-D arrays returning small frozen results with warnings (docs/statistics.md); planning how many
trials: `trial_planning`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import stats

from vllm_slo.stats.inputs import as_1d_float, check_alpha, check_confidence, drop_nan
from vllm_slo.stats.statistics import Estimate, Verdict

#: Exact Mann-Whitney null distributions are computed up to this many trials per side; beyond,
#: the normal approximation is used (trial counts that large are rare and it is then accurate).
_EXACT_MW_MAX_PER_SIDE: int = 100

#: The per-trial tests: Welch t on logarithms, or Mann-Whitney U (scenario ``compare.test``).
TrialTest = Literal["welch-log", "mann-whitney"]
TRIAL_TESTS: tuple[TrialTest, ...] = ("welch-log", "mann-whitney")

@dataclass(frozen=True, slots=True)
class Comparison:
    """B versus A on per-trial statistics (the unit of comparison is the trial).

    ``shift`` and ``ratio`` carry their interval at ``interval_confidence`` = 1 - alpha /
    ``holm_factor``: the level of the test that decides ``significant`` (1 - alpha alone; after
    ``with_holm`` the Holm step's level), so an interval excludes 0 (ratio: 1) exactly when the
    comparison is significant. ``testable`` is False when these trial counts can never reach
    ``p_adjusted < alpha`` in this family: the intervals at that level do not exist, and
    ``shift_range``/``ratio_range`` give the widest interval the trials allow instead (all
    pairwise differences/ratios, at level 1 - minimum possible p), descriptive only.
    ``values_a``/``values_b`` are the per-trial values compared (NaNs dropped).
    ``bias_log`` > 0 (a quantised cell): p and intervals hold for every log-ratio bias within
    ``±bias_log`` (``compare_trials``).

    ``test``: "mann-whitney" (Mann-Whitney U; Hodges-Lehmann shift and ratio; centers are
    medians) or "welch-log" (Welch t on per-trial logarithms; ``ratio`` is the ratio of
    geometric means with its Welch interval, ``shift`` the difference of geometric means with
    the ratio's interval mapped onto the baseline's geometric mean, ``gm_a * (ratio - 1)``;
    centers are geometric means; ``testable`` when both sides have >= 2 trials).
    """

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
    values_a: tuple[float, ...] = ()
    values_b: tuple[float, ...] = ()
    family_size: int = 1  # comparisons in the Holm family (1: unadjusted)
    holm_factor: int = 1  # alpha is divided by this for the intervals (Holm's step factor)
    testable: bool = False
    shift_range: Estimate | None = None
    ratio_range: Estimate | None = None
    interval_agrees: bool = True  # False only with ties (the warning says so)
    test: TrialTest = "mann-whitney"
    #: a bound on a bias of the log-ratio that the per-trial spread cannot show (a quantised
    #: cell: `compare_trials`' ``bias_log``); 0: none
    bias_log: float = 0.0

    @property
    def interval_confidence(self) -> float:
        return 1.0 - self.alpha / self.holm_factor


@dataclass(frozen=True, slots=True)
class NonInferiority:
    """Candidate/baseline ratio with its CI and the gate's verdict against ``1 ± margin``."""

    ratio: Estimate
    margin: float
    verdict: Verdict
    warnings: tuple[str, ...]


# --------------------------------------------------------------------------------------------
# Mann-Whitney, Hodges-Lehmann, Holm


#: p-values are floats standing for exact (rational) values: a p, or a Holm product ``k * p``,
#: within this relative distance of alpha counts as equal to alpha, so not below it (3 vs 7
#: trials give p = 1/60, and Holm's 3 * 1/60 is exactly 0.05, not 0.0499999...).
ALPHA_TOLERANCE: float = 1e-9


def below_alpha(p: float | np.ndarray, alpha: float) -> bool | np.ndarray:
    """``p < alpha`` for significance: the one comparison every verdict, interval rank and
    "can never reach" note uses (with ``ALPHA_TOLERANCE``)."""
    return p < alpha * (1.0 - ALPHA_TOLERANCE)


def min_p_value_mann_whitney(n_a: int, n_b: int) -> float:
    """Smallest two-sided exact Mann-Whitney p-value with these sample sizes: 2 / C(n_a+n_b, n_a).

    3 vs 3 trials: 0.1, so such a comparison can never be significant at 0.05; 4 vs 4: 0.029.
    """
    if n_a < 0 or n_b < 0:
        raise ValueError(f"sample sizes must be >= 0, got {n_a} and {n_b}")
    if n_a == 0 or n_b == 0:
        return 1.0
    if max(n_a, n_b) <= _EXACT_MW_MAX_PER_SIDE:  # the p-values' own table: the same float
        return float(_two_sided_null_p(n_a, n_b)[0])
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


@lru_cache(maxsize=256)
def mann_whitney_null_cdf(n_a: int, n_b: int) -> np.ndarray:
    """P(U <= u) for u = 0 .. n_a n_b under the null, continuous data: exact up to
    ``_EXACT_MW_MAX_PER_SIDE`` per side, the normal approximation with continuity correction
    beyond (read-only; the comparison's table and the sequential tests share it)."""
    if max(n_a, n_b) <= _EXACT_MW_MAX_PER_SIDE:
        cdf = np.asarray(_mann_whitney_null_cdf(n_a, n_b))
    else:
        mu = n_a * n_b / 2.0
        sigma = math.sqrt(n_a * n_b * (n_a + n_b + 1) / 12.0)
        cdf = np.asarray(stats.norm.cdf((np.arange(n_a * n_b + 1) + 0.5 - mu) / sigma))
    cdf.setflags(write=False)
    return cdf


@lru_cache(maxsize=256)
def _two_sided_null_p(n_a: int, n_b: int) -> np.ndarray:
    """``G(u) = min(1, 2 P(U <= u))`` for u = 0 .. n_a n_b: the two-sided p-value of a U that lies
    in the lower tail (U = u in the upper tail is ``G(n_a n_b - u)``, by symmetry). Exact null for
    continuous data up to ``_EXACT_MW_MAX_PER_SIDE`` per side, beyond that the normal
    approximation with continuity correction. Both the p-value (without ties) and the ranks of
    the Hodges-Lehmann interval are read from this one table, so the interval is dual to the test
    to the last bit: it excludes 0 exactly when ``factor * p < alpha``. Non-decreasing in u."""
    table = np.minimum(2.0 * mann_whitney_null_cdf(n_a, n_b), 1.0)
    table.setflags(write=False)
    return table


def _hodges_lehmann_rank(n_a: int, n_b: int, confidence: float) -> int:
    """Largest k with ``2 P(U <= k - 1) <= 1 - confidence`` (0: no interval exists).

    The CI for the shift is then ``[D_(k), D_(n_a n_b + 1 - k)]`` over the sorted pairwise
    differences (Moses/Lehmann), dual to the exact two-sided Mann-Whitney test.
    """
    table = _two_sided_null_p(n_a, n_b)
    return int(np.count_nonzero(table <= (1.0 - confidence) * (1.0 + 1e-12)))


def _rank_for_test(n_a: int, n_b: int, alpha: float, factor: int) -> int:
    """Largest k with ``factor * G(k - 1) < alpha``: the interval ``[D_(k), D_(N + 1 - k)]``
    then excludes 0 exactly when ``factor * p < alpha`` (p from the same table)."""
    return int(np.count_nonzero(below_alpha(factor * _two_sided_null_p(n_a, n_b), alpha)))


def _level_text(confidence: float) -> str:
    """0.95 -> "95%", 0.98333 -> "98.3%", 0.90476 -> "90.5%"."""
    return f"{confidence * 100:.3g}%"


def _hodges_lehmann(xa: np.ndarray, xb: np.ndarray, k: int, confidence: float,
                    log_scale: bool) -> Estimate:
    """The Hodges-Lehmann estimate with the interval of rank k (k < 1: no interval, warning);
    ``confidence`` is the level that rank stands for."""
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
    warnings: tuple[str, ...] = ()
    low: float | None
    high: float | None
    if k < 1:
        low = high = None
        warnings = (f"{n_a} vs {n_b} trials are too few for a {_level_text(confidence)} "
                    f"interval (minimum possible p={min_p_value_mann_whitney(n_a, n_b):.2g})",)
    else:
        low, high = float(differences[k - 1]), float(differences[differences.size - k])
    if log_scale:
        center = math.exp(center)
        low = None if low is None else math.exp(low)
        high = None if high is None else math.exp(high)
    return Estimate(center, low, high, confidence, n, float(n), method, warnings)


def hodges_lehmann(
    a: np.ndarray, b: np.ndarray, confidence: float = 0.95, log_scale: bool = False
) -> Estimate:
    """Hodges-Lehmann shift ``b - a`` (median of all pairwise differences) with its exact CI.

    With ``log_scale=True`` the shift is computed on logarithms and returned as a ratio
    ``b / a`` (``method="hodges-lehmann-log-ratio"``); values must then be positive. The
    interval is distribution-free under a location-shift model and has no value when the sample
    sizes cannot reach the confidence (e.g. 3 vs 3 at 95%): value set, CI None, warning.
    """
    check_confidence(confidence)
    xa = as_1d_float(a, "a")
    xb = as_1d_float(b, "b")
    k = _hodges_lehmann_rank(xa.size, xb.size, confidence) if xa.size and xb.size else 0
    return _hodges_lehmann(xa, xb, k, confidence, log_scale)


def _mann_whitney_p(a: np.ndarray, b: np.ndarray, seed: int) -> tuple[float, str | None]:
    """Two-sided Mann-Whitney p. Without ties: read from ``_two_sided_null_p`` (exact up to 100
    trials per side; equal to ``scipy.stats.mannwhitneyu(method="exact")``), the same table the
    interval ranks come from. With ties: a seeded permutation test."""
    pooled = np.concatenate([a, b])
    if np.unique(pooled).size == pooled.size:
        u = int(np.count_nonzero(np.subtract.outer(b, a) > 0))
        return float(_two_sided_null_p(a.size, b.size)[min(u, a.size * b.size - u)]), None
    if min(a.size, b.size) < 2:  # scipy's permutation test needs two values a side
        method: object = "asymptotic"
        note = "ties among per-trial values: p-value from the normal approximation"
    else:
        method = stats.PermutationMethod(n_resamples=9999, rng=np.random.default_rng(seed))
        note = "ties among per-trial values: p-value from a permutation test"
    result = stats.mannwhitneyu(b, a, alternative="two-sided", method=method)
    return float(result.pvalue), note


def _trials_phrase(n_a: int, n_b: int) -> str:
    return f"{n_a} trials per side" if n_a == n_b else f"{n_a} vs {n_b} trials"


def smallest_adjusted_p(n_a: int, n_b: int, family_size: int) -> float:
    """The smallest p a cell with these trial counts can reach after Holm over
    ``family_size`` comparisons: ``min(1, family_size * 2 / C(n_a + n_b, n_a))``. The one
    number every "can never reach" note (cell footnote, closing warning) quotes."""
    return min(1.0, max(1, family_size) * min_p_value_mann_whitney(n_a, n_b))


def _excludes(estimate: Estimate, null: float) -> bool:
    return (estimate.ci_low is not None and estimate.ci_high is not None
            and (estimate.ci_low > null or estimate.ci_high < null))


def _with_intervals(comparison: Comparison) -> Comparison:
    """``comparison`` with ``shift``/``ratio`` at its test's level (1 - alpha / holm_factor),
    ``testable``, the widest intervals when it is not, and the agreement check."""
    xa = np.asarray(comparison.values_a, dtype=float)
    xb = np.asarray(comparison.values_b, dtype=float)
    if comparison.bias_log > 0.0 and xa.size and xb.size:
        return _with_biased_intervals(comparison, xa, xb)
    n_a, n_b = xa.size, xb.size
    alpha, factor = comparison.alpha, comparison.holm_factor
    confidence = comparison.interval_confidence
    if n_a == 0 or n_b == 0:
        return replace(comparison, shift=_hodges_lehmann(xa, xb, 0, confidence, False),
                       ratio=_hodges_lehmann(xa, xb, 0, confidence, True), testable=False,
                       shift_range=None, ratio_range=None, interval_agrees=True)
    if comparison.test == "welch-log":
        return _with_welch_intervals(comparison, xa, xb)
    k = _rank_for_test(n_a, n_b, alpha, factor)
    shift = _hodges_lehmann(xa, xb, k, confidence, False)
    ratio = _hodges_lehmann(xa, xb, k, confidence, True)
    table = _two_sided_null_p(n_a, n_b)
    testable = comparison.significant or bool(  # (a permutation p with ties: significant)
        below_alpha(smallest_adjusted_p(n_a, n_b, comparison.family_size), alpha))
    shift_range = ratio_range = None
    if not testable and table[0] < 1.0:
        widest = 1.0 - float(table[0])  # [D_(1), D_(N)]: every pairwise difference
        shift_range = _hodges_lehmann(xa, xb, 1, widest, False)
        ratio_range = _hodges_lehmann(xa, xb, 1, widest, True)
    agrees = all(_excludes(estimate, null) == comparison.significant
                 for estimate, null in ((shift, 0.0), (ratio, 1.0))
                 if estimate.value is not None)
    warnings = tuple(w for w in comparison.warnings if not w.startswith(_DISAGREE_PREFIX))
    if not agrees:
        warnings += (f"{_DISAGREE_PREFIX} (ties among per-trial values): the "
                     f"{_level_text(confidence)} interval is exact for distinct values only; the "
                     "verdict follows the p-value",)
    return replace(comparison, shift=shift, ratio=ratio, testable=testable,
                   shift_range=shift_range, ratio_range=ratio_range, interval_agrees=agrees,
                   warnings=warnings)


_DISAGREE_PREFIX = "interval and p-value disagree"


def _shifted(comparison: Comparison, xb: np.ndarray, log_shift: float) -> Comparison:
    """``comparison`` (no bias) with B's values multiplied by ``exp(log_shift)``: one corner
    of the bias box, its intervals at the comparison's level."""
    return _with_intervals(replace(comparison, values_b=tuple(float(v) for v in
                                                              xb * math.exp(log_shift)),
                                   bias_log=0.0))


def _widened(estimate: Estimate, low: Estimate, high: Estimate, value: float | None
             ) -> Estimate:
    """``value`` with the interval from ``low``'s lower end to ``high``'s upper end."""
    return replace(estimate, value=value, ci_low=low.ci_low, ci_high=high.ci_high,
                   method=f"{estimate.method}+bias-box",
                   warnings=tuple(dict.fromkeys((*low.warnings, *high.warnings))))


def _with_biased_intervals(comparison: Comparison, xa: np.ndarray, xb: np.ndarray
                           ) -> Comparison:
    """The intervals of a comparison whose log-ratio may carry a bias within ±bias_log: the
    union of the intervals at the two corners (B shifted by exp(-bias_log) and by
    exp(+bias_log)), around the unshifted estimate. Excludes 1 exactly when both corners'
    intervals lie on one side of it, i.e. when the bias-box p (`compare_trials`) is below the
    level."""
    beta = comparison.bias_log
    centre = _shifted(comparison, xb, 0.0)
    low, high = _shifted(comparison, xb, -beta), _shifted(comparison, xb, beta)
    ratio = _widened(centre.ratio, low.ratio, high.ratio, centre.ratio.value)
    shift = _widened(centre.shift, low.shift, high.shift, centre.shift.value)
    testable = low.testable and high.testable

    def union(lower: Estimate | None, upper: Estimate | None, value: float | None
              ) -> Estimate | None:
        return None if lower is None or upper is None else _widened(lower, lower, upper, value)

    significant = comparison.significant
    agrees = not testable or _excludes(ratio, 1.0) == significant
    return replace(comparison, shift=shift, ratio=ratio, testable=testable,
                   shift_range=None if testable else union(low.shift_range, high.shift_range,
                                                           centre.shift.value),
                   ratio_range=None if testable else union(low.ratio_range, high.ratio_range,
                                                           centre.ratio.value),
                   interval_agrees=agrees, warnings=comparison.warnings)


def _with_welch_intervals(comparison: Comparison, xa: np.ndarray, xb: np.ndarray) -> Comparison:
    """The welch-log path of ``_with_intervals`` (positive values, >= 1 a side): the ratio of
    geometric means with its Welch interval at the comparison's level, the shift mapped onto
    the baseline's geometric mean; testable with >= 2 trials a side."""
    confidence = comparison.interval_confidence
    ratio = welch_log_ratio(xb, xa, confidence)
    geometric_a = math.exp(float(np.log(xa).mean()))

    def mapped(r: float | None) -> float | None:
        return None if r is None else geometric_a * (r - 1.0)

    n = xa.size + xb.size
    shift = Estimate(mapped(ratio.value), mapped(ratio.ci_low), mapped(ratio.ci_high),
                     confidence, n, float(n), "welch-log-shift", ratio.warnings)
    testable = comparison.p_value is not None and xa.size >= 2 and xb.size >= 2
    agrees = not testable or _excludes(ratio, 1.0) == comparison.significant
    warnings = tuple(w for w in comparison.warnings if not w.startswith(_DISAGREE_PREFIX))
    if not agrees:  # only at floating-point distance from the level
        warnings += (f"{_DISAGREE_PREFIX} at the edge of the {_level_text(confidence)} level: "
                     "the verdict follows the p-value",)
    return replace(comparison, shift=shift, ratio=ratio, testable=testable, shift_range=None,
                   ratio_range=None, interval_agrees=agrees, warnings=warnings)


def compare_trials(
    a: np.ndarray,
    b: np.ndarray,
    alpha: float = 0.05,
    seed: int = 0,
    test: TrialTest = "mann-whitney",
    bias_log: float = 0.0,
) -> Comparison:
    """B versus A where each value is one trial's statistic (e.g. the p95 TTFT of a run).

    ``test="welch-log"``: two-sided Welch t on the per-trial logarithms, the ratio of geometric
    means ``b / a`` with its Welch interval and the difference of geometric means (``Comparison``
    says how its interval is mapped), at level 1 - alpha (an interval excludes 1 exactly when
    ``p < alpha``). It needs >= 2 trials a side (fewer: no p, a warning) and positive values: a
    side with a value <= 0 (an error rate of 0) has no logarithm, and the cell falls back to
    Mann-Whitney with a warning saying why.

    ``test="mann-whitney"``: two-sided Mann-Whitney U (exact without ties, seeded permutation
    test with ties), the Hodges-Lehmann shift ``b - a`` and the Hodges-Lehmann ratio on
    logarithms ``b / a``, both with their distribution-free CIs at level 1 - alpha (dual to the
    exact test: an interval excludes 0, ratio 1, exactly when ``p < alpha``), and the medians
    of each side.
    ``p_adjusted`` equals ``p_value`` until ``with_holm`` adjusts a family (and the intervals
    with it). NaNs are dropped.

    ``bias_log`` > 0: the log of ``b / a`` may carry a bias within ``±bias_log`` that the
    per-trial spread does not show (a quantised cell, whose trials share one phase: the
    analysis layer's `quantisation`). The test is then the least significant over that box:
    B's values shifted by ``exp(s)`` for every ``s`` in it — p is 1 when the two corners'
    estimates lie on opposite sides of no change (a shift inside the box makes the sides
    equal), else the larger of the corners' p-values; the intervals are the union of the
    corners' (`_with_biased_intervals`), so an interval excludes 1 exactly when p < alpha.
    """
    if bias_log > 0.0:
        return _compare_in_bias_box(a, b, alpha, seed, test, bias_log)
    if not bias_log >= 0.0:
        raise ValueError(f"bias_log must be >= 0, got {bias_log!r}")
    check_alpha(alpha)
    xa, warn_a = drop_nan(a, "a")
    xb, warn_b = drop_nan(b, "b")
    warnings: tuple[str, ...] = (*warn_a, *warn_b)
    n_a, n_b = xa.size, xb.size
    center_a = float(np.median(xa)) if n_a else None
    center_b = float(np.median(xb)) if n_b else None
    values_a, values_b = tuple(float(v) for v in xa), tuple(float(v) for v in xb)
    placeholder = Estimate(None, None, None, 1.0 - alpha, 0, 0.0, "hodges-lehmann")
    if test not in TRIAL_TESTS:
        raise ValueError(f"test must be one of {', '.join(TRIAL_TESTS)}, got {test!r}")
    if test == "welch-log" and n_a and n_b:
        if (xa <= 0).any() or (xb <= 0).any():
            warnings += ("welch-log needs positive per-trial values (a value <= 0, e.g. an "
                         "error rate of 0, has no logarithm): this cell uses the rank test "
                         "(Mann-Whitney)",)
        else:
            return _compare_welch(xa, xb, alpha, warnings)
    if n_a == 0 or n_b == 0:
        warnings += (f"nothing to compare ({n_a} vs {n_b} trials)",)
        return _with_intervals(Comparison(n_a, n_b, center_a, center_b, None, None, placeholder,
                                          placeholder, False, alpha, warnings,
                                          values_a=values_a, values_b=values_b,
                                          test=test))  # the test that would have run
    p_value, note = _mann_whitney_p(xa, xb, seed)
    if note:
        warnings += (note,)
    min_p = min_p_value_mann_whitney(n_a, n_b)
    if not below_alpha(min_p, alpha):
        warnings += (f"{_trials_phrase(n_a, n_b)} can never reach p<{alpha:g} "
                     f"(minimum possible p={min_p:.2g})",)
    significant = bool(below_alpha(p_value, alpha))
    return _with_intervals(Comparison(n_a, n_b, center_a, center_b, p_value, p_value,
                                      placeholder, placeholder, significant, alpha, warnings,
                                      values_a=values_a, values_b=values_b))


def _compare_in_bias_box(a: np.ndarray, b: np.ndarray, alpha: float, seed: int,
                         test: TrialTest, bias_log: float) -> Comparison:
    """`compare_trials` with ``bias_log`` > 0 (its docstring says how)."""
    if not math.isfinite(bias_log):
        raise ValueError(f"bias_log must be finite, got {bias_log!r}")
    centre = compare_trials(a, b, alpha, seed, test)
    xb = np.asarray(centre.values_b, dtype=float)
    corners = [compare_trials(a, xb * math.exp(s), alpha, seed, test)
               for s in (-bias_log, bias_log)]
    p_value: float | None = None
    if all(c.p_value is not None for c in corners):
        sides = {_side(c) for c in corners}
        p_value = (1.0 if len(sides) > 1 or 0 in sides
                   else max(float(c.p_value) for c in corners if c.p_value is not None))
    significant = p_value is not None and bool(below_alpha(p_value, alpha))
    return _with_intervals(replace(centre, p_value=p_value, p_adjusted=p_value,
                                   significant=significant, bias_log=bias_log,
                                   test=centre.test))


def _side(comparison: Comparison) -> int:
    """-1, 0 or +1: on which side of no change the comparison's log-ratio estimate lies."""
    value = comparison.ratio.value
    if value is None or value == 1.0:
        return 0
    return 1 if value > 1.0 else -1


def _compare_welch(xa: np.ndarray, xb: np.ndarray, alpha: float, warnings: tuple[str, ...]
                   ) -> Comparison:
    """``compare_trials``' welch-log path (positive values, >= 1 a side)."""
    n_a, n_b = xa.size, xb.size
    center_a = math.exp(float(np.log(xa).mean()))
    center_b = math.exp(float(np.log(xb).mean()))
    placeholder = Estimate(None, None, None, 1.0 - alpha, 0, 0.0, "welch-log-ratio")
    p_value: float | None = None
    if n_a < 2 or n_b < 2:
        warnings += (f"welch-log needs >= 2 trials per side to test a change (have {n_a} vs "
                     f"{n_b}): no p-value",)
    else:
        p_value = welch_log_p(xb, xa)
    significant = p_value is not None and bool(below_alpha(p_value, alpha))
    return _with_intervals(Comparison(
        n_a, n_b, center_a, center_b, p_value, p_value, placeholder, placeholder, significant,
        alpha, warnings, values_a=tuple(float(v) for v in xa),
        values_b=tuple(float(v) for v in xb), test="welch-log"))


def _holm_order(p_values: Sequence[float | None]) -> tuple[list[tuple[float, int]], int]:
    indexed = [(p, i) for i, p in enumerate(p_values) if p is not None]
    for p, _ in indexed:
        if not (0.0 <= p <= 1.0):
            raise ValueError(f"p-values must lie in [0, 1], got {p!r}")
    return sorted(indexed), len(indexed)


def holm_adjust(p_values: Sequence[float | None]) -> tuple[float | None, ...]:
    """Holm step-down adjusted p-values; None entries stay None and do not count in the family."""
    ordered, m = _holm_order(p_values)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(ordered):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return tuple(adjusted)


def holm_interval_factors(p_values: Sequence[float | None], alpha: float
                          ) -> tuple[int | None, ...]:
    """Per p-value the divisor of alpha for an interval that agrees with Holm's verdict.

    Holm tests the j-th smallest of m p-values at ``alpha / (m - j + 1)`` and stops at the first
    step s that fails. A rejected comparison gets the factor of the step that rejected it
    (``m - j + 1``); every comparison from step s on gets step s's (``m - s + 1``, the number not
    rejected: Holm-compatible simultaneous intervals for those, Strassburger & Bretz 2008). An
    interval at 1 - alpha / factor, dual to the test, then excludes the null value exactly when
    the Holm-adjusted p is below alpha.
    """
    check_alpha(alpha)
    ordered, m = _holm_order(p_values)
    factors: list[int | None] = [None] * len(p_values)
    running = 0.0
    stopped: int | None = None
    for rank, (p, i) in enumerate(ordered):
        running = max(running, min(1.0, (m - rank) * p))
        if stopped is None and not below_alpha(running, alpha):
            stopped = m - rank
        factors[i] = (m - rank) if stopped is None else stopped
    return tuple(factors)


_HOLM_WARNING_PREFIX = "with Holm over "


def with_holm(comparisons: Sequence[Comparison]) -> tuple[Comparison, ...]:
    """Copies with ``p_adjusted``/``significant`` from Holm over the whole family, and the
    intervals at the level that agrees with that verdict (``holm_interval_factors``).

    Adds a warning to rank-test comparisons whose trial counts cannot be significant after the
    correction at all (smallest possible adjusted p is ``m * min_p``); a family may mix
    welch-log cells with cells that fell back to the rank test.
    """
    alphas = {c.alpha for c in comparisons}
    if len(alphas) > 1:
        raise ValueError(f"one Holm family needs one alpha, got {sorted(alphas)}")
    p_values = [c.p_value for c in comparisons]
    adjusted = holm_adjust(p_values)
    factors = holm_interval_factors(p_values, alphas.pop()) if comparisons else ()
    m = sum(1 for p in p_values if p is not None)
    result = []
    for comparison, p_adj, factor in zip(comparisons, adjusted, factors, strict=True):
        warnings = tuple(w for w in comparison.warnings if not w.startswith(_HOLM_WARNING_PREFIX))
        if p_adj is not None and m > 1 and comparison.test == "mann-whitney":
            best = smallest_adjusted_p(comparison.n_a, comparison.n_b, m)
            if not below_alpha(best, comparison.alpha):
                warnings += (f"{_HOLM_WARNING_PREFIX}{m} comparisons, "
                             f"{_trials_phrase(comparison.n_a, comparison.n_b)} can never reach "
                             f"p<{comparison.alpha:g} (minimum possible adjusted p={best:.2g})",)
        result.append(_with_intervals(replace(
            comparison, p_adjusted=p_adj,
            significant=p_adj is not None and bool(below_alpha(p_adj, comparison.alpha)),
            warnings=warnings,
            family_size=max(m, 1), holm_factor=factor or 1)))
    return tuple(result)


def _welch_log_parts(candidate: np.ndarray, baseline: np.ndarray
                     ) -> tuple[float, float, float]:
    """Welch on logarithms (>= 2 positive values a side): the difference of the log means
    (candidate - baseline), its standard error and the Welch-Satterthwaite degrees of freedom
    (NaN when the standard error is 0)."""
    log_c, log_b = np.log(candidate), np.log(baseline)
    difference = float(log_c.mean() - log_b.mean())
    var_c = float(log_c.var(ddof=1)) / log_c.size
    var_b = float(log_b.var(ddof=1)) / log_b.size
    se = math.sqrt(var_c + var_b)
    if se == 0.0:
        return difference, 0.0, math.nan
    df = (var_c + var_b) ** 2 / (var_c**2 / (log_c.size - 1) + var_b**2 / (log_b.size - 1))
    return difference, se, df


def welch_log_p(candidate: np.ndarray, baseline: np.ndarray) -> float:
    """Two-sided Welch t p-value on the logarithms of positive per-trial values (>= 2 a side):
    ``scipy.stats.ttest_ind(log(candidate), log(baseline), equal_var=False)``. No variation on
    either side: 0 when the means differ, 1 when they do not (as ``sequential.welch_log_tests``)."""
    difference, se, df = _welch_log_parts(candidate, baseline)
    if se == 0.0:
        return 1.0 if difference == 0.0 else 0.0
    return float(min(1.0, 2.0 * stats.t.sf(abs(difference) / se, df)))


def welch_log_ratio(candidate: np.ndarray, baseline: np.ndarray, confidence: float
                    ) -> Estimate:
    """Ratio of geometric means candidate/baseline with a Welch t interval on the logarithms at
    ``confidence``: the one scalar implementation the comparison, the gate and the sequential
    decisions share (``sequential.welch_log_tests`` is its vectorised twin for simulations).
    Positive values only (the caller checks); fewer than 2 a side: the value without interval
    (none at all without trials), with a warning."""
    n = candidate.size + baseline.size
    method = "welch-log-ratio"
    if candidate.size == 0 or baseline.size == 0:
        return Estimate(None, None, None, confidence, n, float(n), method,
                        (f"nothing to compare ({baseline.size} vs {candidate.size} trials)",))
    if candidate.size < 2 or baseline.size < 2:
        value = math.exp(float(np.log(candidate).mean() - np.log(baseline).mean()))
        return Estimate(value, None, None, confidence, n, float(n), method,
                        ("an interval needs >= 2 trials per arm",))
    difference, se, df = _welch_log_parts(candidate, baseline)
    if se == 0.0:
        value = math.exp(difference)
        return Estimate(value, value, value, confidence, n, float(n), method,
                        ("no trial-to-trial variation on either side; interval is a point",))
    half = float(stats.t.isf((1.0 - confidence) / 2.0, df)) * se
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
    check_confidence(confidence)
    if not (0.0 <= margin < 1.0) or math.isnan(margin):
        raise ValueError(f"margin must be within [0, 1), got {margin!r}")
    xc, warn_c = drop_nan(candidate_trials, "candidate_trials")
    xb, warn_b = drop_nan(baseline_trials, "baseline_trials")
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
        ratio = welch_log_ratio(xc, xb, confidence)
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
