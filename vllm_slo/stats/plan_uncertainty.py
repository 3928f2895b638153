"""A pilot's coefficient of variation with its chi-square interval, and the trials a comparison
needs at the estimate and at the interval's upper bound, with the Holm family it runs in.
Pure (docs/statistics.md "Planning with its uncertainty").

The CV is estimated on the log scale: the pooled variance of log values over the groups
(variants), ``s^2 = sum (x - mean_g)^2 / df`` with ``df = sum (n_g - 1)``, and
``cv = sqrt(exp(s^2) - 1)`` — the log-normal CV, the same conversion `trials_needed` inverts.
For normal log values ``df * s^2 / sigma^2`` is chi-square with ``df`` degrees of freedom, so
``[df s^2 / chi2(1 - a/2), df s^2 / chi2(a/2)]`` covers ``sigma^2`` with probability
``1 - a``; the CV interval is that interval mapped through the same monotone conversion.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from vllm_slo.stats.inputs import check_alpha, check_confidence
from vllm_slo.stats.trial_planning import TrialPlan, trials_for_gate, trials_needed
from vllm_slo.stats.trial_statistics import TrialTest

INSTANCE_MEANS = "instance means"
PER_TRIAL = "per-trial values"


@dataclass(frozen=True, slots=True)
class CvEstimate:
    """A pooled log-scale CV (None: no degrees of freedom) with its chi-square interval, the
    units it was estimated from (`INSTANCE_MEANS` or `PER_TRIAL`), how many of them and its
    degrees of freedom."""

    cv: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    df: int
    units: str
    n_units: int
    warnings: tuple[str, ...] = ()


def cv_from_sigma_log(sigma_log: float) -> float:
    """The CV of a log-normal value whose log has standard deviation ``sigma_log``."""
    return math.sqrt(math.expm1(sigma_log**2))


def pooled_log_cv(groups: Sequence[Sequence[float] | np.ndarray], units: str = PER_TRIAL,
                  confidence: float = 0.95) -> CvEstimate:
    """The CV pooled over ``groups`` (each a 1-D sample of one variant, in ``units``) on the
    log scale, with the chi-square interval at ``confidence`` (module docstring). A group with
    fewer than 2 values adds no degree of freedom; non-positive or non-finite values are
    dropped with a warning (they have no logarithm). ``df == 0``: no estimate, a warning."""
    check_confidence(confidence)
    sum_squares, df, n_units, dropped = 0.0, 0, 0, 0
    for group in groups:
        values = np.asarray(group, dtype=float).ravel()
        usable = values[np.isfinite(values) & (values > 0)]
        dropped += values.size - usable.size
        n_units += usable.size
        if usable.size >= 2:
            logs = np.log(usable)
            sum_squares += float(np.sum((logs - logs.mean()) ** 2))
            df += usable.size - 1
    warnings: tuple[str, ...] = ()
    if dropped:
        warnings += (f"{dropped} value(s) <= 0 or not finite left out (no logarithm)",)
    if df == 0:
        return CvEstimate(None, None, None, confidence, 0, units, n_units, (
            *warnings, f"no degrees of freedom: needs >= 2 {units} in one group, have "
            f"{n_units} in {len(groups)} group(s)"))
    variance = sum_squares / df
    tail = (1.0 - confidence) / 2.0
    low_variance = df * variance / float(stats.chi2.ppf(1.0 - tail, df))
    high_variance = df * variance / float(stats.chi2.ppf(tail, df))
    cv = cv_from_sigma_log(math.sqrt(variance))
    high = cv_from_sigma_log(math.sqrt(high_variance))
    if df < 5 and cv > 0:
        warnings += (f"{df} degree(s) of freedom: the CV's upper bound is {high / cv:.3g}x "
                     "its estimate; plan for the upper bound to be safe",)
    return CvEstimate(cv, cv_from_sigma_log(math.sqrt(low_variance)), high, confidence, df,
                      units, n_units, warnings)


def instance_units(groups: Sequence[tuple[Sequence[float], Sequence[str]]]
                   ) -> tuple[list[np.ndarray], str]:
    """Each group's (values, instance keys) as one value per server instance: the geometric
    mean of its trials (the log of which is the mean of their logs). Units `PER_TRIAL` when
    every instance ran one trial, else `INSTANCE_MEANS`."""
    collapsed = []
    several = False
    for values, keys in groups:
        by_instance: dict[str, list[float]] = {}
        for value, key in zip(values, keys, strict=True):
            if math.isfinite(value) and value > 0:
                by_instance.setdefault(key, []).append(float(value))
        several |= any(len(v) > 1 for v in by_instance.values())
        collapsed.append(np.asarray([math.exp(float(np.mean(np.log(v))))
                                     for v in by_instance.values()], dtype=float))
    return collapsed, INSTANCE_MEANS if several else PER_TRIAL


def within_instance_units(groups: Sequence[tuple[Sequence[float], Sequence[str]]]
                          ) -> list[np.ndarray]:
    """The trials of each (group, instance) as a sample of their own: their pooled CV is the
    trial-to-trial variation on one server, a lower bound on restart-to-restart variation."""
    samples = []
    for values, keys in groups:
        by_instance: dict[str, list[float]] = {}
        for value, key in zip(values, keys, strict=True):
            by_instance.setdefault(key, []).append(float(value))
        samples += [np.asarray(v, dtype=float) for v in by_instance.values()]
    return samples


@dataclass(frozen=True, slots=True)
class UncertainPlan:
    """Trials per variant to detect ``effect`` at the CV's estimate and at its upper bound,
    each cell tested at ``alpha / family_size`` (Holm's first step: the level a changed cell
    must reach when every other cell of the family is unchanged), and trials per side for the
    gate (no correction: PASS is an intersection-union test) at both."""

    cv: CvEstimate
    effect: float
    alpha: float
    family_size: int
    test: TrialTest
    at_estimate: TrialPlan | None
    at_upper: TrialPlan | None
    margin: float
    gate_at_estimate: int | None
    gate_at_upper: int | None

    @property
    def alpha_per_cell(self) -> float:
        return self.alpha / self.family_size


def plan_with_uncertainty(cv: CvEstimate, effect: float, alpha: float, family_size: int,
                          test: TrialTest = "welch-log", margin: float = 0.05,
                          power: float = 0.8) -> UncertainPlan:
    """`UncertainPlan` for one cell (plans None where the CV has no estimate)."""
    check_alpha(alpha)
    if family_size < 1:
        raise ValueError(f"family_size must be >= 1, got {family_size!r}")
    if cv.cv is None or cv.ci_high is None:
        return UncertainPlan(cv, effect, alpha, family_size, test, None, None, margin, None,
                             None)
    level = alpha / family_size
    return UncertainPlan(
        cv, effect, alpha, family_size, test,
        trials_needed(cv.cv, effect, level, power, test),
        trials_needed(cv.ci_high, effect, level, power, test), margin,
        trials_for_gate(cv.cv, margin, 1.0 - alpha, power),
        trials_for_gate(cv.ci_high, margin, 1.0 - alpha, power))
