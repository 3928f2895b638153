"""Prompt material for the request plan (`plan.py`): texts of exact token lengths built
from a fixed word vocabulary, the long-doc instructions, the ShareGPT reader, and the flattening
of a chat history into a `/v1/completions` prompt.

Texts are built from " word" pieces (long ones mostly from a fixed pool of 12-piece phrases,
for speed). For byte-level BPE tokenizers (GPT-2, Llama 3, Qwen, the tiny model) and
SentencePiece ones a space-led piece tokenizes the same wherever it stands, so per-piece token
counts add up; they are measured once per tokenizer, texts are assembled to a target count, and
the plan then verifies every final string with the real tokenizer and fixes up any text that
misses (`WordTexts.adjust`). Changing the vocabulary or the phrase pool changes every plan.
"""

from __future__ import annotations

import functools
import json
import random
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from vllm_slo.loadtests.file_identity import file_identity
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.resources import user_folder

DEFAULT_SHAREGPT_PATH = user_folder("loadtests") / "data" / "sharegpt_sample.json"

_WORDS = (
    "the a an of and to in is that for it as with on this are from at by be have not or which "
    "was were has had can will would should could may might must do does did but if then than "
    "so because when while where what who how why all any each every some many more most few "
    "other new old first last next long short high low large small good best fast slow early "
    "late same different real simple clear open main full free own only also just very often "
    "server request latency token stream model batch queue cache prefix decode prefill budget "
    "throughput percentile tail schedule engine memory block page chunk answer question explain "
    "summarize compare describe list example reason step detail document paragraph section "
    "report result value error retry timeout load user system assistant context window length "
    "gpu cpu kernel attention layer weight tensor vector matrix sample trial variant baseline "
    "time day year week hour minute second people group team company market city country world "
    "work plan change test check measure build run start stop keep move turn show find give "
    "take make use need want know think look come go see say tell ask try call write read learn "
    "data file table record field line number point part case fact idea problem way issue "
    "service network disk node cluster region deploy config version release update policy rule "
    "price cost rate share growth risk demand supply order customer product sale market level "
    "water energy power light heat air food health care school student teacher book story "
    "history science theory method study analysis evidence effect cause source model design "
    "0 1 2 3 4 5 6 7 8 9 10 12 16 32 64 100 128 256 512 1024 2024"
).split()
_PUNCTUATED = tuple(f"{word}{mark}" for word in _WORDS[:120:3] for mark in (".", ","))
VOCABULARY: tuple[str, ...] = (*dict.fromkeys(_WORDS), *_PUNCTUATED)

SUMMARY_INSTRUCTIONS = (
    "Summarize the document above in one paragraph.",
    "Write a short summary of the document above, then list its three main points.",
    "Give the document above a title and a summary of five sentences.",
    "Summarize the document above for a reader who has two minutes.",
)
QUESTION_INSTRUCTIONS = (
    "Which words appear most often in the document above, and in which parts?",
    "What is the main topic of the document above? Answer with evidence from the text.",
    "List every mention of latency in the document above and explain each one.",
    "Which numbers does the document above mention, and what do they refer to?",
)
INSTRUCTIONS = SUMMARY_INSTRUCTIONS + QUESTION_INSTRUCTIONS
DOC_SEPARATOR = "\n\n"  # between a long document and its instruction


_PHRASE_WORDS = 12
_PHRASES = 1024


def _draw(rng: random.Random, items: Sequence[str], counts: Sequence[int], budget: int,
          parts: list[str]) -> int:
    """Append random items while their counts fit in `budget`; return what is left (less than
    the item that would have overshot)."""
    indices = range(len(items))
    mean = sum(counts) / len(counts)
    while budget > 0:
        drawn = rng.choices(indices, k=max(1, int(budget / mean)))
        totals = list(accumulate(map(counts.__getitem__, drawn)))
        fit = bisect_right(totals, budget)
        parts.extend(map(items.__getitem__, drawn[:fit]))
        if fit:
            budget -= totals[fit - 1]
        if fit < len(drawn):
            break
    return budget


class WordTexts:
    """Texts of a target token length for one tokenizer, from the word vocabulary."""

    def __init__(self, counter: TokenCounter) -> None:
        pieces = tuple(" " + word for word in VOCABULARY)
        counts = counter.count_many([*pieces, *VOCABULARY])
        self.pieces = pieces
        self.piece_counts = tuple(counts[: len(pieces)])
        first_counts = counts[len(pieces):]
        self.count_of = dict(zip(pieces, self.piece_counts, strict=True))
        self.fillers = tuple(p for p, n in zip(pieces, self.piece_counts, strict=True) if n == 1)
        self.openers = tuple(w for w, n in zip(VOCABULARY, first_counts, strict=True) if n == 1)
        if not self.fillers or not self.openers or min(self.piece_counts) < 1:
            raise ValueError(f"{counter.name}: no single-token words in the prompt vocabulary; "
                             "cannot build texts of exact token lengths with this tokenizer")
        # Long texts are drawn a phrase (_PHRASE_WORDS pieces) at a time: 12x fewer draws. The
        # phrase pool is fixed (part of the vocabulary), the choice among phrases is seeded.
        pool = random.Random("vllm-slo:phrases")
        drawn = [pool.choices(range(len(pieces)), k=_PHRASE_WORDS) for _ in range(_PHRASES)]
        self.phrases = tuple("".join(pieces[i] for i in phrase) for phrase in drawn)
        self.phrase_counts = tuple(sum(self.piece_counts[i] for i in phrase) for phrase in drawn)

    def text(self, rng: random.Random, n_tokens: int) -> str:
        """A text of (by the per-piece counts) exactly `n_tokens` tokens; "" for 0."""
        if n_tokens <= 0:
            return ""
        parts = [rng.choice(self.openers)]
        remaining = n_tokens - 1
        if remaining > 4 * _PHRASE_WORDS:
            remaining = _draw(rng, self.phrases, self.phrase_counts,
                              remaining - 2 * _PHRASE_WORDS, parts) + 2 * _PHRASE_WORDS
        remaining = _draw(rng, self.pieces, self.piece_counts, remaining, parts)
        parts.extend(rng.choices(self.fillers, k=remaining))  # close with 1-token pieces
        return "".join(parts)

    def adjust(self, body: str, have: int, want: int) -> str:
        """Correct a body measured at `have` tokens towards `want` (drop or add end pieces)."""
        if want > have:
            return body + self.fillers[0] * (want - have)
        removed = 0
        while removed < have - want:
            head, space, tail = body.rpartition(" ")
            if not space or not head:
                break
            removed += self.count_of.get(" " + tail, 1)
            body = head
        return body + self.fillers[0] * max(0, removed - (have - want))


# ---------------------------------------------------------------------------------- ShareGPT
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
         "bing": "assistant", "bard": "assistant", "assistant": "assistant", "model": "assistant",
         "system": "system"}


@dataclass(frozen=True, slots=True)
class ShareGptConversation:
    """One usable conversation: its turns as (role, text), roles in chat-API words."""

    turns: tuple[tuple[str, str], ...]


def load_sharegpt(path: str | Path) -> tuple[ShareGptConversation | str, ...]:
    """Read a ShareGPT-format JSON file: a list of {"id", "conversations": [{"from", "value"}]}.

    Returns one item per entry: the conversation, or a string saying why the entry is malformed.
    A file that cannot be read or is not such a list raises ValueError naming the file. The
    last file read is kept (by `file_identity`): the check before the server starts, the plan
    after it and every trial's plan parse it once while it stays unchanged."""
    file = Path(path).expanduser()
    return _parsed_sharegpt(file, file_identity(file))


@functools.lru_cache(maxsize=1)
def _parsed_sharegpt(file: Path, identity: tuple[int, ...]) -> tuple[ShareGptConversation | str,
                                                                     ...]:
    del identity  # a part of the key only
    try:
        with file.open("rb") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise ValueError(f"{file}: no such ShareGPT file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"{file}: cannot read the ShareGPT file ({error})") from error
    except json.JSONDecodeError as error:
        raise ValueError(f"{file}: not valid JSON ({error})") from error
    if not isinstance(data, list):
        raise ValueError(f"{file}: a ShareGPT file is a JSON list of "
                         f'{{"id", "conversations": [{{"from", "value"}}, ...]}} entries, '
                         f"got a JSON {type(data).__name__}")
    if not data:
        raise ValueError(f"{file}: the ShareGPT file holds no conversations")
    return tuple(_parse_entry(entry) for entry in data)


def _parse_entry(entry: object) -> ShareGptConversation | str:
    if not isinstance(entry, dict):
        return "entry is not an object"
    turns = entry.get("conversations")
    if not isinstance(turns, list):
        return "no 'conversations' list"
    parsed = []
    for turn in turns:
        if not isinstance(turn, dict):
            return "a turn is not an object"
        speaker, value = turn.get("from"), turn.get("value")
        if not isinstance(speaker, str) or not isinstance(value, str):
            return "a turn lacks a string 'from' or 'value'"
        role = ROLES.get(speaker.lower())
        if role is None:
            return f"unknown speaker {speaker!r}"
        parsed.append((role, value))
    if not any(role == "user" for role, _ in parsed):
        return "no human turn"
    return ShareGptConversation(tuple(parsed))


def flatten_for_completions(messages: Sequence[dict[str, str]]) -> str:
    """The /v1/completions prompt for a chat history (plain role-tagged transcript)."""
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join([*lines, "assistant:"])
