"""Issue 23: adding a traffic profile is one module. tests/support/fixed_length.py registers
`fixed-length` (its settings spec in the bottom layer, its generator in loadtests) and nothing
else is edited: a scenario names it and configures `traffic.fixed-length`, with errors as
precise as a built-in profile's; a plan is built from it, closed loops are sized by its timing
fact, and a mix draws from it; unregistered, it is refused again."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

from vllm_slo.loadtests.plan import build_plan
from vllm_slo.loadtests.profiles import PROFILES, Profile, register_profile, unregister_profile
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.preflight import planned_request_count
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.profile_specs import PROFILE_SPECS, unregister_profile_spec

MODULE = "tests.support.fixed_length"
NAME = "fixed-length"


@pytest.fixture
def fixed_length() -> Iterator[ModuleType]:
    """The module imported afresh (its import registers the profile), unregistered after."""
    sys.modules.pop(MODULE, None)
    module = importlib.import_module(MODULE)
    try:
        yield module
    finally:
        unregister_profile(NAME)
        unregister_profile_spec(NAME)
        sys.modules.pop(MODULE, None)


def test_a_scenario_names_it_and_configures_its_section(fixed_length: ModuleType) -> None:
    scenario, _ = load_scenario("chat", [f"traffic.profile={NAME}",
                                         f"traffic.{NAME}.input_tokens=50"])
    settings = scenario.traffic.settings(fixed_length.FixedLengthSpec)
    assert (settings.input_tokens, settings.output_tokens) == (
        50, fixed_length.FixedLengthSpec().output_tokens)
    # the resolved scenario writes the section where the built-ins' are, and reads it again
    document = scenario.to_yaml_dict()
    assert document["traffic"][NAME] == {"input_tokens": 50,
                                         "output_tokens": settings.output_tokens}
    assert Scenario.model_validate(document) == scenario
    assert list(PROFILE_SPECS)[-1] == NAME and list(PROFILES)[-1] == NAME


@pytest.mark.parametrize(("override", "where", "message"), [
    (f"traffic.{NAME}.inputs=5", f"traffic.{NAME}.inputs = 5",
     "unknown key; allowed keys here: input_tokens, output_tokens"),
    (f"traffic.{NAME}.output_tokens=0", f"traffic.{NAME}.output_tokens = 0",
     "Input should be greater than or equal to 1"),
    ("traffic.profile=fixed", "traffic.profile = 'fixed'",
     f"Input should be 'chat', 'long-doc', 'sharegpt', 'mix', 'trace', 'agent' or '{NAME}'"),
    ("traffic.bogus=1", "traffic.bogus = 1",
     f"allowed keys here: chat, long-doc, sharegpt, trace, agent, {NAME}, profile"),
])
def test_its_errors_are_as_precise_as_a_built_ins(fixed_length: ModuleType, override: str,
                                                  where: str, message: str) -> None:
    with pytest.raises(ScenarioError) as raised:
        load_scenario("chat", [override])
    (line,) = str(raised.value).splitlines()[1:]  # one problem, located, with the override
    assert line.startswith(f"  {where} (from command-line override {override!r}): ")
    assert line.endswith(message) or f"{message}," in line, line


def test_a_plan_is_built_from_it(fixed_length: ModuleType, tiny_counter: TokenCounter) -> None:
    scenario, _ = load_scenario("chat", [f"traffic.profile={NAME}", "traffic.seed=5",
                                         f"traffic.{NAME}.input_tokens=40",
                                         f"traffic.{NAME}.output_tokens=6"])
    plan = build_plan(scenario.traffic, tiny_counter, 2048, 20)
    assert len(plan.requests) == 20 and plan.profile == NAME
    assert all((r.prompt_tokens, r.max_tokens, r.profile, len(r.messages)) == (40, 6, NAME, 1)
               for r in plan.requests)
    assert len({r.messages[0]["content"] for r in plan.requests}) == 20  # seeded, distinct
    assert build_plan(scenario.traffic, tiny_counter, 2048, 20).sha256 == plan.sha256
    # a closed loop is sized by the profile's own timing fact
    closed, _ = load_scenario("chat", [f"traffic.profile={NAME}", "traffic.duration=10s",
                                       "traffic.warmup=0s", "traffic.arrival={kind: closed, "
                                       "users: 4, spawn_rate: 4, think_time: 0s}"])
    assert planned_request_count(closed.traffic) == int(
        max(64, 4 * 10 / fixed_length.PROFILE.fastest_request_s))


def test_a_mix_draws_from_it(fixed_length: ModuleType, tiny_counter: TokenCounter) -> None:
    scenario, _ = load_scenario("chat", [
        "traffic.profile=mix", f"traffic.mix={{chat: 1, {NAME}: 1}}",
        f"traffic.{NAME}.input_tokens=30", "traffic.chat.turns=1",
        f'slo={{by_profile: {{{NAME}: {{ttft: ["p90 < 2s"]}}}}}}',
        f"compare.cells=[{NAME}:ttft.p50]"])
    assert [rule.cell for rule in scenario.slo.rules()] == [f"{NAME}:ttft.p90"]
    plan = build_plan(scenario.traffic, tiny_counter, 2048, 200)
    parts = {r.profile for r in plan.requests}
    assert parts == {"chat", NAME}
    assert all(r.prompt_tokens == 30 for r in plan.requests if r.profile == NAME)


def test_unregistered_it_is_refused_again(fixed_length: ModuleType) -> None:
    unregister_profile(NAME)
    unregister_profile_spec(NAME)
    with pytest.raises(ScenarioError, match="Input should be 'chat', 'long-doc', 'sharegpt', "
                                            "'mix', 'trace' or 'agent'"):
        load_scenario("chat", [f"traffic.profile={NAME}"])
    with pytest.raises(ScenarioError, match="unknown key"):
        load_scenario("chat", [f"traffic.{NAME}.input_tokens=5"])
    # a generator without its spec, and a built-in's removal, are refused
    with pytest.raises(ValueError, match="has no spec"):
        register_profile(Profile(NAME, fixed_length.plan, 0.05, fixed_length.conversations))
    with pytest.raises(ValueError, match="built-in"):
        unregister_profile("chat")
    with pytest.raises(ValueError, match="built-in"):
        unregister_profile_spec("chat")
