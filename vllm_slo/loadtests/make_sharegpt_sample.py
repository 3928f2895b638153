"""Generate the shipped ShareGPT-format sample (`loadtests/data/sharegpt_sample.json`).

No real data set can be downloaded here, so the default `sharegpt` traffic replays this
generated file: the layout of the public `ShareGPT_V3_unfiltered_cleaned_split.json` (a JSON
list of {"id", "conversations": [{"from": "human"|"gpt"|"system"|..., "value"}]}), multi-turn
conversations with and without system turns, long-tailed turn lengths, code, lists and
non-ASCII text, and a few entries that the default filters drop or that are malformed. The
output is a pure function of the seed (one entry per line, so diffs stay readable).

    python -m loadtests.make_sharegpt_sample [OUT.json]
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

from vllm_slo.resources import user_folder

DEFAULT_OUT = user_folder("loadtests") / "data" / "sharegpt_sample.json"
N_CONVERSATIONS = 150
SEED = 20240611

_TOPICS = {
    "cooking": "recipe oven flour butter sugar salt pepper garlic onion sauce pan boil bake "
               "minutes taste dough cheese tomato rice bread soup spices",
    "travel": "flight hotel city museum train ticket beach mountain map visa luggage airport "
              "street market guide weather day week budget booking",
    "code": "function variable loop array object class method error exception return value "
            "list string integer module import test server request response database query",
    "finance": "budget savings interest rate loan mortgage stock bond fund tax income expense "
               "account bank credit debt invest market risk return",
    "health": "sleep exercise diet protein water stress heart muscle doctor symptom routine "
              "habit walk stretch calories energy rest recovery",
    "writing": "story character plot chapter dialogue scene draft edit paragraph sentence "
               "poem verse title theme voice reader tone ending",
}
_COMMON = ("the a of and to in is that for it as with on this are be can you your we "
           "will should would have not or but if so more most some also very just "
           "how what when why which first then next").split()
_OPENERS = ("Can you", "Please", "How do I", "What is the best way to", "Explain how to",
            "I need help to", "Write", "Could you", "Why does", "Give me")
_NON_ASCII = ("café", "naïve", "über", "résumé", "日本語", "中文", "Привет", "emoji 🙂",
              "São Paulo", "Zürich")
_CODE = '''```python
def {name}(items):
    total = 0
    for item in items:
        if item > {n}:
            total += item
    return total
```'''


def _sentence(rng: random.Random, topic: list[str], n_words: int) -> str:
    words = [rng.choice(topic) if rng.random() < 0.45 else rng.choice(_COMMON)
             for _ in range(n_words)]
    if rng.random() < 0.04:
        words[rng.randrange(len(words))] = rng.choice(_NON_ASCII)
    text = " ".join(words)
    return text[:1].upper() + text[1:] + rng.choice((".", ".", ".", "!", "?", ":"))


def _text(rng: random.Random, topic: list[str], n_words: int, opener: str = "") -> str:
    """About n_words words of sentences, with the odd list or code block."""
    parts, written = [], 0
    if opener:
        parts.append(opener)
    while written < n_words:
        roll = rng.random()
        if roll < 0.06 and n_words > 60:
            parts.append(_CODE.format(name=rng.choice(("total", "score", "pick")),
                                      n=rng.randint(1, 99)))
            written += 25
        elif roll < 0.14 and n_words > 30:
            items = [f"{k}. {_sentence(rng, topic, rng.randint(4, 10))}"
                     for k in range(1, rng.randint(3, 6))]
            parts.append("\n".join(items))
            written += 7 * len(items)
        else:
            length = min(rng.randint(6, 22), max(1, n_words - written))
            parts.append(_sentence(rng, topic, length))
            written += length
    joiner = rng.choice((" ", " ", "\n\n"))
    return joiner.join(parts).strip()


def _length(rng: random.Random, median: float, sigma: float, low: int, high: int) -> int:
    return int(min(high, max(low, round(rng.lognormvariate(math.log(median), sigma)))))


def _conversation(rng: random.Random, number: int) -> dict[str, Any]:
    topic = _TOPICS[rng.choice(sorted(_TOPICS))].split()
    turns = []
    if rng.random() < 0.2:
        turns.append({"from": "system", "value": _text(rng, topic, rng.randint(8, 40),
                                                        "You are a helpful assistant.")})
    assistant = "gpt" if rng.random() < 0.95 else rng.choice(("chatgpt", "bing", "bard"))
    for _ in range(min(6, 1 + int(rng.expovariate(0.7)))):
        human = _length(rng, 22, 1.0, 3, 200)
        turns.append({"from": "human",
                      "value": _text(rng, topic, human, rng.choice(_OPENERS))})
        reply = _length(rng, 60, 0.8, 8, 320)
        turns.append({"from": assistant, "value": _text(rng, topic, reply)})
    return {"id": f"sample_{number:04d}", "conversations": turns}


def _edge_cases(rng: random.Random) -> list[dict[str, Any]]:
    """Entries the default filters (prompt 4..1024, output >= 4, total <= 2048) or the reader
    drop, in known places."""
    topic = _TOPICS["code"].split()
    long_paste = _text(rng, topic, 1100, "Please review this log:")
    return [
        {"id": "edge_tiny_prompt", "conversations": [
            {"from": "human", "value": "hi"},
            {"from": "gpt", "value": _text(rng, topic, 40)}]},
        {"id": "edge_tiny_reply", "conversations": [
            {"from": "human", "value": _text(rng, topic, 30, "Is this right?")},
            {"from": "gpt", "value": "Yes."}]},
        {"id": "edge_long_prompt", "conversations": [
            {"from": "human", "value": long_paste},
            {"from": "gpt", "value": _text(rng, topic, 60)}]},
        {"id": "edge_long_total", "conversations": [
            {"from": "human", "value": _text(rng, topic, 300, "Write a long essay:")},
            {"from": "gpt", "value": _text(rng, topic, 1200)}]},
        {"id": "edge_no_reply", "conversations": [
            {"from": "human", "value": _text(rng, topic, 20, "First question:")},
            {"from": "gpt", "value": _text(rng, topic, 50)},
            {"from": "human", "value": _text(rng, topic, 20, "And a follow-up nobody answered:")}
        ]},
        {"id": "edge_empty", "conversations": []},
        {"id": "edge_missing_conversations"},
        {"id": "edge_null_value", "conversations": [
            {"from": "human", "value": None}, {"from": "gpt", "value": "No value above."}]},
        {"id": "edge_unknown_speaker", "conversations": [
            {"from": "narrator", "value": "Once upon a time."},
            {"from": "gpt", "value": "And then?"}]},
    ]


def generate(seed: int = SEED, n_conversations: int = N_CONVERSATIONS) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    entries = [_conversation(rng, number) for number in range(n_conversations - 9)]
    for entry in _edge_cases(rng):  # spread through the file, at seeded places
        entries.insert(rng.randrange(len(entries) + 1), entry)
    return entries


def render(entries: list[dict[str, Any]]) -> str:
    lines = ",\n".join(json.dumps(entry, ensure_ascii=False) for entry in entries)
    return f"[\n{lines}\n]\n"


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else DEFAULT_OUT
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(generate()), encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
