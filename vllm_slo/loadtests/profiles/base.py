"""What a traffic profile is to the suite: a name (`traffic.profile`), the generator of its
plan's requests, the timing fact that sizes a closed-loop plan, and — for the profiles a `mix`
can draw from — its conversations one at a time. Each profile is one module of this package
(chat.py, long_doc.py, sharegpt.py, mix.py); `PROFILES` below is the registry, whose
`register_profile` checks the profile against its spec (`scenarios.profile_specs`: the
settings the scenario model validates)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

from vllm_slo.loadtests.plan_fitting import Candidate, Tally, generate_until
from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.profile_specs import PROFILE_SPECS
from vllm_slo.scenarios.registry import Registry
from vllm_slo.scenarios.traffic_spec import TrafficSpec

Conversations = Callable[[int], list[Candidate]]  # conversation c -> its turns
# (traffic, seed, counter, max_model_len, overlong policy, n_requests, tally) -> the requests
PlanMaker = Callable[[TrafficSpec, int, TokenCounter, int | None, str, int, Tally],
                     list[Candidate]]
# (traffic, seed, counter, words, max_model_len, tally) -> conversation c's turns, for a mix
ConversationMaker = Callable[[TrafficSpec, int, TokenCounter, WordTexts, int | None, Tally],
                             Conversations]


@dataclass(frozen=True, slots=True)
class Profile:
    name: str  # as `traffic.profile` names it
    plan: PlanMaker
    # a lower bound on one request's latency on any hardware, to size closed-loop plans
    # (users x streams_per_user x time / max(think time, this)); a plan that runs out cycles
    # and says so
    fastest_request_s: float
    # a mix draws whole conversations from these profiles (None: not mixable), each with its
    # turns per conversation (to size the generator's batches)
    conversations: ConversationMaker | None = None
    turns: Callable[[TrafficSpec], int] = lambda traffic: 1
    # the most requests one closed-loop user has in flight at once (an agent's sub-agents)
    streams_per_user: Callable[[TrafficSpec], int] = lambda traffic: 1


def conversation_plan(conversations: ConversationMaker,
                      turns: Callable[[TrafficSpec], int] = lambda traffic: 1) -> PlanMaker:
    """The plan of a profile made of conversations (chat, long-doc, a plugin's): its
    conversations generated until `n_requests` requests fit (`generate_until`), `turns` each."""
    def plan(traffic: TrafficSpec, seed: int, counter: TokenCounter, max_model_len: int | None,
             policy: str, n_requests: int, tally: Tally) -> list[Candidate]:
        words = WordTexts(counter)
        return generate_until(conversations(traffic, seed, counter, words, max_model_len, tally),
                              turns(traffic), counter, words, max_model_len, policy, n_requests,
                              tally)
    return plan


_GENERATORS: Registry[Profile] = Registry("traffic profile generator")
# every registered profile's generator, by name (a read-only view)
PROFILES: MappingProxyType[str, Profile] = _GENERATORS.view


def register_profile(profile: Profile, *, built_in: bool = False) -> Profile:
    """Adds a profile's generator; returns it. Its spec must be registered first (the scenario
    model validates `traffic.<name>` by it), and a mixable spec needs conversations."""
    spec = PROFILE_SPECS.get(profile.name)
    if spec is None:
        raise ValueError(f"traffic profile {profile.name!r} has no spec: register its settings "
                         "first (scenarios.profile_specs.register_profile_spec)")
    if spec.mixable != (profile.conversations is not None):
        raise ValueError(f"traffic profile {profile.name!r}: a mixable spec needs "
                         "conversations, and only a mixable one has them")
    if not profile.fastest_request_s > 0:
        raise ValueError(f"traffic profile {profile.name!r}: fastest_request_s must be > 0")
    return _GENERATORS.add(profile.name, profile, built_in=built_in)


def unregister_profile(name: str) -> None:
    """Removes a generator added by `register_profile` (tests that add one clean up)."""
    _GENERATORS.remove(name)
