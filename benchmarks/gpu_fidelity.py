#!/usr/bin/env python3
"""Fidelity on a real server: the suite and `vllm bench serve`, alternated on one running vLLM
server with matched traffic — the very same prompts (the suite's long-doc plan, ~512 tokens,
handed to vllm bench as a `custom` data set), 128 output tokens with ignore_eos, the same
sampling temperature (`--temperature`, greedy by default), the completions endpoint, a closed
loop of C streams — and both measured the same way from their per-request records:

- mean requests in flight (time-weighted over the steady window) against C;
- TTFT p50 / p99 and ITL p50 / p99 of the requests sent in the window;
- output tokens/s: tokens whose chunks arrived in the window, per second.

Window: for both clients the same rule, `--duration` seconds from `--warmup` after the
client's first send (cut short at its last send). The referee: vLLM's own
`vllm:generation_tokens_total`, scraped every 0.25 s through the whole session, over each
client's window. A closed loop of equal-length requests moves in waves (docs/gpu.md, session
6): a window of a few waves reads tokens/s by where its edges fall, so use windows of many
waves (`--duration 60` at C = 256) and read the server's column beside the clients'. The
suite runs with its defaults (`traffic.workers: auto`).

    python benchmarks/gpu_fidelity.py --url http://127.0.0.1:8000 --model tiny-llama \
        --tokenizer /tmp/model --concurrency 64 256 --rounds 3 \
        --bench-command "python3 -m vllm.entrypoints.cli.main"

Rounds are ABBA: odd rounds run the suite first, even rounds vllm bench first, so a server
whose speed drifts during the session favours neither client (`--warm-server` adds a discarded
suite run before round 1). Checks printed at the end (issue 14, item 5): suite in flight
>= 99% of C; suite ITL p99 <= 1.05 x bench's; suite TTFT p99 <= bench's; suite throughput
within 3% of bench's (medians over rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


@dataclass
class Measured:
    concurrency: int
    client: str
    round: int
    in_flight: float
    ttft_ms: tuple[float, float]
    itl_ms: tuple[float, float]
    output_tok_s: float
    requests: int
    failed: int
    window_s: float
    prompt_tokens_mean: float = float("nan")
    # the referee: vLLM's own generation_tokens_total over the same window, per second
    server_tok_s: float = float("nan")
    window: tuple[float, float] = (float("nan"), float("nan"))  # unix seconds


class ServerTokens:
    """vLLM's `vllm:generation_tokens_total`, scraped every `period_s` in a thread: what the
    server generated in any window, whichever client drove it (both are judged by it)."""

    def __init__(self, url: str, period_s: float = 0.25):
        self.url, self.period_s = url.rstrip("/") + "/metrics", period_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ServerTokens:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                text = urllib.request.urlopen(self.url, timeout=2).read().decode()
                total = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                            if line.startswith("vllm:generation_tokens_total"))
                self.samples.append((time.time(), total))
            except (OSError, ValueError):
                pass
            self._stop.wait(self.period_s)

    def rate(self, lo: float, hi: float) -> float:
        """Tokens per second generated in [lo, hi] (linear between scrapes); NaN without
        scrapes on both sides of the window."""
        if len(self.samples) < 2 or not self.samples[0][0] <= lo < hi <= self.samples[-1][0]:
            return float("nan")
        times, totals = np.array(self.samples).T
        return float((np.interp(hi, times, totals) - np.interp(lo, times, totals)) / (hi - lo))


def measure(concurrency: int, client: str, rnd: int, sends: np.ndarray, ends: np.ndarray,
            ttfts: list[float], chunk_times: list[np.ndarray], tokens: list[int],
            ok: np.ndarray, lo: float, hi: float) -> Measured:
    """Everything in one clock (seconds). `chunk_times[k]`: content-chunk arrivals of request
    k; a chunk carrying several tokens counts its share of the request's token count."""
    in_window = (sends >= lo) & (sends < hi)
    in_flight = float((np.clip(ends, lo, hi) - np.clip(sends, lo, hi)).sum() / (hi - lo))
    picked = np.flatnonzero(in_window & ok)
    ttft = np.array([ttfts[k] for k in picked]) * 1e3
    gaps = [np.diff(chunk_times[k]) for k in picked if chunk_times[k].size > 1]
    itl = np.concatenate(gaps) * 1e3 if gaps else np.empty(0)
    arrived = 0.0
    for k in np.flatnonzero(ok):
        times = chunk_times[k]
        if times.size:
            arrived += tokens[k] / times.size * int(((times >= lo) & (times < hi)).sum())

    def pair(values: np.ndarray) -> tuple[float, float]:
        if not values.size:
            return float("nan"), float("nan")
        return tuple(float(v) for v in np.percentile(values, [50, 99]))  # type: ignore

    return Measured(concurrency, client, rnd, in_flight, pair(ttft), pair(itl),
                    arrived / (hi - lo), int(in_window.sum()), int((in_window & ~ok).sum()),
                    hi - lo, window=(lo, hi))


def export_prompts(run_dir: Path, out: Path) -> Path:
    """The suite's request plan as a vllm bench `custom` data set: both clients then send the
    very same completions prompts (the suite's plan, flattened as the suite sends them)."""
    from vllm_slo.loadtests.plan import read_plan
    from vllm_slo.loadtests.prompts import flatten_for_completions

    plan = read_plan(run_dir / "requests.parquet")
    path = out / "prompts.jsonl"
    path.write_text("".join(
        json.dumps({"prompt": flatten_for_completions(list(r.messages))}) + "\n"
        for r in plan.requests))
    return path


def run_bench(args: argparse.Namespace, concurrency: int, prompts: int, out: Path,
              dataset: Path) -> Path:
    result = out / f"bench-c{concurrency}-{int(time.time())}.json"
    command = [*args.bench_command.split(), "bench", "serve", "--backend", "vllm",
               "--base-url", args.url, "--endpoint", "/v1/completions", "--model", args.model,
               "--tokenizer", str(args.tokenizer), "--dataset-name", "custom",
               "--dataset-path", str(dataset), "--skip-chat-template", "--custom-output-len",
               str(args.output_len), "--num-prompts", str(prompts), "--max-concurrency",
               str(concurrency), "--request-rate", "inf", "--ignore-eos", "--seed", "0",
               # bench sends no temperature unless told (the server's default, 1.0, samples);
               # the suite sends its own: greedy and sampled streams differ in chunks per
               # token (measured on the H200: 0.856 greedy, 0.914 sampled) and so in ITL
               "--temperature", f"{args.temperature:g}",
               "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(out),
               "--result-filename", result.name]
    with open(out / "bench.log", "a") as log:
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True, timeout=400,
                       cwd=out)
    return result


def bench_measured(args: argparse.Namespace, concurrency: int, rnd: int, path: Path
                   ) -> Measured:
    data = json.loads(path.read_text())
    n = len(data["ttfts"])
    sends = np.asarray(data["start_times"], dtype=float)
    ok = np.array([bool(t) and not (data.get("errors") or [""] * n)[k]
                   for k, t in enumerate(data["ttfts"])])
    chunks, ends = [], []
    for k in range(n):
        if ok[k]:
            times = sends[k] + data["ttfts"][k] + np.concatenate(
                [[0.0], np.cumsum(np.asarray(data["itls"][k], dtype=float))])
        else:
            times = np.empty(0)
        chunks.append(times)
        ends.append(sends[k] + (data["latencies"][k] if data.get("latencies") else
                                (times[-1] - sends[k] if times.size else 0.0)))
    lo = float(sends.min()) + args.warmup
    # the suite's window rule: `duration` seconds from `warmup` after the first send (bench's
    # own last send starts a closed-loop wave by construction: ending there biases tokens/s)
    hi = min(float(sends.max()), lo + args.duration)
    result = measure(concurrency, "vllm bench serve", rnd, sends, np.asarray(ends),
                     [t or 0.0 for t in data["ttfts"]], chunks, list(data["output_lens"]), ok,
                     lo, hi)
    result.prompt_tokens_mean = float(np.mean(data["input_lens"]))
    # bench stamps with time.perf_counter (CLOCK_MONOTONIC, one clock for every process on
    # Linux): the referee's scrapes are unix seconds
    offset_s = time.time() - time.perf_counter()
    result.window = (lo + offset_s, hi + offset_s)
    return result


def run_suite(args: argparse.Namespace, concurrency: int, out: Path,
              workers: str = "auto") -> Path:
    runs = out / "runs"
    before = set(runs.glob("*")) if runs.exists() else set()
    doc_tokens = args.input_len - 32  # the instruction around the document takes ~20-30
    command = [sys.executable, "-m", "vllm_slo", "--runs-dir", str(runs), "run",
               "scenario=long-doc", f"server.url={args.url}",
               f"server.served_model_name={args.model}", "traffic.endpoint=completions",
               f"traffic.tokenizer={args.tokenizer}", "traffic.prefix_cache=keep",
               # the whole arrival mapping: long-doc's own is open loop (a rate)
               f"traffic.arrival={{kind: closed, users: {concurrency}, "
               f"spawn_rate: {concurrency}, think_time: 0s}}",
               f"traffic.duration={args.duration}s", f"traffic.warmup={args.warmup}s",
               f"traffic.long-doc.min_doc_tokens={doc_tokens}",
               f"traffic.long-doc.max_doc_tokens={doc_tokens}",
               f"traffic.long-doc.output_tokens={args.output_len}", f"traffic.workers={workers}",
               f"traffic.temperature={args.temperature:g}",
               "slo={}"]
    with open(out / "suite.log", "a") as log:
        # in the output folder, where the run folders land
        subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=600, cwd=out)
    (made,) = set(runs.glob("*")) - before
    return made


def suite_measured(args: argparse.Namespace, concurrency: int, rnd: int, run_dir: Path
                   ) -> Measured:
    import pyarrow.parquet as pq

    rows = pq.read_table(run_dir / "samples.parquet").to_pylist()
    sends = np.array([r["intended_send_unix_s"] for r in rows])
    ends = sends + np.array([r["e2e_s"] or 0.0 for r in rows])
    ok = np.array([bool(r["ok"]) for r in rows])
    chunks = [sends[k] + np.asarray(r["chunk_offsets_s"] or [], dtype=float)
              for k, r in enumerate(rows)]
    measured_rows = [k for k, r in enumerate(rows) if r["phase"] == "measure"]
    lo = float(sends.min()) + args.warmup
    hi = min(float(sends[measured_rows].max()), lo + args.duration)
    summary = json.loads((run_dir / "summary.json").read_text())
    workers = json.loads((run_dir / "provenance.json").read_text()).get("locust_workers")
    result = measure(concurrency, f"suite ({workers} workers)", rnd, sends, ends,
                     [r["ttft_s"] or 0.0 for r in rows], chunks,
                     [r["output_tokens"] or 0 for r in rows], ok, lo, hi)
    result.prompt_tokens_mean = float(np.mean([r["prompt_tokens"] for r in rows
                                               if r["prompt_tokens"] is not None]))
    (run_dir / "fidelity.json").write_text(json.dumps({"measured": asdict(result),
                                                       "exit_code": summary.get("exit_code")}))
    return result


def table(results: list[Measured]) -> str:
    lines = ["| C | client | round | mean in flight | TTFT p50 / p99 ms | ITL p50 / p99 ms | "
             "output tok/s (client) | server generated tok/s | requests (failed) | "
             "prompt tokens (mean) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for m in results:
        lines.append(f"| {m.concurrency} | {m.client} | {m.round} | {m.in_flight:.1f} | "
                     f"{m.ttft_ms[0]:.0f} / {m.ttft_ms[1]:.0f} | {m.itl_ms[0]:.1f} / "
                     f"{m.itl_ms[1]:.1f} | {m.output_tok_s:,.0f} | {m.server_tok_s:,.0f} | "
                     f"{m.requests} ({m.failed}) | {m.prompt_tokens_mean:.0f} |")
    return "\n".join(lines)


def checks(results: list[Measured]) -> str:
    lines = ["", "Medians over rounds, suite vs vllm bench serve:"]
    for c in sorted({m.concurrency for m in results}):
        suite = [m for m in results if m.concurrency == c and m.client.startswith("suite")]
        bench = [m for m in results if m.concurrency == c and m.client == "vllm bench serve"]
        if not suite or not bench:
            continue

        def med(ms: list[Measured], f) -> float:
            return float(np.median([f(m) for m in ms]))

        held = med(suite, lambda m: m.in_flight) / c
        itl = med(suite, lambda m: m.itl_ms[1]) / med(bench, lambda m: m.itl_ms[1])
        ttft = med(suite, lambda m: m.ttft_ms[1]) / med(bench, lambda m: m.ttft_ms[1])
        tput = med(suite, lambda m: m.output_tok_s) / med(bench, lambda m: m.output_tok_s)
        server = med(suite, lambda m: m.server_tok_s) / med(bench, lambda m: m.server_tok_s)
        counted = {name: med(ms, lambda m: m.output_tok_s / m.server_tok_s)
                   for name, ms in (("suite", suite), ("bench", bench))}
        lines.append(
            f"- C={c}: in flight {held:.1%} of C ({'ok' if held >= 0.99 else 'MISSED'} >= 99%); "
            f"ITL p99 x{itl:.3f} ({'ok' if itl <= 1.05 else 'MISSED'} <= 1.05); "
            f"TTFT p99 x{ttft:.3f} ({'ok' if ttft <= 1.0 else 'MISSED'} <= 1); "
            f"throughput x{tput:.3f} ({'ok' if abs(tput - 1) <= 0.03 else 'MISSED'} within 3%); "
            f"the server generated x{server:.3f} as much under the suite; each client counted "
            f"{counted['suite']:.3f} (suite) and {counted['bench']:.3f} (bench) of what the "
            f"server generated in its window")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--tokenizer", type=Path, required=True)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--input-len", type=int, default=512)
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0,
                        help="sampling temperature both clients send (default 0: greedy, the "
                        "suite's default)")
    parser.add_argument("--bench-command", default="python3 -m vllm.entrypoints.cli.main")
    parser.add_argument("--out", type=Path, default=Path("runs/gpu-fidelity"))
    parser.add_argument("--sequence", nargs="+", default=None,
                        help="diagnostic: run these steps in order at the first concurrency, "
                        "e.g. suite:14 bench suite:4 (suite:N = traffic.workers N)")
    parser.add_argument("--warm-server", action="store_true",
                        help="one discarded suite run at each concurrency before round 1")
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    server = ServerTokens(args.url).start()
    try:
        return _run(args, server)
    finally:
        server.stop()


def _refereed(result: Measured, server: ServerTokens) -> Measured:
    time.sleep(0.5)  # a scrape after the window's end
    result.server_tok_s = server.rate(*result.window)
    return result


def _run(args: argparse.Namespace, server: ServerTokens) -> int:
    results: list[Measured] = []
    if args.sequence:  # a diagnostic order, e.g. suite:14 bench suite:4 (workers per suite run)
        c, prompts, dataset = args.concurrency[0], 0, None
        for rnd, step in enumerate(args.sequence, 1):
            if step.startswith("suite"):
                run_dir = run_suite(args, c, args.out, step.partition(":")[2] or "auto")
                result = _refereed(suite_measured(args, c, rnd, run_dir), server)
                dataset = export_prompts(run_dir, args.out)
                prompts = prompts or int(result.requests * (args.warmup + args.duration + 2)
                                         / max(result.window_s, 1e-9))
            else:
                assert dataset is not None, "a suite step must come first (it makes the prompts)"
                result = _refereed(bench_measured(args, c, rnd, run_bench(
                    args, c, prompts, args.out, dataset)), server)
            results.append(result)
            (args.out / "sequence.md").write_text(table(results) + "\n")
            print(table([result]).splitlines()[-1], flush=True)
        print(table(results))
        return 0
    for c in args.concurrency:
        prompts, dataset = 0, None
        if args.warm_server:  # a discarded suite run: the server's first minute is slower
            run_suite(args, c, args.out)
        for rnd in range(1, args.rounds + 1):
            # ABBA: the client that goes first alternates, so a server that speeds up (or
            # slows down) over the session favours neither; bench replays round 1's prompts
            pair_results: list[Measured] = []
            for client in (("suite", "bench") if rnd % 2 else ("bench", "suite")):
                if client == "suite":
                    run_dir = run_suite(args, c, args.out)
                    suite = _refereed(suite_measured(args, c, rnd, run_dir), server)
                    if not prompts:  # as many as the suite sent in the same time
                        prompts = int(suite.requests * (args.warmup + args.duration + 2)
                                      / max(suite.window_s, 1e-9))
                        dataset = export_prompts(run_dir, args.out)
                    pair_results.append(suite)
                else:
                    assert dataset is not None
                    pair_results.append(_refereed(bench_measured(
                        args, c, rnd, run_bench(args, c, prompts, args.out, dataset)), server))
            results += pair_results
            print(table(pair_results).splitlines()[-2:], flush=True)
            (args.out / "fidelity.md").write_text(table(results) + "\n")
    report = table(results) + "\n" + checks(results)
    print(report)
    (args.out / "fidelity.md").write_text(f"host: {os.cpu_count()} cores\n\n{report}\n")
    (args.out / "fidelity.json").write_text(json.dumps([asdict(m) for m in results], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
