"""Deterministic prompt sources. Each source owns a seeded generator per conversation, so the
same seed gives the same user turns in every run and in every variant of an A/B."""

from __future__ import annotations

import random
from dataclasses import dataclass

from scenarios.model import ChatSpec

_VOCABULARY = (
    "the a of and to in is that for it as with on this are from at by an be have not or which "
    "server request latency token stream model batch queue cache prefix decode prefill budget "
    "throughput percentile tail schedule engine memory block page chunk answer question explain "
    "summarize compare describe list example reason step detail short long document paragraph "
    "report result value error retry timeout load user system assistant context window length "
    "gpu cpu kernel attention layer weight tensor vector matrix sample trial variant baseline"
).split()


def words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choice(_VOCABULARY) for _ in range(count))


@dataclass(frozen=True, slots=True)
class Turn:
    conversation_id: int
    turn: int
    messages: tuple[dict[str, str], ...]
    max_tokens: int


class ChatConversation:
    """One conversation: the shared system prompt, then user turns; answers are appended."""

    def __init__(self, spec: ChatSpec, system_prompt: str, seed: int, conversation_id: int):
        self.spec = spec
        self.conversation_id = conversation_id
        rng = random.Random(f"{seed}:chat:{conversation_id}")
        self.user_turns = tuple(
            words(rng, max(1, round(rng.uniform(0.5, 1.5) * spec.user_words)))
            for _ in range(spec.turns))
        self.history: list[dict[str, str]] = (
            [{"role": "system", "content": system_prompt}] if system_prompt else [])
        self.next_turn = 0

    @property
    def finished(self) -> bool:
        return self.next_turn >= len(self.user_turns)

    def next_request(self) -> Turn:
        self.history.append({"role": "user", "content": self.user_turns[self.next_turn]})
        turn = Turn(self.conversation_id, self.next_turn, tuple(self.history),
                    self.spec.max_tokens)
        self.next_turn += 1
        return turn

    def record_answer(self, text: str) -> None:
        self.history.append({"role": "assistant", "content": text})


class ChatSource:
    """Conversation k is a pure function of (seed, k); streams of ids never overlap between
    Locust processes (process i of n takes ids i, i+n, i+2n, ...)."""

    def __init__(self, spec: ChatSpec, seed: int, process_index: int = 0, process_count: int = 1):
        self.spec = spec
        self.seed = seed
        self.system_prompt = words(random.Random(f"{seed}:system"), spec.system_prompt_words)
        self._next_id = process_index
        self._stride = process_count

    def new_conversation(self) -> ChatConversation:
        conversation = ChatConversation(self.spec, self.system_prompt, self.seed, self._next_id)
        self._next_id += self._stride
        return conversation


def flatten_for_completions(messages: tuple[dict[str, str], ...]) -> str:
    """The /v1/completions prompt for a chat history (plain role-tagged transcript)."""
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join([*lines, "assistant:"])
