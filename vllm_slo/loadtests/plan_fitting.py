"""Fitting a request plan's candidates into the model's context: token counting in batches,
trimming a message to a token budget, the overlong policy (trim or reject, counted) and the
generate-until-enough loop the profiles share (`loadtests.plan` builds plans with these)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter

FIX_ROUNDS = 4
TRIM_ROUNDS = 60
MIN_BATCH = 16  # conversations generated per round at least
GIVE_UP_AFTER = 1000  # consecutive rejected requests before concluding nothing fits


class Message:
    """A message under construction: content = body + suffix; the body may be adjusted or
    trimmed, the suffix (a long-doc instruction) never is. Shared between the turns of one
    conversation, so each distinct message is counted once."""

    __slots__ = ("body", "floor", "generated", "role", "suffix", "target", "tokens")

    def __init__(self, role: str, body: str, suffix: str = "", target: int = -1,
                 generated: bool = False, floor: int = 1) -> None:
        self.role = role
        self.body = body
        self.suffix = suffix
        self.target = target  # wanted token count of the content (generated texts)
        self.generated = generated
        self.floor = floor  # fewest tokens trimming may leave
        self.tokens = -1

    @property
    def content(self) -> str:
        return self.body + self.suffix


class _TrimState(TypedDict):
    """One job of `trim_many`: the cut positions [lo, hi] searched and their token counts."""

    message: Message
    budget: int
    lo: int
    lo_tokens: int
    hi: int
    hi_tokens: int


@dataclass(slots=True)
class Candidate:
    conversation_id: int
    turn: int
    messages: list[Message]
    max_tokens: int
    profile: str = ""  # the profile that made it (a mix's component)
    arrival_s: float | None = None  # kind trace: its send time, from the start of traffic
    branch: int | None = None  # profile agent: its sub-agent (None: the parent chain)

    @property
    def prompt_tokens(self) -> int:
        return sum(message.tokens for message in self.messages)


@dataclass(slots=True)
class Tally:
    trimmed: int = 0
    rejected: int = 0
    filtered: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # a profile's own facts for provenance's plan record (profile trace: "trace")
    facts: dict[str, object] = field(default_factory=dict)


def count_tokens(messages: Sequence[Message], counter: TokenCounter,
           words: WordTexts | None = None) -> int:
    """Measure every message not yet counted; bring generated texts to their targets (a few
    rounds of one count_many call each). Returns how many generated texts still miss."""
    todo = list({id(m): m for m in messages if m.tokens < 0}.values())
    for round_ in range(FIX_ROUNDS + 1):
        if not todo:
            break
        for message, tokens in zip(todo, counter.count_many([m.content for m in todo]),
                                   strict=True):
            message.tokens = tokens
        todo = [m for m in todo if m.generated and m.tokens != m.target]
        if words is None or round_ == FIX_ROUNDS:
            break
        for message in todo:
            message.body = words.adjust(message.body, message.tokens, message.target)
    return len(todo)


def trim_many(jobs: list[tuple[Message, int]], counter: TokenCounter) -> list[Message]:
    """Shorten each message's body until its content has at most `budget` tokens, all jobs in
    lockstep (one count_many call per round): interpolation search over cut positions, snapped
    back to a space where one is near. Returns new messages; the originals stay untouched."""
    if not jobs:
        return []
    bare = counter.count_many([message.suffix for message, _ in jobs])  # body cut to nothing
    states: list[_TrimState] = [
        {"message": message, "budget": budget, "lo": 0, "lo_tokens": floor,
         "hi": len(message.body), "hi_tokens": message.tokens}
        for (message, budget), floor in zip(jobs, bare, strict=True)]
    for round_ in range(TRIM_ROUNDS):
        active = [s for s in states if s["hi"] - s["lo"] > 1 and s["lo_tokens"] < s["budget"]]
        if not active:
            break
        cuts = []
        for state in active:
            lo, hi = state["lo"], state["hi"]
            if round_ % 3 == 2:  # a bisection step now and then bounds the worst case
                guess = (lo + hi) // 2
            else:  # interpolation: token counts grow nearly linearly with characters
                span = max(1, state["hi_tokens"] - state["lo_tokens"])
                guess = lo + round((hi - lo) * (state["budget"] - state["lo_tokens"]) / span)
            guess = min(hi - 1, max(lo + 1, guess))
            space = state["message"].body.rfind(" ", lo + 1, guess + 1)
            cut = space if space > lo and guess - space < 24 else guess
            cuts.append(cut)
        texts = [s["message"].body[:cut] + s["message"].suffix for s, cut in zip(active, cuts,
                                                                                  strict=True)]
        for state, cut, tokens in zip(active, cuts, counter.count_many(texts), strict=True):
            if tokens <= state["budget"]:
                state["lo"], state["lo_tokens"] = cut, tokens
            else:
                state["hi"], state["hi_tokens"] = cut, tokens
    out = []
    for state in states:
        old = state["message"]
        new = Message(old.role, old.body[: state["lo"]], old.suffix, floor=old.floor)
        new.tokens = state["lo_tokens"]
        out.append(new)
    return out


def fit_to_context(candidates: list[Candidate], max_model_len: int | None, policy: str,
         counter: TokenCounter) -> list[Candidate | None]:
    """Apply the overlong policy: the fitting candidate (maybe trimmed), or None (rejected).
    Trimming takes tokens from the longest non-system messages first (the system prompt is
    shared by every conversation), never below a message's floor. The counts are taken later,
    in plan order, so a plan's counts cover exactly its own requests."""
    if max_model_len is None:
        return list(candidates)
    result: list[Candidate | None] = []
    jobs: list[tuple[Message, int]] = []
    where: list[tuple[Candidate, int]] = []
    for candidate in candidates:
        excess = candidate.prompt_tokens + candidate.max_tokens - max_model_len
        if excess <= 0:
            result.append(candidate)
            continue
        if policy == "reject":
            result.append(None)
            continue
        order = sorted(range(len(candidate.messages)), key=lambda i: (
            candidate.messages[i].role == "system", -candidate.messages[i].tokens, -i))
        cuts = []
        for i in order:
            message = candidate.messages[i]
            take = min(excess, max(0, message.tokens - message.floor))
            if take > 0:
                cuts.append((i, message.tokens - take))
                excess -= take
            if excess <= 0:
                break
        if excess > 0:  # cannot fit even trimmed to the floors (max_tokens too large)
            result.append(None)
            continue
        copy = Candidate(candidate.conversation_id, candidate.turn, list(candidate.messages),
                          candidate.max_tokens, branch=candidate.branch)
        for i, budget in cuts:
            jobs.append((copy.messages[i], budget))
            where.append((copy, i))
        result.append(copy)
    for (fitted, i), message in zip(where, trim_many(jobs, counter), strict=True):
        fitted.messages[i] = message
    return result


def accept_fitted(candidate: Candidate | None, original: Candidate, out: list[Candidate],
            tally: Tally) -> None:
    if candidate is None:
        tally.rejected += 1
        return
    if candidate is not original:
        tally.trimmed += 1
    out.append(candidate)


def generate_until(make: Callable[[int], list[Candidate]], per_conversation: int,
              counter: TokenCounter, words: WordTexts, max_model_len: int | None, policy: str,
              n_requests: int, tally: Tally) -> list[Candidate]:
    """Conversations 0, 1, ... from `make(c)`, in batches (one count_many call per round), until
    n_requests are accepted. Batching never changes a conversation, so plans are prefixes."""
    out: list[Candidate] = []
    conversation = 0
    fruitless = 0
    while len(out) < n_requests:
        wanted = max(MIN_BATCH, math.ceil((n_requests - len(out)) / per_conversation))
        batch = [candidate for c in range(conversation, conversation + wanted)
                 for candidate in make(c)]
        conversation += wanted
        missed = count_tokens([m for candidate in batch for m in candidate.messages], counter,
                              words)
        if missed:
            tally.warnings.append(
                f"{missed} generated texts missed their token target after {FIX_ROUNDS} "
                f"corrections ({counter.name} is not additive over words); their measured "
                "lengths are used")
        for fitted, candidate in zip(fit_to_context(batch, max_model_len, policy, counter), batch,
                                     strict=True):
            if len(out) >= n_requests:
                break
            accept_fitted(fitted, candidate, out, tally)
            fruitless = 0 if fitted is not None else fruitless + 1
        if fruitless >= GIVE_UP_AFTER:
            raise ValueError(
                f"{fruitless} requests in a row do not fit max-model-len {max_model_len} with "
                f"max_tokens {batch[-1].max_tokens}; lower the prompt/output lengths or raise "
                "max-model-len")
    return out
