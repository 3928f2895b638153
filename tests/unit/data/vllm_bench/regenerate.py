"""Regenerate the committed `vllm bench serve` result files (real vLLM CPU outputs).

    .tox/vllm-cpu/bin/python tests/unit/data/vllm_bench/regenerate.py

Starts one vLLM CPU server with the tiny model (`--max-model-len 128`, so long prompts get a
real HTTP 400), runs vLLM's own `vllm bench serve --save-result --save-detailed` four times
against it, strips `generated_texts` (random text from random weights; the files stay small),
and stops the whole server process group. The commands are in COMMANDS below; each file's
`metadata` records which one made it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.servers.tiny_model import ensure_tiny_model
from vllm_slo.servers.vllm_server import launch_vllm

HERE = Path(__file__).resolve().parent
COMMON = ["--model", "tiny", "--dataset-name", "random", "--seed", "0", "--disable-tqdm",
          "--save-result", "--save-detailed"]
CHAT = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
        "--random-input-len", "64", "--random-output-len", "16", "--ignore-eos"]
COMMANDS = {
    # two trials of the same open-loop chat setting (Poisson, 8 req/s)
    "chat-rate8-trial1.json": [*CHAT, "--num-prompts", "60", "--request-rate", "8"],
    "chat-rate8-trial2.json": [*CHAT, "--num-prompts", "60", "--request-rate", "8"],
    # open loop above what 4 slots serve on two cores: most requests wait for a slot
    "chat-rate20-concurrency4-overload.json": [*CHAT, "--num-prompts", "40", "--request-rate",
                                               "20", "--max-concurrency", "4"],
    # completions, closed loop (rate inf, 4 in flight), mixed lengths: some prompts exceed
    # max-model-len (HTTP 400 Bad Request), some answers are 1 token long
    "completions-concurrency4-mixed.json": [
        "--backend", "vllm", "--endpoint", "/v1/completions", "--random-input-len", "90",
        "--random-output-len", "8", "--random-range-ratio", "0.9", "--num-prompts", "40",
        "--max-concurrency", "4", "--ignore-eos"],
}


def bench_serve(base_url: str, out: Path, flags: list[str]) -> Path:
    """Run vLLM's own `vllm bench serve` (through the suite's CLI shim) into `out`."""
    command = [sys.executable, "-m", "vllm_slo.servers.vllm_cli", "bench", "serve",
               "--base-url", base_url, "--tokenizer", str(ensure_tiny_model()), *COMMON, *flags,
               "--result-dir", str(out.parent),
               "--result-filename", out.name,
               "--metadata", f"command=vllm bench serve {' '.join([*COMMON, *flags])}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    subprocess.run(command, check=True, timeout=600, env=env)
    return out


def main() -> None:
    spec = ServerSpec(args={"max-model-len": 128})
    with tempfile.TemporaryDirectory() as scratch:
        started = time.monotonic()
        with launch_vllm(spec, "cpu", Path(scratch) / "server.log") as server:
            print(f"server ready after {time.monotonic() - started:.0f}s")
            for name, flags in COMMANDS.items():
                path = bench_serve(server.base_url, Path(scratch) / name, flags)
                result = json.loads(path.read_text())
                result.pop("generated_texts", None)
                (HERE / name).write_text(json.dumps(result) + "\n")
                print(f"wrote {HERE / name}: {path.stat().st_size} bytes before stripping")


if __name__ == "__main__":
    main()
