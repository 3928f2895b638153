#!/usr/bin/env python3
"""Is the load generator ever the bottleneck? Capacity and timing accuracy of three clients
against the known-timing stand-in, side by side in one run:

- `suite`: `vllm-slo run` (attach mode, closed loop, `traffic.workers` processes);
- `fasthttp`: a minimal Locust FastHttpUser SSE locustfile (benchmarks/fasthttp_locustfile.py);
- `vllm-bench`: `vllm bench serve --max-concurrency C` (the installed vLLM, CPU build here).

Each (concurrency, client) cell gets a fresh stand-in (TTFT 50 ms, one token every 20 ms, 256
tokens by default) that logs when it really wrote every chunk (`--record`); the stand-in and
the client run on different cores (taskset) and in sessions of their own. Truth is the
stand-in's send log: both use CLOCK_MONOTONIC (perf_counter on Linux), so a client's chunk
arrival minus the stand-in's write is the client's own delay.

Printed per cell, over a steady window (after `--warmup`, `--duration` long):
- tokens received in the window / ideal, ideal = C streams x 1/ITL (the issue's C x 50 tok/s)
  and, in brackets, the stand-in's own emission in the window / ideal (the instrument's share);
- mean requests in flight at the stand-in (time-weighted) against C;
- client CPU (all of its processes) in the window, as a fraction of one core;
- TTFT and ITL error p50 / p99: paired per request and per gap (client's TTFT minus the
  stand-in's receipt-to-first-chunk; client's gap minus the stand-in's gap) where the client
  sends X-Request-Id (suite, fasthttp); for vllm-bench, which sends none, the difference of
  quantiles (client's p50/p99 minus the stand-in's p50/p99 in the same run), marked `q`.

    python benchmarks/client_capacity.py --concurrency 64 256 1024 --clients suite fasthttp \
        vllm-bench --duration 20 --standin-cpus 0 --client-cpus 1
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vllm_slo.analysis.client_health import time_weighted_count
from vllm_slo.reports.json_lines import read_json_lines
from vllm_slo.transport.processes import stop_process_group

REPO = Path(__file__).resolve().parent.parent
CLIENTS = ("suite", "fasthttp", "vllm-bench")


@dataclass
class ClientRequest:
    """One request as a client saw it: monotonic seconds."""

    request_id: str | None
    send_s: float
    chunk_s: np.ndarray
    ok: bool


@dataclass
class Cell:
    concurrency: int
    client: str
    received_fraction: float = float("nan")
    emitted_fraction: float = float("nan")
    in_flight_mean: float = float("nan")
    cpu_mean: float = float("nan")
    cpu_max: float = float("nan")
    ttft_error_ms: tuple[float, float] = (float("nan"), float("nan"))
    itl_error_ms: tuple[float, float] = (float("nan"), float("nan"))
    paired: bool = True
    read_delay_ms: tuple[float, float] = (float("nan"), float("nan"))
    delivery_ms: tuple[float, float] = (float("nan"), float("nan"))
    requests: int = 0
    failed: int = 0
    traffic_start_s: float | None = None  # stand-in clock: the window starts warm-up later
    notes: list[str] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(cpus: str | None, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpus, *argv] if cpus and shutil.which("taskset") else argv


class CpuSampler:
    """CPU seconds of a process and all its descendants (the client's Locust master, workers,
    helpers), sampled twice a second from /proc."""

    def __init__(self, root_pid: int) -> None:
        self.root_pid = root_pid
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._seen: dict[int, float] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _total_s(self) -> float:
        tick = os.sysconf("SC_CLK_TCK")
        parent, cpu = {}, {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parent[int(entry)] = int(fields[1])  # after state: ppid; utime/stime are 14/15
            cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
        family = {self.root_pid}
        grew = True
        while grew:
            before = len(family)
            family |= {pid for pid, ppid in parent.items() if ppid in family}
            grew = len(family) > before
        for pid in family & cpu.keys():
            self._seen[pid] = cpu[pid]
        return sum(self._seen.values())  # exited processes keep their last reading

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self._total_s()))
            self._stop.wait(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def in_window(self, start_s: float, end_s: float) -> tuple[float, float]:
        """Mean CPU (cores) over the window and the busiest one-second step."""
        times = np.array([t for t, _ in self.samples])
        cpu = np.array([c for _, c in self.samples])
        inside = (times >= start_s) & (times <= end_s)
        if inside.sum() < 3:
            return float("nan"), float("nan")
        t, c = times[inside], cpu[inside]
        step = max(1, round(float(1.0 / np.median(np.diff(t)))))
        per_second = (c[step:] - c[:-step]) / (t[step:] - t[:-step])
        return float((c[-1] - c[0]) / (t[-1] - t[0])), float(per_second.max())


def start_standins(args: argparse.Namespace, folder: Path
                   ) -> tuple[list[subprocess.Popen], str, list[Path]]:
    """`--standin-processes` stand-ins sharing one port (SO_REUSEPORT), each with its own
    send log, all pinned to `--standin-cpus`."""
    port = free_port()
    processes, records = [], []
    for k in range(args.standin_processes):
        record = folder / f"standin-{k}.jsonl"
        record.unlink(missing_ok=True)
        argv = pinned(args.standin_cpus, [
            args.python, "-m", "vllm_slo.servers.standin", "--port", str(port),
            "--ttft", str(args.ttft), "--itl", str(args.itl),
            "--default-max-tokens", str(args.tokens), "--max-model-len", "4096",
            "--record", str(record), *(["--reuse-port"] if args.standin_processes > 1 else [])])
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=folder,
                                   start_new_session=True)  # in its own folder (its record)
        line = process.stdout.readline() if process.stdout else ""
        if "READY" not in line:
            raise RuntimeError(f"the stand-in did not start: {line!r}")
        processes.append(process)
        records.append(record)
    return processes, f"http://127.0.0.1:{port}", records


# -- the clients ----------------------------------------------------------------------------

def suite_command(args: argparse.Namespace, url: str, concurrency: int, folder: Path,
                  tokenizer: Path) -> list[str]:
    scenario = folder / "capacity.yaml"
    scenario.write_text(json.dumps({
        "name": f"capacity-{concurrency}",
        "server": {"url": url, "served_model_name": "standin"},
        "traffic": {
            "profile": "chat", "endpoint": "completions",
            "arrival": {"kind": "closed", "users": concurrency, "spawn_rate": concurrency,
                        "think_time": "0s"},
            "duration": f"{args.duration}s", "warmup": f"{args.warmup}s",
            "workers": args.workers, "tokenizer": str(tokenizer), "prefix_cache": "keep",
            "request_timeout": "120s",
            "chat": {"system_prompt_tokens": 32, "user_tokens": 16, "turns": 1,
                     "output_tokens": args.tokens}},
        "slo": {}}))
    return [args.python, "-m", "vllm_slo", "--runs-dir", str(folder / "runs"), "run",
            f"scenario={scenario}"]


def suite_requests(folder: Path, clock_offset_s: float) -> list[ClientRequest]:
    import pyarrow.parquet as pq

    runs = sorted((folder / "runs").glob("*/samples.parquet"))
    if not runs:
        return []
    table = pq.read_table(runs[-1]).to_pylist()
    out = []
    for row in table:
        send_s = row["intended_send_unix_s"] - clock_offset_s
        offsets = np.asarray(row["chunk_offsets_s"] or [], dtype=float)
        out.append(ClientRequest(row["request_id"], send_s, send_s + offsets, bool(row["ok"])))
    return out


def fasthttp_command(args: argparse.Namespace, url: str, concurrency: int, folder: Path
                     ) -> list[str]:
    run_s = args.warmup + args.duration + 2
    return [args.python, "-m", "locust", "-f", str(REPO / "benchmarks" / "fasthttp_locustfile.py"),
            "--headless", "--host", url, "-u", str(concurrency), "-r", str(concurrency),
            "-t", f"{run_s:g}s", "--stop-timeout", "30", "--only-summary", "--loglevel",
            "WARNING", *(["--processes", str(args.workers)] if args.workers > 1 else [])]


def fasthttp_requests(folder: Path) -> list[ClientRequest]:
    return [ClientRequest(row["id"], row["send"], np.asarray(row["chunks"], dtype=float),
                          row["ok"]) for row in read_json_lines(folder / "fasthttp.jsonl")]


def bench_command(args: argparse.Namespace, url: str, concurrency: int, folder: Path,
                  tokenizer: Path) -> list[str]:
    per_stream_s = args.ttft + (args.tokens - 1) * args.itl
    prompts = int(concurrency * ((args.warmup + args.duration) / per_stream_s + 1))
    vllm = (args.bench_command.split() if args.bench_command
            else [args.python, "-m", "vllm_slo.servers.vllm_cli"])
    return [*vllm, "bench", "serve",
            "--backend", "vllm", "--endpoint", "/v1/completions", "--base-url", url,
            "--model", "standin", "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--random-input-len", "32", "--random-output-len", str(args.tokens),
            "--num-prompts", str(prompts), "--max-concurrency", str(concurrency),
            "--request-rate", "inf", "--ignore-eos", "--seed", "0", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", str(folder),
            "--result-filename", "bench.json"]


def bench_requests(folder: Path) -> list[ClientRequest]:
    path = folder / "bench.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    out = []
    for k, ttft in enumerate(data.get("ttfts", [])):
        start = data["start_times"][k]
        error = (data.get("errors") or [""] * (k + 1))[k]
        if not ttft:
            out.append(ClientRequest(None, start, np.empty(0), False))
            continue
        gaps = np.asarray(data["itls"][k], dtype=float)
        chunks = start + ttft + np.concatenate([[0.0], np.cumsum(gaps)])
        out.append(ClientRequest(None, start, chunks, not error))
    return out


# -- analysis ---------------------------------------------------------------------------------

def quantiles_ms(values: list[float] | np.ndarray) -> tuple[float, float]:
    if len(values) == 0:
        return float("nan"), float("nan")
    p50, p99 = np.percentile(np.asarray(values) * 1e3, [50, 99])
    return float(p50), float(p99)


def traffic_start_s(receipts: list[float], concurrency: int) -> float:
    """When the load began: the first receipt from which half the C streams arrived within
    a second. Not the first receipt: a client's lone probe (the suite's readiness request,
    vllm bench's single test prompt) comes seconds before its traffic, and more so with more
    worker processes to start."""
    ordered = np.sort(np.asarray(receipts, dtype=float))
    wave = max(1, min(concurrency // 2, ordered.size - 1))
    for k in range(ordered.size - wave):
        if ordered[k + wave] - ordered[k] < 1.0:
            return float(ordered[k])
    return float(ordered[0])


def analyse(cell: Cell, args: argparse.Namespace, records: list[dict],
            requests: list[ClientRequest]) -> None:
    streams = [r for r in records if r["content_chunk_s"]]
    if not streams:
        cell.notes.append("the stand-in served nothing")
        return
    t0 = cell.traffic_start_s = traffic_start_s([r["receipt_s"] for r in streams],
                                                cell.concurrency)
    lo, hi = t0 + args.warmup, t0 + args.warmup + args.duration
    ideal = cell.concurrency / args.itl * (hi - lo)  # C streams x 1/ITL tokens per second
    emitted = sum(int(((np.asarray(r["content_chunk_s"]) >= lo) &
                       (np.asarray(r["content_chunk_s"]) < hi)).sum()) for r in streams)
    received = sum(int(((q.chunk_s >= lo) & (q.chunk_s < hi)).sum()) for q in requests if q.ok)
    cell.received_fraction = received / ideal
    cell.emitted_fraction = emitted / ideal
    in_flight = time_weighted_count(
        np.array([r["receipt_s"] for r in records]),
        np.array([r["last_chunk_s"] or r["receipt_s"] for r in records]), lo, hi)
    cell.in_flight_mean = in_flight.mean if in_flight is not None else float("nan")
    in_window = [q for q in requests if lo <= q.send_s < hi]
    cell.requests = len(in_window)
    cell.failed = sum(not q.ok for q in in_window)
    truth = {r["request_id"].split("-", 1)[1]: r for r in streams}
    paired = [(q, truth.get(q.request_id)) for q in in_window if q.ok and q.request_id]
    paired = [(q, r) for q, r in paired if r is not None]
    if paired:
        ttft_errors = [(q.chunk_s[0] - q.send_s) - (r["first_content_s"] - r["receipt_s"])
                       for q, r in paired]
        gap_errors = []
        for q, r in paired:
            server = np.asarray(r["content_chunk_s"])
            if server.size == q.chunk_s.size:
                gap_errors.append(np.diff(q.chunk_s) - np.diff(server))
            else:
                cell.notes.append(f"{r['request_id']}: {q.chunk_s.size} chunks read, "
                                  f"{server.size} sent")
        cell.ttft_error_ms = quantiles_ms(ttft_errors)
        cell.itl_error_ms = quantiles_ms(np.concatenate(gap_errors) if gap_errors else [])
        # where the error comes from: the request reaching the stand-in (its own read delay
        # included) and each chunk's wait between the stand-in's write and the client's stamp
        cell.delivery_ms = quantiles_ms([r["receipt_s"] - q.send_s for q, r in paired])
        cell.read_delay_ms = quantiles_ms(np.concatenate([
            q.chunk_s - np.asarray(r["content_chunk_s"]) for q, r in paired
            if len(r["content_chunk_s"]) == q.chunk_s.size]))
        return
    cell.paired = False  # no request ids: compare the distributions of the same window
    served = [r for r in streams if lo <= r["receipt_s"] < hi]
    true_ttft = quantiles_ms([r["first_content_s"] - r["receipt_s"] for r in served])
    true_itl = quantiles_ms(np.concatenate([np.diff(r["content_chunk_s"]) for r in served]))
    ok = [q for q in in_window if q.ok and q.chunk_s.size]
    ttft = quantiles_ms([q.chunk_s[0] - q.send_s for q in ok])
    itl = quantiles_ms(np.concatenate([np.diff(q.chunk_s) for q in ok]) if ok else [])
    cell.ttft_error_ms = (ttft[0] - true_ttft[0], ttft[1] - true_ttft[1])
    cell.itl_error_ms = (itl[0] - true_itl[0], itl[1] - true_itl[1])


def _parent_pid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def pin_forked_workers(root_pid: int, cpus: list[int], cell: Cell, wait_s: float = 60.0
                       ) -> threading.Thread:
    """Locust's `--processes N` forks its workers from the master: pin each forked worker
    (every thread of it) to its own CPU from `cpus`, round robin, as it appears; the master
    keeps the client's own CPUs (`--client-cpus`). Runs beside the client for `wait_s`."""

    def pin() -> None:
        pinned_pids: set[int] = set()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            tree = {root_pid}
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit() and _parent_pid(int(entry.name)) in tree:
                    tree.add(int(entry.name))
            # a forked worker: a locust process whose parent is a locust process
            for pid in sorted(tree - {root_pid} - pinned_pids):
                parent = _parent_pid(pid)
                try:
                    is_worker = parent in tree and b"locust" in Path(
                        f"/proc/{pid}/cmdline").read_bytes() and b"locust" in Path(
                        f"/proc/{parent}/cmdline").read_bytes()
                except OSError:
                    continue
                if not is_worker:
                    continue
                cpu = cpus[len(pinned_pids) % len(cpus)]
                for task in Path(f"/proc/{pid}/task").iterdir():
                    with contextlib.suppress(OSError):
                        os.sched_setaffinity(int(task.name), {cpu})
                pinned_pids.add(pid)
                cell.notes.append(f"worker {pid} pinned to CPU {cpu}")
            time.sleep(0.2)

    thread = threading.Thread(target=pin, daemon=True)
    thread.start()
    return thread


def run_cell(args: argparse.Namespace, concurrency: int, client: str, out: Path,
             tokenizer: Path) -> Cell:
    folder = out / f"c{concurrency}-{client}"
    folder.mkdir(parents=True, exist_ok=True)
    cell = Cell(concurrency, client)
    standins, url, record_paths = start_standins(args, folder)
    env = {**os.environ, "FASTHTTP_LOG": str(folder / "fasthttp.jsonl"),
           "FASTHTTP_MAX_TOKENS": str(args.tokens), "HF_HUB_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    (folder / "fasthttp.jsonl").unlink(missing_ok=True)
    try:
        argv = {"suite": lambda: suite_command(args, url, concurrency, folder, tokenizer),
                "fasthttp": lambda: fasthttp_command(args, url, concurrency, folder),
                "vllm-bench": lambda: bench_command(args, url, concurrency, folder, tokenizer),
                }[client]()
        clock_offset_s = time.time() - time.monotonic()
        with open(folder / "client.log", "w") as log:
            process = subprocess.Popen(pinned(args.client_cpus, argv), stdout=log,
                                       stderr=subprocess.STDOUT, cwd=folder, env=env,
                                       start_new_session=True)
            sampler = CpuSampler(process.pid)
            if args.worker_cpus:
                pin_forked_workers(process.pid, [int(c) for c in args.worker_cpus.split(",")],
                                   cell)
            try:
                process.wait(args.warmup + args.duration + 600)
            except subprocess.TimeoutExpired:
                cell.notes.append("client timed out")
                stop_process_group(process)
            sampler.stop()
        if process.returncode not in (0, 1, 3):
            cell.notes.append(f"client exited {process.returncode} (see {folder}/client.log)")
    finally:
        for standin in standins:
            stop_process_group(standin)
    requests = {"suite": lambda: suite_requests(folder, clock_offset_s),
                "fasthttp": lambda: fasthttp_requests(folder),
                "vllm-bench": lambda: bench_requests(folder)}[client]()
    records = [r for path in record_paths for r in read_json_lines(path)]
    analyse(cell, args, records, requests)
    if records and cell.traffic_start_s is not None:
        t0 = cell.traffic_start_s
        cell.cpu_mean, cell.cpu_max = sampler.in_window(t0 + args.warmup,
                                                        t0 + args.warmup + args.duration)
    return cell


def table(cells: list[Cell], args: argparse.Namespace) -> str:
    head = (f"stand-in: TTFT {args.ttft * 1e3:g} ms, ITL {args.itl * 1e3:g} ms, {args.tokens} "
            f"tokens; window {args.duration:g} s after {args.warmup:g} s; client workers "
            f"{args.workers}; client CPUs {args.client_cpus or 'any'}, stand-in CPUs "
            f"{args.standin_cpus or 'any'} ({args.standin_processes} process(es)); "
            f"host {os.cpu_count()} cores")
    lines = [head, "",
             "| C | client | received / ideal (stand-in emitted) | in flight (mean) | "
             "client CPU mean / max | TTFT error p50 / p99 ms | ITL error p50 / p99 ms | "
             "chunk read delay p50 / p99 ms | request delivery p50 / p99 ms | "
             "requests (failed) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        mark = "" if c.paired else " q"
        lines.append(
            f"| {c.concurrency} | {c.client} | {c.received_fraction:.1%} "
            f"({c.emitted_fraction:.1%}) | {c.in_flight_mean:.1f} | "
            f"{c.cpu_mean:.0%} / {c.cpu_max:.0%} | "
            f"{c.ttft_error_ms[0]:+.2f} / {c.ttft_error_ms[1]:+.2f}{mark} | "
            f"{c.itl_error_ms[0]:+.2f} / {c.itl_error_ms[1]:+.2f}{mark} | "
            f"{c.read_delay_ms[0]:.2f} / {c.read_delay_ms[1]:.2f} | "
            f"{c.delivery_ms[0]:.2f} / {c.delivery_ms[1]:.2f} | "
            f"{c.requests} ({c.failed}) |")
    notes = [f"- C={c.concurrency} {c.client}: {n}" for c in cells for n in c.notes[:3]]
    return "\n".join(lines + (["", *notes] if notes else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=6.0)
    parser.add_argument("--ttft", type=float, default=0.05)
    parser.add_argument("--itl", type=float, default=0.02)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--workers", type=int, default=1, help="client processes")
    parser.add_argument("--standin-cpus", default=None, help="taskset list, e.g. 0")
    parser.add_argument("--standin-processes", type=int, default=1,
                        help="stand-in processes sharing the port (one event loop writes "
                        "~10-20k chunks/s)")
    parser.add_argument("--bench-command", default=None,
                        help="how to run `vllm` (default: the suite's shim for the CPU "
                        "build); e.g. 'python3 -m vllm.entrypoints.cli.main'")
    parser.add_argument("--tokenizer", type=Path, default=None,
                        help="tokenizer folder (default: the suite's tiny model, built once)")
    parser.add_argument("--client-cpus", default=None, help="taskset list, e.g. 1")
    parser.add_argument("--worker-cpus", default=None,
                        help="comma list: pin each forked Locust worker to its own CPU (the "
                        "master stays on --client-cpus), e.g. 2,4")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--out", type=Path, default=Path("runs/client-capacity"))
    parser.add_argument("--json", type=Path, default=None, help="also write the cells here")
    args = parser.parse_args(argv)
    if args.tokenizer is None:
        from vllm_slo.servers.tiny_model import ensure_tiny_model

        tokenizer = ensure_tiny_model()
    else:
        tokenizer = args.tokenizer.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    cells = []
    for concurrency in args.concurrency:
        for client in args.clients:
            cell = run_cell(args, concurrency, client, args.out.resolve(), tokenizer)
            cells.append(cell)
            print(table([cell], args).splitlines()[-1] if not cell.notes else
                  table([cell], args), flush=True)
            if args.json:  # after every cell: a run cut short keeps what it measured
                args.json.write_text(json.dumps([c.__dict__ for c in cells], indent=2,
                                                default=str))
    print()
    print(table(cells, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
