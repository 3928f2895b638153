"""vLLM's command line in front of the known-timing stand-in, for launch-mode fault tests (a
test instrument, like the stand-in itself): the suite launches it through `server.command`
exactly as it launches `vllm serve`.

    python tests/support/fake_vllm.py serve MODEL --served-model-name NAME --port PORT [...]

FAKE_VLLM_MODE in the environment picks the behaviour: `exit_after:N` (serve, then exit with
code 1 once N requests have finished, as the stand-in's /metrics counts them: the server dying
mid-run, however long the client took to start), `never_ready` (print start-up lines, never
listen), `port_taken` (fail the way vLLM does when its port is in use). FAKE_VLLM_TTFT and
FAKE_VLLM_ITL (seconds; default 0.05 and 0.01) set the stand-in's timings, so that variants
differ by `server.env`. `--max-num-seqs N` becomes the stand-in's `--max-concurrency N` (its
FIFO's slots: a capacity that moves with the flag, as vLLM's does). Other vLLM flags are
ignored.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from vllm_slo.servers.metrics_scrape import scrape


def _requests_finished(port: str) -> float:
    """`vllm:request_success_total` summed over its labels, as the suite's own scraper parses
    /metrics; 0 while nothing answers."""
    values = scrape(f"http://127.0.0.1:{port}", timeout_s=2.0) or {}
    return sum(value for key, value in values.items()
               if key.startswith("vllm:request_success_total"))


def main(argv: list[str]) -> int:
    port = argv[argv.index("--port") + 1]
    name = argv[argv.index("--served-model-name") + 1]
    mode = os.environ.get("FAKE_VLLM_MODE", "")
    print(f"INFO fake vLLM: serve {name} on port {port} ({mode})", flush=True)
    if mode == "never_ready":
        time.sleep(3600)
        return 0
    if mode == "port_taken":
        print(f"ERROR [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
              "address already in use", flush=True)
        return 1
    slots = (["--max-concurrency", argv[argv.index("--max-num-seqs") + 1]]
             if "--max-num-seqs" in argv else [])
    standin = subprocess.Popen([sys.executable, "-m", "vllm_slo.servers.standin", "--port",
                                port, "--model", name,
                                "--ttft", os.environ.get("FAKE_VLLM_TTFT", "0.05"),
                                "--itl", os.environ.get("FAKE_VLLM_ITL", "0.01"), *slots])
    if mode.startswith("exit_after:"):
        finished = int(mode.split(":", 1)[1])
        while _requests_finished(port) < finished and standin.poll() is None:
            time.sleep(0.2)
        standin.kill()
        standin.wait()
        print("ERROR fake vLLM: engine core died", flush=True)
        return 1
    return standin.wait()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
