"""`profile: long-doc`: one document (uniform length between min and max doc tokens) and an
instruction, one turn per conversation."""

from __future__ import annotations

import random

from vllm_slo.loadtests.plan_fitting import Candidate, Message, Tally
from vllm_slo.loadtests.profiles.base import Conversations, Profile, conversation_plan
from vllm_slo.loadtests.prompts import DOC_SEPARATOR, INSTRUCTIONS, WordTexts
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.profile_specs import LongDocSpec
from vllm_slo.scenarios.traffic_spec import TrafficSpec

LONG_DOC_MARGIN_TOKENS = 64  # default max_doc_tokens = max_model_len - output_tokens - this


def conversations(traffic: TrafficSpec, seed: int, counter: TokenCounter, words: WordTexts,
                  max_model_len: int | None, tally: Tally) -> Conversations:
    spec = traffic.settings(LongDocSpec)
    low, high = spec.min_doc_tokens, spec.max_doc_tokens
    if high is None:
        if max_model_len is None:
            raise ValueError("long-doc needs max_doc_tokens when the server's max-model-len is "
                             "unknown (set traffic.long-doc.max_doc_tokens)")
        high = max_model_len - spec.output_tokens - LONG_DOC_MARGIN_TOKENS
        if high < 1:
            raise ValueError(f"max-model-len {max_model_len} leaves no room for a document "
                             f"with output_tokens {spec.output_tokens}")
    if high < low:
        tally.warnings.append(
            f"long-doc: max_doc_tokens {high} is below min_doc_tokens {low}; every document "
            f"has {high} tokens")
        low = high
    suffixes = [DOC_SEPARATOR + text for text in INSTRUCTIONS]
    suffix_tokens = dict(zip(suffixes, counter.count_many(suffixes), strict=True))

    def conversation(c: int) -> list[Candidate]:
        rng = random.Random(f"{seed}:long-doc:{c}")
        doc_tokens = rng.randint(low, high)
        suffix = DOC_SEPARATOR + rng.choice(INSTRUCTIONS)
        document = Message("user", words.text(rng, doc_tokens), suffix,
                            target=doc_tokens + suffix_tokens[suffix], generated=True,
                            floor=suffix_tokens[suffix] + 1)
        return [Candidate(c, 0, [document], spec.output_tokens, "long-doc")]

    return conversation


# a long document's prefill and decode take far longer than a chat turn on any hardware
plan = conversation_plan(conversations)
PROFILE = Profile("long-doc", plan, fastest_request_s=0.5, conversations=conversations)
