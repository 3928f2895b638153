"""``python -m vllm_slo.servers.standin``: serve until SIGTERM/SIGINT; prints
``STANDIN READY http://127.0.0.1:PORT`` once listening."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vllm_slo.servers.standin.app import StandinApp
from vllm_slo.servers.standin.config import HOST, RequestRecord, StandinConfig
from vllm_slo.servers.standin.faults import FAULT_KINDS, MIXED

READY_PREFIX = "STANDIN READY "


def build_parser() -> argparse.ArgumentParser:
    d = StandinConfig()
    p = argparse.ArgumentParser(
        prog="python -m vllm_slo.servers.standin",
        description="Known-timing stand-in for vLLM's OpenAI server (a test instrument). "
        f"Listens on {HOST} only; prints '{READY_PREFIX}URL' when ready; stops on SIGTERM/SIGINT.",
    )
    p.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one (default)")
    p.add_argument("--model", default=d.model, help=f"served model name (default {d.model})")
    p.add_argument("--max-model-len", type=int, default=d.max_model_len)
    p.add_argument("--ttft", type=float, default=d.ttft_s, help="seconds to first content chunk")
    p.add_argument("--itl", type=float, default=d.itl_s, help="seconds between tokens")
    p.add_argument(
        "--role-delay", type=float, default=d.role_delay_s, help="seconds to the chat role chunk"
    )
    p.add_argument("--jitter", type=float, default=d.jitter_s, help="uniform [0, J] s per token")
    p.add_argument(
        "--max-concurrency", type=int, default=0, help="requests served at once; 0: unlimited"
    )
    p.add_argument("--tokens-per-chunk", type=int, default=d.tokens_per_chunk)
    p.add_argument("--chunk-pattern", default="",
                   help="tokens of each chunk in turn, comma-separated (e.g. 1,3,2)")
    p.add_argument("--reasoning-tokens", type=int, default=d.reasoning_tokens,
                   help="chat: the first N tokens of each answer are sent as reasoning")
    p.add_argument("--reasoning-field", default=d.reasoning_field,
                   choices=("reasoning", "reasoning_content"))
    p.add_argument("--default-max-tokens", type=int, default=d.default_max_tokens)
    p.add_argument("--fault", choices=(*FAULT_KINDS, MIXED), default=None,
                   help=f"inject this fault ({MIXED}: every kind in turn)")
    p.add_argument(
        "--fault-rate", type=float, default=d.fault_rate, help="share of requests with --fault"
    )
    p.add_argument("--seed", type=int, default=d.seed, help="seed for faults and jitter")
    p.add_argument(
        "--retry-after", default=d.retry_after, metavar="VALUE",
        help=f"the Retry-After header sent with http_429 and http_503 (default {d.retry_after!r};"
        " 'none' sends none)",
    )
    p.add_argument(
        "--reuse-port", action="store_true",
        help="share --port with other stand-in processes (SO_REUSEPORT; give a fixed port)",
    )
    p.add_argument(
        "--record", default=None, metavar="FILE",
        help="append one JSON line per completion request: what was really sent and when "
        "(time.monotonic() seconds, the clock perf_counter reads on Linux) — the truth a "
        "client's measurement is checked against",
    )
    return p


def read_record_log(path: str | Path) -> dict[str, dict[str, Any]]:
    """A `--record` log read back, keyed by the client's own request id (the X-Request-Id it
    sent; the stand-in prefixes it with ``cmpl-`` / ``chatcmpl-``, as vLLM does). Requests
    sent without one are keyed by the stand-in's random id."""
    served: dict[str, dict[str, Any]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            served[entry["request_id"].split("-", 1)[1]] = entry
    return served


class RecordLog:
    """The stand-in's send log: a JSON line per completion request, buffered, written at exit
    and whenever 256 records have gathered (so a long run does not grow in memory)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115  (closed in close())
        self._pending: list[str] = []

    def add(self, record: RequestRecord) -> None:
        self._pending.append(json.dumps(dataclasses.asdict(record), separators=(",", ":")))
        if len(self._pending) >= 256:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._file.write("\n".join(self._pending) + "\n")
            self._file.flush()
            self._pending = []

    def close(self) -> None:
        self.flush()
        self._file.close()


def config_from_args(args: argparse.Namespace) -> StandinConfig:
    return StandinConfig(
        model=args.model,
        max_model_len=args.max_model_len,
        ttft_s=args.ttft,
        itl_s=args.itl,
        role_delay_s=args.role_delay,
        jitter_s=args.jitter,
        max_concurrency=args.max_concurrency or None,
        tokens_per_chunk=args.tokens_per_chunk,
        chunk_pattern=tuple(int(k) for k in args.chunk_pattern.split(",") if k.strip()),
        reasoning_tokens=args.reasoning_tokens,
        reasoning_field=args.reasoning_field,
        default_max_tokens=args.default_max_tokens,
        fault_kind=args.fault,
        fault_rate=args.fault_rate,
        seed=args.seed,
        retry_after=None if args.retry_after.lower() == "none" else args.retry_after,
    )


async def _serve_forever(config: StandinConfig, port: int, log: RecordLog | None,
                         reuse_port: bool = False) -> int:
    app = StandinApp(config, on_record=log.add if log is not None else None)
    try:
        bound = await app.start(port, reuse_port)
    except OSError as exc:
        print(f"standin: error: cannot listen on {HOST}:{port}: {exc}", file=sys.stderr)
        return 1
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"{READY_PREFIX}http://{HOST}:{bound}", flush=True)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await app.aclose()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        print(f"standin: error: {exc}", file=sys.stderr)
        return 2
    log = RecordLog(args.record) if args.record else None
    try:
        return asyncio.run(_serve_forever(config, args.port, log, args.reuse_port))
    finally:
        if log is not None:
            log.close()
