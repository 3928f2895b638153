"""What the check and the plan cost for a run over a data file, a request trace or a ShareGPT
file, and what the plan saves by taking the check's reading (`vllm_slo/loadtests/profiles/
trace.py` `replay`, `vllm_slo/loadtests/prompts.py` `load_sharegpt`).

    python benchmarks/data_read_cost.py [--trace-lines 200000] [--sharegpt-entries 100000]

Writes a Mooncake trace (records 1 ms apart, short prompts) and a ShareGPT file (two-turn
conversations) into a temporary folder and times, in one process and for each: the check
before the server starts (`check_traffic_inputs`: reads the file), the plan with the reading
forgotten (as before the plan took the check's), and the plan taking the check's reading.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from vllm_slo.loadtests import prompts
from vllm_slo.loadtests.plan import build_plan
from vllm_slo.loadtests.profiles import trace as trace_profile
from vllm_slo.preflight import check_traffic_inputs, planned_request_count
from vllm_slo.scenarios.traffic_spec import TrafficSpec

SHAREGPT_PLAN = 2_000  # requests: the plan's own work stays small beside the reading


class WordCounter:
    """One token a word (the tokenizer is not what is measured here)."""

    name = "words"

    def count_many(self, texts: list[str]) -> list[int]:
        return [len(text.split()) for text in texts]


def write_trace(path: Path, lines: int) -> None:
    with path.open("w") as handle:
        for i in range(lines):
            handle.write(json.dumps({"timestamp": i, "input_length": 24, "output_length": 8,
                                     "hash_ids": [i % 50]}) + "\n")


def write_sharegpt(path: Path, entries: int) -> None:
    question = " ".join(["what is the answer to this question"] * 12)
    answer = " ".join(["the answer is given here at length"] * 40)
    path.write_text(json.dumps([
        {"id": str(i), "conversations": [{"from": "human", "value": f"{i} {question}"},
                                         {"from": "gpt", "value": answer}]}
        for i in range(entries)]))


def timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def costs(traffic: TrafficSpec, n_requests: int, forget: Callable[[], None]) -> list[float]:
    """[check, plan reading again, plan taking the check's reading], seconds."""
    def plan() -> object:
        return build_plan(traffic, WordCounter(), None, n_requests)

    forget()
    check_s = timed(lambda: check_traffic_inputs(traffic))
    forget()
    plan_reading_s = timed(plan)
    forget()
    check_traffic_inputs(traffic)
    return [check_s, plan_reading_s, timed(plan)]


def report(what: str, seconds: list[float]) -> None:
    check_s, reading_s, taking_s = seconds
    print(what)
    print(f"  check (reads the file):              {check_s:6.2f} s")
    print(f"  plan, reading the file again:        {reading_s:6.2f} s")
    print(f"  plan, taking the check's reading:    {taking_s:6.2f} s")
    print(f"  check + plan: {check_s + reading_s:.2f} s -> {check_s + taking_s:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace-lines", type=int, default=200_000)
    parser.add_argument("--sharegpt-entries", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        trace_file = Path(folder) / "trace.jsonl"
        write_trace(trace_file, args.trace_lines)
        trace = TrafficSpec.model_validate({
            "profile": "trace", "arrival": {"kind": "trace"}, "warmup": "0s",
            "duration": f"{args.trace_lines / 1000 + 1:g}s",
            "trace": {"path": str(trace_file), "block_tokens": 16}})
        report(f"trace: {args.trace_lines:,} Mooncake lines, "
               f"{trace_file.stat().st_size / 1e6:.1f} MB",
               costs(trace, planned_request_count(trace),
                     trace_profile._read_replay.cache_clear))
        sharegpt_file = Path(folder) / "sharegpt.json"
        write_sharegpt(sharegpt_file, args.sharegpt_entries)
        sharegpt = TrafficSpec.model_validate({"profile": "sharegpt",
                                               "sharegpt": {"path": str(sharegpt_file)}})
        report(f"ShareGPT: {args.sharegpt_entries:,} conversations, "
               f"{sharegpt_file.stat().st_size / 1e6:.1f} MB, a plan of {SHAREGPT_PLAN:,}",
               costs(sharegpt, SHAREGPT_PLAN, prompts._parsed_sharegpt.cache_clear))


if __name__ == "__main__":
    main()
