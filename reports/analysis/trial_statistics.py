"""Statistics across trials: the trial (one full run on a fresh server) is the unit of
comparison. Mann-Whitney U on per-trial statistics with Hodges-Lehmann effects and Holm's
correction, the non-inferiority gate, and trial planning. Pure functions over 1-D arrays
returning small frozen results with warnings (docs/statistics.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
from scipy import stats

from vllm_slo.reports.analysis.inputs import as_1d_float, check_alpha, check_confidence, drop_nan
from vllm_slo.reports.analysis.statistics import Estimate, Verdict

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
    check_confidence(confidence)
    xa = as_1d_float(a, "a")
    xb = as_1d_float(b, "b")
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
    elif min(a.size, b.size) < 2:  # scipy's permutation test needs two values a side
        method = "asymptotic"
        note = "ties among per-trial values: p-value from the normal approximation"
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
    check_alpha(alpha)
    check_confidence(confidence)
    xa, warn_a = drop_nan(a, "a")
    xb, warn_b = drop_nan(b, "b")
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
    check_alpha(alpha)
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
