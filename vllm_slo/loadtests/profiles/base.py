"""What a traffic profile is to the suite: a name (`traffic.profile`), the generator of its
plan's requests, the timing fact that sizes a closed-loop plan, and — for the profiles a `mix`
can draw from — its conversations one at a time. Each profile is one module of this package
(chat.py, long_doc.py, sharegpt.py, mix.py); `profiles.PROFILES` registers them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from vllm_slo.loadtests.plan_fitting import Candidate, Tally
from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.model import TrafficSpec

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
    # (users x time / max(think time, this)); a plan that runs out cycles and says so
    fastest_request_s: float
    # a mix draws whole conversations from these profiles (None: not mixable), each with its
    # turns per conversation (to size the generator's batches)
    conversations: ConversationMaker | None = None
    turns: Callable[[TrafficSpec], int] = lambda traffic: 1
