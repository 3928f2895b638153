"""The traffic-profile registry (vllm_slo/loadtests/profiles/): one module per profile, each
owning its generator and its timing fact, and the scenario model naming the same profiles."""

from __future__ import annotations

import pytest

from vllm_slo.loadtests.plan import build_plan
from vllm_slo.loadtests.plan_fitting import Candidate, Tally
from vllm_slo.loadtests.profiles import PROFILES
from vllm_slo.loadtests.profiles.base import Profile
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.preflight import planned_request_count
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.profile_specs import PROFILE_SPECS, mixable_profiles
from vllm_slo.scenarios.traffic_spec import TrafficSpec


def test_the_generators_and_the_specs_name_the_same_profiles() -> None:
    """Every profile the scenario model accepts (its spec) has a generator, and only those."""
    assert list(PROFILES) == list(PROFILE_SPECS) == ["chat", "long-doc", "sharegpt", "mix",
                                                    "trace", "agent"]
    mixable = [name for name, profile in PROFILES.items() if profile.conversations is not None]
    assert mixable == list(mixable_profiles())
    assert all(PROFILES[name].fastest_request_s > 0 for name in PROFILES)
    sections = [name for name, spec in PROFILE_SPECS.items() if spec.settings is not None]
    assert list(TrafficSpec.registered_keys()) == sections
    assert all(key in TrafficSpec().model_dump(by_alias=True) for key in sections)


@pytest.mark.parametrize("profile", ["chat", "long-doc", "mix"])
def test_every_profile_sizes_a_closed_loop_plan(profile: str) -> None:
    """The timing fact lives with the profile: a closed-loop mix died with a KeyError when it
    sat in a dict of the runner's that nobody had extended."""
    overrides = [f"traffic.profile={profile}", "traffic.duration=10s", "traffic.warmup=0s",
                 "traffic.arrival={kind: closed, users: 4, spawn_rate: 4, think_time: 0s}"]
    if profile == "mix":
        overrides.append("traffic.mix={chat: 3, long-doc: 1}")
    scenario, _ = load_scenario("chat", overrides)
    expected = 4 * 10 / PROFILES[profile].fastest_request_s
    assert planned_request_count(scenario.traffic) == int(max(64, expected))


def test_a_profile_registered_in_one_module_makes_a_plan(tiny_counter: TokenCounter,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """What a new profile's module holds is all build_plan needs: its generator, by name."""

    def repeated_question(traffic: TrafficSpec, seed: int, counter: TokenCounter,
                          max_model_len: int | None, policy: str, n_requests: int,
                          tally: Tally) -> list[Candidate]:
        from vllm_slo.loadtests.plan_fitting import Message, count_tokens

        out = []
        for c in range(n_requests):
            message = Message("user", f"question {seed}-{c}")
            count_tokens([message], counter)
            out.append(Candidate(c, 0, [message], 8, "chat"))
        return out

    import vllm_slo.loadtests.plan as plan_module

    monkeypatch.setattr(plan_module, "PROFILES",
                        {**PROFILES, "chat": Profile("chat", repeated_question, 0.05)})
    plan = build_plan(TrafficSpec(seed=3), tiny_counter, None, 5)
    assert [r.messages[0]["content"] for r in plan.requests] == [
        f"question 3-{c}" for c in range(5)]
    assert all(r.max_tokens == 8 for r in plan.requests)
