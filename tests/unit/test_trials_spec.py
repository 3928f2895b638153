"""`trials:` in a scenario: a fixed count (an integer) or a sequential design
{min, max, budget}; both validated with one clear line, overrides reach into either form."""

from __future__ import annotations

import pytest

from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario, resolve_variants

AB = "chunked-prefill-ab"  # a shipped scenario with variants


def test_an_integer_is_a_fixed_count_and_echoes_as_one() -> None:
    scenario, _ = load_scenario(AB, ["trials=4"])
    assert (scenario.min_trials, scenario.max_trials) == (4, 4)
    assert not scenario.trials.sequential and scenario.trials.budget_s is None
    assert scenario.to_yaml_dict()["trials"] == 4


def test_a_mapping_is_a_sequential_design_with_a_budget() -> None:
    scenario, _ = load_scenario(AB, ["trials={min: 3, max: 10, budget: 15m}"])
    assert (scenario.min_trials, scenario.max_trials) == (3, 10)
    assert scenario.trials.sequential and scenario.trials.budget_s == 900.0
    assert scenario.to_yaml_dict()["trials"] == {"min": 3, "max": 10, "budget": 900.0}


def test_dotted_overrides_reach_into_an_integer_count() -> None:
    """`trials.max=8` on a file with `trials: N` makes it {min: N, max: 8}."""
    scenario, _ = load_scenario(AB, ["trials=3", "trials.max=8"])
    assert (scenario.min_trials, scenario.max_trials) == (3, 8)
    budget, _ = load_scenario(AB, ["trials=3", "trials.budget=20m"])
    assert (budget.min_trials, budget.max_trials, budget.trials.budget_s) == (3, 3, 1200.0)


def test_each_arm_is_one_trials_scenario() -> None:
    scenario, _ = load_scenario(AB, ["trials={min: 3, max: 10}"])
    arms = resolve_variants(scenario)
    assert len(arms) == 2
    assert all(arm.max_trials == 10 and not arm.trials.sequential for arm in arms.values())


@pytest.mark.parametrize(("override", "message"), [
    ("trials={min: 5, max: 3}", "trials.min = 5 is more than trials.max = 3"),
    ("trials={min: 1, max: 4}", "trials.min = 1: a comparison needs at least 2"),
    ("trials=0", "expected 1 to 1000 trials per variant, got 0"),
    ("trials=5000", "expected 1 to 1000 trials per variant, got 5000"),
    ("trials={min: 2, max: 2000}", "trials.max"),
    ("trials=abc", "expected a whole number of trials or {min: N, max: M"),
    ("trials=true", "expected a whole number of trials"),
    ("trials={max: 4}", "trials.min: Field required"),
    ("trials={min: 2, max: 4, budget: -1s}", "trials.budget"),
    ("trials={min: 2, max: 4, rounds: 3}", "trials.rounds"),
])
def test_bad_trials_are_named(override: str, message: str) -> None:
    with pytest.raises(ScenarioError) as error:
        load_scenario(AB, [override])
    assert message in str(error.value)
    assert "chunked-prefill-ab.yaml" in str(error.value)


def test_a_sequential_design_needs_variants() -> None:
    with pytest.raises(ScenarioError, match="it needs variants to compare"):
        load_scenario("chat", ["trials={min: 3, max: 10}"])
    fixed, _ = load_scenario("chat", ["trials=3"])  # a fixed count needs none
    assert fixed.max_trials == 3


def test_a_budget_is_not_for_a_tune() -> None:
    with pytest.raises(ScenarioError, match=r"trials\.budget is for experiments"):
        load_scenario("tune-cpu", ["trials.budget=10m"])


def test_compare_test_defaults_to_welch_on_logs() -> None:
    scenario, _ = load_scenario(AB)
    assert scenario.compare.test == "welch-log"
    ranks, _ = load_scenario(AB, ["compare.test=mann-whitney"])
    assert ranks.compare.test == "mann-whitney"
    with pytest.raises(ScenarioError, match=r"compare\.test"):
        load_scenario(AB, ["compare.test=t"])
