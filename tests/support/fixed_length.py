"""A traffic profile added in this one module, as a contributor or a plugin adds one:
`fixed-length`, vLLM bench's random-dataset shape — every conversation one user turn of
exactly `input_tokens` tokens (seeded words) asking for `output_tokens`. Importing the module
registers its spec (the settings `traffic.fixed-length` the scenario model validates) and its
generator (what `build_plan` runs); it is mixable, so a `mix` may draw from it too.
tests/unit/test_registered_profile.py imports it and unregisters it afterwards."""

from __future__ import annotations

import random

from pydantic import Field

from vllm_slo.loadtests.plan_fitting import Candidate, Message, Tally
from vllm_slo.loadtests.profiles import Profile, register_profile
from vllm_slo.loadtests.profiles.base import Conversations, conversation_plan
from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.model_base import Frozen
from vllm_slo.scenarios.profile_specs import ProfileSpec, register_profile_spec
from vllm_slo.scenarios.traffic_spec import TrafficSpec

NAME = "fixed-length"


class FixedLengthSpec(Frozen):
    """One turn per conversation: a prompt of `input_tokens`, `output_tokens` asked for."""

    input_tokens: int = Field(128, ge=1)
    output_tokens: int = Field(32, ge=1)


def conversations(traffic: TrafficSpec, seed: int, counter: TokenCounter, words: WordTexts,
                  max_model_len: int | None, tally: Tally) -> Conversations:
    spec = traffic.settings(FixedLengthSpec)

    def conversation(c: int) -> list[Candidate]:
        rng = random.Random(f"{seed}:{NAME}:{c}")
        prompt = Message("user", words.text(rng, spec.input_tokens), target=spec.input_tokens,
                         generated=True)
        return [Candidate(c, 0, [prompt], spec.output_tokens, NAME)]

    return conversation


plan = conversation_plan(conversations)
SPEC = register_profile_spec(ProfileSpec(NAME, FixedLengthSpec, mixable=True))
PROFILE = register_profile(Profile(NAME, plan, fastest_request_s=0.05,
                                   conversations=conversations))
