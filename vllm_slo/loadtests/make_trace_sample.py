"""Generate the shipped Mooncake-format trace sample (`loadtests/data/trace_sample.jsonl`).

No public trace can be downloaded here, so the default `trace` traffic replays this generated
file: Mooncake's layout (one JSON object a line: `timestamp` in ms, `input_length`,
`output_length`, `hash_ids` of 512-token blocks), 60 s of bursty arrivals (gamma gaps, shape
0.5: burstier than Poisson) at about 2 requests per second, sized for the tiny model on a CPU.
Prefix reuse as in Mooncake's conversation traces: each request opens with one of a few shared
"system prompts" (1 block) and, half the time, a shared document (1 or 2 blocks) of that
prompt, then blocks of its own; the last block is partial. The output is a pure function of
the seed.

    python -m vllm_slo.loadtests.make_trace_sample [OUT.jsonl]
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

from vllm_slo.resources import user_folder

DEFAULT_OUT = user_folder("loadtests") / "data" / "trace_sample.jsonl"
SEED = 20241206
DURATION_MS = 60_000
RATE_PER_S = 2.0
BURSTINESS = 0.5  # gamma shape of the gaps
BLOCK_TOKENS = 512
SYSTEM_PROMPTS = 4
DOCUMENTS_PER_PROMPT = 3


def records(seed: int = SEED) -> list[dict[str, object]]:
    rng = random.Random(seed)
    next_id = 0

    def new_block() -> int:
        nonlocal next_id
        next_id += 1
        return next_id - 1

    systems = [new_block() for _ in range(SYSTEM_PROMPTS)]
    documents = [[[new_block() for _ in range(rng.randint(1, 2))]
                  for _ in range(DOCUMENTS_PER_PROMPT)] for _ in range(SYSTEM_PROMPTS)]
    out: list[dict[str, object]] = []
    time_ms = 0.0
    while True:
        time_ms += 1000.0 * rng.gammavariate(BURSTINESS, 1.0 / (RATE_PER_S * BURSTINESS))
        if time_ms >= DURATION_MS:
            return out
        which = rng.randrange(SYSTEM_PROMPTS)
        shared = [systems[which]]
        if rng.random() < 0.5:
            shared += rng.choice(documents[which])
        own_tokens = rng.randint(40, 700)
        input_length = len(shared) * BLOCK_TOKENS + own_tokens
        own_blocks = math.ceil(own_tokens / BLOCK_TOKENS)
        out.append({"timestamp": int(time_ms), "input_length": input_length,
                    "output_length": rng.randint(4, 24),
                    "hash_ids": shared + [new_block() for _ in range(own_blocks)]})


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else DEFAULT_OUT
    path.write_text("".join(json.dumps(record) + "\n" for record in records()))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
