"""`profile: mix`: each conversation from one of `traffic.mix`'s profiles (those registered
with conversations: chat, long-doc), dealt by weight (`dealing.Dealer`: conversations 0..n-1
hold each part within one conversation of its weight's share, for every n); every request keeps
its profile's name (`PlannedRequest.profile`, the rows' `profile` column)."""

from __future__ import annotations

from vllm_slo.loadtests.dealing import Dealer
from vllm_slo.loadtests.plan_fitting import Candidate, Tally, generate_until
from vllm_slo.loadtests.profiles.base import PROFILES, Conversations, Profile
from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.traffic_spec import TrafficSpec


def plan(traffic: TrafficSpec, seed: int, counter: TokenCounter, max_model_len: int | None,
         policy: str, n_requests: int, tally: Tally) -> list[Candidate]:
    """Conversation c is dealt to one profile by `traffic.mix`'s weights (the c-th name of
    their dealing, the same at every seed) and is then that profile's conversation c: the chat
    turns of a mix are those of the chat profile alone at the same seed. A conversation the
    overlong policy rejects whole still takes its turn in the dealing (counted and warned)."""
    words = WordTexts(counter)
    makers: dict[str, Conversations] = {}  # keyed as traffic.mix
    turns: dict[str, int] = {}
    weights: list[float] = []
    for name, weight in traffic.mix.items():
        part = PROFILES[name]
        if part.conversations is None:  # pragma: no cover - the scenario model refuses it
            raise ValueError(f"profile {name!r} cannot be part of a mix")
        makers[name] = part.conversations(traffic, seed, counter, words, max_model_len, tally)
        turns[name] = part.turns(traffic)
        weights.append(weight)
    names = list(makers)
    dealer = Dealer(traffic.mix)

    def conversation(c: int) -> list[Candidate]:
        return makers[dealer.name(c)](c)

    # batches sized for the mean turns per conversation (batching never changes a plan)
    mean_turns = sum(w * turns[n] for n, w in zip(names, weights, strict=True)) / sum(weights)
    return generate_until(conversation, max(1, round(mean_turns)), counter, words,
                          max_model_len, policy, n_requests, tally)


# as fast as its fastest part can be (a chat turn)
PROFILE = Profile("mix", plan, fastest_request_s=0.05)
