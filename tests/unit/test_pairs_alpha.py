"""Experiments and compares with 3+ arms: each pair against the baseline at alpha / (arms - 1)
(Bonferroni over the pairs, Holm over each pair's cells), so the family-wise rate of a false
"changed" over every pair and cell stays at or below alpha."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_slo.analysis.comparison import per_pair_alpha
from vllm_slo.analysis.experiment_design import sequential_design
from vllm_slo.analysis.wording import pairs_text
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.stats.trial_statistics import compare_trials, with_holm


def test_the_level_per_pair() -> None:
    assert per_pair_alpha(0.05, 2) == 0.05
    assert per_pair_alpha(0.05, 3) == pytest.approx(0.025)
    assert per_pair_alpha(0.05, 4) == pytest.approx(0.05 / 3)
    assert pairs_text(0.05, 2) is None
    assert pairs_text(0.05, 4) == ("3 pairs against the baseline: each tested at alpha 0.05/3 "
                                   "= 0.0167 (Bonferroni over the pairs, Holm over each "
                                   "pair's cells)")


def test_a_three_arm_experiment_tests_each_pair_at_half_alpha() -> None:
    scenario, _ = load_scenario("h200-chunked-prefill")  # off / on at 512, 2048, 8192
    design = sequential_design(scenario)
    assert design is not None
    arms = len(scenario.variants)
    assert arms == 4 and design.alpha == pytest.approx(scenario.compare.alpha / 3)
    two, _ = load_scenario("h200-eager-ab")
    two_design = sequential_design(two)
    assert two_design is not None and two_design.alpha == two.compare.alpha


def test_family_wise_rate_over_pairs_stays_at_alpha() -> None:
    """A/A with 4 arms, 6 trials each, 2 cells, Welch on logs: any false "changed" over the 3
    pairs happens in ~13% of experiments at 0.05 a pair and at most ~5% at 0.05/3."""
    rng = np.random.default_rng(7)
    experiments, arms, trials = 1500, 4, 6
    naive = corrected = 0
    for _ in range(experiments):
        values = rng.lognormal(0.0, 0.1, (arms, 2, trials))
        found = {0.05: False, per_pair_alpha(0.05, arms): False}
        for alpha in found:
            for arm in range(1, arms):
                family = with_holm([compare_trials(values[0, c], values[arm, c], alpha=alpha,
                                                   test="welch-log") for c in range(2)])
                found[alpha] |= any(r.significant for r in family)
        naive += found[0.05]
        corrected += found[per_pair_alpha(0.05, arms)]
    assert naive / experiments > 0.08
    assert corrected / experiments <= 0.05 + 0.011  # binomial 95% half-width at 1,500
