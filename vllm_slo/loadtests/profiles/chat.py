"""`profile: chat`: one shared system prompt, user turns uniform in [0.5, 1.5] x user_tokens,
and for each earlier turn a fixed seeded stand-in answer of output_tokens tokens."""

from __future__ import annotations

import random

from vllm_slo.loadtests.plan_fitting import Candidate, Message, Tally
from vllm_slo.loadtests.profiles.base import Conversations, Profile, conversation_plan
from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.profile_specs import ChatSpec
from vllm_slo.scenarios.traffic_spec import TrafficSpec


def conversations(traffic: TrafficSpec, seed: int, counter: TokenCounter, words: WordTexts,
                  max_model_len: int | None, tally: Tally) -> Conversations:
    spec = traffic.settings(ChatSpec)
    shared: list[Message] = []
    if spec.system_prompt_tokens > 0:
        system_rng = random.Random(f"{seed}:chat:system")
        shared.append(Message("system", words.text(system_rng, spec.system_prompt_tokens),
                               target=spec.system_prompt_tokens, generated=True))

    def conversation(c: int) -> list[Candidate]:
        rng = random.Random(f"{seed}:chat:{c}")
        history = list(shared)
        turns = []
        for turn in range(spec.turns):
            target = max(1, round(rng.uniform(0.5, 1.5) * spec.user_tokens))
            history.append(Message("user", words.text(rng, target), target=target,
                                    generated=True))
            turns.append(Candidate(c, turn, list(history), spec.output_tokens, "chat"))
            if turn + 1 < spec.turns:  # the fixed stand-in for this turn's answer
                history.append(Message("assistant", words.text(rng, spec.output_tokens),
                                        target=spec.output_tokens, generated=True))
        return turns

    return conversation


def _turns(traffic: TrafficSpec) -> int:
    return traffic.settings(ChatSpec).turns


plan = conversation_plan(conversations, _turns)
PROFILE = Profile("chat", plan, fastest_request_s=0.05, conversations=conversations,
                  turns=_turns)
