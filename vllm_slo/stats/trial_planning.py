"""How many trials: per variant for a Mann-Whitney comparison to detect an effect, and per
side for the non-inferiority gate to pass an unchanged candidate, from a pilot's
trial-to-trial variation. Pure (docs/statistics.md "Planning").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from vllm_slo.stats.inputs import check_alpha, check_confidence
from vllm_slo.stats.trial_statistics import (
    TrialTest,
    below_alpha,
    min_p_value_mann_whitney,
)

#: ``trials_needed`` gives up (returns None) above this many trials per variant.
MAX_TRIALS_PER_VARIANT: int = 200

#: Asymptotic relative efficiency of Mann-Whitney versus the t-test used for planning: 108/125,
#: the smallest it can be for any continuous distribution (Hodges & Lehmann 1956). For normal
#: trial values it is 3/pi = 0.955, which plans ~10% fewer trials but then only just reaches
#: the requested power (81% for 80% in our simulation), and less for lighter-tailed trial data.
MW_PLANNING_EFFICIENCY: float = 108.0 / 125.0


@dataclass(frozen=True, slots=True)
class TrialPlan:
    """How many trials per variant a comparison with ``test`` needs (None: more than the cap)."""

    trials_per_variant: int | None
    cv: float
    effect: float
    alpha: float
    power: float
    warnings: tuple[str, ...]
    test: TrialTest = "mann-whitney"


def _min_trials_for_alpha(alpha: float) -> int:
    n = 1
    while not below_alpha(min_p_value_mann_whitney(n, n), alpha):
        n += 1
    return n


def _mann_whitney_power(n: int, sigma_log: float, delta_log: float, alpha: float,
                        efficiency: float = MW_PLANNING_EFFICIENCY) -> float:
    """Approximate power of two-sided MW with n per side: a t-test with ``n * ARE`` per side
    (``efficiency`` 1: the t-test on logs itself)."""
    n_t = n * efficiency
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
    test: TrialTest = "mann-whitney",
) -> TrialPlan:
    """Trials per variant for Mann-Whitney to detect a relative change with the given power
    (``test="welch-log"``: for the t-test on per-trial logarithms, efficiency 1 and at least 2
    trials per side; a pooled-variance t power, which Welch matches at equal trial counts and
    similar spreads).

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
    welch = test == "welch-log"
    n_min = 2 if welch else _min_trials_for_alpha(alpha)
    efficiency = 1.0 if welch else MW_PLANNING_EFFICIENCY
    if n_min > MAX_TRIALS_PER_VARIANT:
        return TrialPlan(None, trial_to_trial_cv, relative_effect, alpha, power,
                         (f"alpha={alpha:g} needs more than {MAX_TRIALS_PER_VARIANT} trials per "
                          "variant",), test)
    delta_log = abs(math.log1p(relative_effect))
    sigma_log = math.sqrt(math.log1p(trial_to_trial_cv**2))
    if delta_log == 0.0:
        return TrialPlan(None, trial_to_trial_cv, relative_effect, alpha, power,
                         ("a relative effect of 0 cannot be detected with any number of trials",),
                         test)
    if sigma_log == 0.0:
        warnings += ("trial-to-trial CV of 0: the minimum trial count suffices; check the pilot",)
        return TrialPlan(n_min, trial_to_trial_cv, relative_effect, alpha, power, warnings,
                         test)
    for n in range(n_min, MAX_TRIALS_PER_VARIANT + 1):
        if _mann_whitney_power(n, sigma_log, delta_log, alpha, efficiency) >= power:
            return TrialPlan(n, trial_to_trial_cv, relative_effect, alpha, power, warnings,
                             test)
    return TrialPlan(None, trial_to_trial_cv, relative_effect, alpha, power,
                     (f"detecting a {relative_effect:.0%} change with trial-to-trial CV "
                      f"{trial_to_trial_cv:.0%} needs more than {MAX_TRIALS_PER_VARIANT} trials "
                      "per variant; reduce the trial-to-trial variation or target a larger "
                      "effect",), test)


def trials_for_gate(
    trial_to_trial_cv: float,
    margin: float,
    confidence: float = 0.95,
    power: float = 0.8,
) -> int | None:
    """Trials per side for the non-inferiority gate to PASS with the given power when the
    candidate is truly no different (ratio 1): the Welch interval on log ratios must stay below
    ``log(1 + margin)``. With equal trials k per side and log-scale sd ``sigma``, the statistic
    ``(log(1 + margin) - d) / se`` is noncentral t with ``2k - 2`` degrees of freedom and
    noncentrality ``log(1 + margin) / (sigma sqrt(2 / k))``. None above
    ``MAX_TRIALS_PER_VARIANT``; 2 (the minimum the gate accepts) for a CV of 0.
    """
    check_confidence(confidence)
    if not (0.0 < power < 1.0) or math.isnan(power):
        raise ValueError(f"power must be strictly between 0 and 1, got {power!r}")
    if not (0.0 < margin < 1.0) or math.isnan(margin):
        raise ValueError(f"margin must be within (0, 1), got {margin!r}")
    if not (trial_to_trial_cv >= 0.0) or math.isinf(trial_to_trial_cv):
        raise ValueError(f"trial_to_trial_cv must be >= 0, got {trial_to_trial_cv!r}")
    sigma_log = math.sqrt(math.log1p(trial_to_trial_cv**2))
    if sigma_log == 0.0:
        return 2
    bound = math.log1p(margin)
    for k in range(2, MAX_TRIALS_PER_VARIANT + 1):
        df = 2 * k - 2
        critical = float(stats.t.ppf(0.5 + confidence / 2.0, df))
        noncentrality = bound / (sigma_log * math.sqrt(2.0 / k))
        if float(stats.nct.sf(critical, df, noncentrality)) >= power:
            return k
    return None
