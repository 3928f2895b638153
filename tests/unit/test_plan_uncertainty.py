"""The plan's CV interval (chi-square on pooled log variance) and its trials at both ends."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from vllm_slo.analysis.comparison import min_trials_for_family
from vllm_slo.stats.plan_uncertainty import (
    INSTANCE_MEANS,
    PER_TRIAL,
    CvEstimate,
    cv_from_sigma_log,
    instance_units,
    plan_with_uncertainty,
    pooled_log_cv,
    within_instance_units,
)
from vllm_slo.stats.trial_planning import trials_needed


def test_known_values_against_a_hand_computation() -> None:
    a, b = [1.0, 2.0, 4.0], [3.0, 6.0]
    estimate = pooled_log_cv([a, b])
    log2 = math.log(2.0)
    variance = (2 * log2**2 + 0.5 * log2**2) / 3  # (ss_a + ss_b) / (2 + 1)
    assert estimate.df == 3 and estimate.n_units == 5 and estimate.units == PER_TRIAL
    assert estimate.cv == pytest.approx(math.sqrt(math.expm1(variance)))
    high = 3 * variance / stats.chi2.ppf(0.025, 3)
    low = 3 * variance / stats.chi2.ppf(0.975, 3)
    assert estimate.ci_high == pytest.approx(math.sqrt(math.expm1(high)))
    assert estimate.ci_low == pytest.approx(math.sqrt(math.expm1(low)))
    assert estimate.ci_low < estimate.cv < estimate.ci_high
    assert any("3 degree(s) of freedom" in w for w in estimate.warnings)


def test_no_degrees_of_freedom_is_a_warning_not_zero() -> None:
    estimate = pooled_log_cv([[5.0], [7.0]], INSTANCE_MEANS)
    assert estimate.cv is None and estimate.ci_high is None and estimate.df == 0
    assert "needs >= 2 instance means in one group, have 2 in 2 group(s)" in estimate.warnings[0]
    plan = plan_with_uncertainty(estimate, 0.1, 0.05, 6)
    assert plan.at_estimate is None and plan.at_upper is None


def test_non_positive_values_are_dropped_with_a_warning() -> None:
    estimate = pooled_log_cv([[1.0, 1.1, 0.0, float("nan")]])
    assert estimate.df == 1 and estimate.n_units == 2
    assert "2 value(s) <= 0 or not finite left out" in estimate.warnings[0]


@pytest.mark.parametrize("sizes", [(2,), (2, 2), (3, 4), (6, 6, 6)])
def test_the_interval_covers_a_known_cv_at_its_nominal_rate(sizes: tuple[int, ...]) -> None:
    """4000 seeded pilots of log-normal trials with CV 20%: the 95% interval covers 20% in
    94-96% of them (binomial sd 0.34%), from 1 degree of freedom (2 instances) up."""
    rng = np.random.default_rng(41)
    sigma_log = math.sqrt(math.log1p(0.2**2))
    true_cv = cv_from_sigma_log(sigma_log)
    reps = 4000
    covered = 0
    for _ in range(reps):
        groups = [np.exp(rng.normal(math.log(100.0 * (g + 1)), sigma_log, n))
                  for g, n in enumerate(sizes)]
        estimate = pooled_log_cv(groups)
        assert estimate.ci_low is not None and estimate.ci_high is not None
        covered += estimate.ci_low <= true_cv <= estimate.ci_high
    assert 0.94 <= covered / reps <= 0.96, covered / reps


def test_the_interval_narrows_with_degrees_of_freedom() -> None:
    rng = np.random.default_rng(7)
    few = pooled_log_cv([rng.lognormal(0, 0.2, 2)])
    many = pooled_log_cv([rng.lognormal(0, 0.2, 60)])
    assert few.ci_high is not None and many.ci_high is not None
    assert few.ci_low is not None and many.ci_low is not None
    assert few.ci_high / few.ci_low > 10 * (many.ci_high / many.ci_low)


def test_units_collapse_trials_of_one_instance() -> None:
    values, units = instance_units([([1.0, 4.0, 3.0], ["a", "a", "b"]), ([2.0], ["c"])])
    assert units == INSTANCE_MEANS
    assert [list(v) for v in values] == [[pytest.approx(2.0), pytest.approx(3.0)], [2.0]]
    _, units = instance_units([([1.0, 3.0], ["a", "b"])])
    assert units == PER_TRIAL
    within = within_instance_units([([1.0, 4.0, 3.0], ["a", "a", "b"])])
    assert [list(v) for v in within] == [[1.0, 4.0], [3.0]]


def test_the_issue_numbers_holm_family_and_upper_bound() -> None:
    """Issue 41: CV 24% from 2 instance means planned 98-99 trials at alpha 0.05 for a 10%
    change; with Holm over compare's 6 default cells it needs 152; the upper bound of a
    1-df interval needs more than the planner's cap."""
    gap = math.sqrt(2.0 * math.log1p(0.24**2))  # two logs this far apart: sd = CV 24%
    estimate = pooled_log_cv([[100.0, 100.0 * math.exp(gap)]], INSTANCE_MEANS)
    assert estimate.cv == pytest.approx(0.24) and estimate.df == 1
    assert estimate.ci_high is not None and estimate.ci_high > 10  # > 1000%: beyond any plan
    plan = plan_with_uncertainty(estimate, 0.10, 0.05, 6, "welch-log")
    assert plan.alpha_per_cell == pytest.approx(0.05 / 6)
    assert plan.at_estimate is not None and plan.at_estimate.trials_per_variant == 152
    assert trials_needed(0.24, 0.10, 0.05, test="welch-log").trials_per_variant == 98
    assert plan.at_upper is not None and plan.at_upper.trials_per_variant is None
    assert plan.gate_at_upper is None
    wide = plan_with_uncertainty(estimate, 0.10, 0.05, 6, "welch-log", margin=0.25)
    assert wide.gate_at_estimate is not None and wide.gate_at_upper is None
    single = plan_with_uncertainty(estimate, 0.10, 0.05, 1, "welch-log")
    assert single.at_estimate is not None and single.at_estimate.trials_per_variant == 98


def test_mann_whitney_plans_reach_the_holm_level() -> None:
    """At alpha/6 the rank test needs as many trials a side as compare's Holm family needs
    before any adjusted p can reach alpha (m * min p): the same floor, from one rule."""
    estimate = CvEstimate(0.001, 0.0005, 0.002, 0.95, 10, PER_TRIAL, 12)
    plan = plan_with_uncertainty(estimate, 0.10, 0.05, 6, "mann-whitney")
    assert plan.at_estimate is not None
    assert plan.at_estimate.trials_per_variant == min_trials_for_family(6, 0.05)
