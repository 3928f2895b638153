"""Remote workers' channel cost: rows/s through Locust's master/worker channel and the
master's CPU, for a `traffic.remote_workers` run on the known-timing stand-in.

The suite runs the master (`vllm-slo run ... traffic.remote_workers=N`), this script starts
the N printed `vllm-slo worker` commands on this host (each in a directory of its own, as
another host would be), samples the Locust master's CPU time while it runs (psutil), and
prints: rows delivered per worker, rows/s and MB/s through the channel over the traffic span,
the master's CPU (fraction of one core), and the run's exit code and client-health reasons.

    python benchmarks/remote_workers.py                       # 4 workers x 256 streams, 10 s
    python benchmarks/remote_workers.py --workers 2 --streams 64 --duration 5
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def master_process(cli: psutil.Process) -> psutil.Process | None:
    """The Locust master itself: `python -m locust ... --master`, not the lifeline process
    the suite starts it behind (whose command line holds the same arguments)."""
    for child in cli.children(recursive=True):
        try:
            command = child.cmdline()
        except psutil.Error:
            continue
        if command[1:3] == ["-m", "locust"] and "--master" in command:
            return child
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--streams", type=int, default=256, help="closed-loop users in all")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--ttft", type=float, default=0.05)
    parser.add_argument("--itl", type=float, default=0.02)
    options = parser.parse_args()
    env = dict(os.environ)  # (PYTHONPATH kept: a checkout other than the installed one)
    work = Path(tempfile.mkdtemp(prefix="remote-workers-"))
    (work / "master").mkdir()
    standin = subprocess.Popen(
        [sys.executable, "-m", "vllm_slo.servers.standin", "--port", "0", "--ttft",
         str(options.ttft), "--itl", str(options.itl)], stdout=subprocess.PIPE, text=True,
        env=env, cwd=ROOT)
    assert standin.stdout is not None
    url = standin.stdout.readline().split()[-1]
    arguments = [
        "run", "scenario=chat", f"server.url={url}", "slo={}",
        f"traffic.chat.output_tokens={options.output_tokens}", "traffic.chat.turns=1",
        "traffic.prefix_cache=keep", "traffic.warmup=2s", f"traffic.duration={options.duration}s",
        f"traffic.arrival={{kind: closed, users: {options.streams}, "
        f"spawn_rate: {options.streams}, think_time: 0s}}",
        f"traffic.remote_workers={options.workers}", f"traffic.master_port={free_port()}"]
    cli = subprocess.Popen([sys.executable, "-m", "vllm_slo.cli", "--runs-dir", "runs",
                            *arguments], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=env, cwd=work / "master", start_new_session=True)
    assert cli.stdout is not None
    output, command = [], [""]
    for line in cli.stdout:
        output.append(line)
        if " worker --master " in line:
            command = line.split()
            break
    if command[:2] != ["vllm-slo", "worker"]:
        sys.exit("".join(output))
    workers = []
    for index in range(options.workers):
        where = work / f"worker-{index}"
        where.mkdir()
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "vllm_slo.cli", *command[1:]], stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT, env={**env, "HOME": str(where)}, cwd=where))
    cli_process = psutil.Process(cli.pid)
    master: psutil.Process | None = None
    samples: list[tuple[float, float]] = []  # (Unix s, the master's CPU s so far)
    while cli.poll() is None:
        if master is None:
            master = master_process(cli_process)
        if master is not None:
            try:
                times = master.cpu_times()
                samples.append((time.time(), times.user + times.system))
            except psutil.Error:
                pass
        time.sleep(0.2)
    output.append(cli.stdout.read())
    for worker in workers:
        worker.wait(60)
    standin.send_signal(signal.SIGTERM)
    standin.wait(10)
    run_dir = next((work / "master" / "runs").iterdir())
    record = json.loads((run_dir / "remote_workers.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    span_s = options.duration + 2.0  # warm-up + window: the span rows were sent in
    rows = sum(w["rows"] for w in record["workers"])
    channel_bytes = sum(p.stat().st_size for p in (run_dir / "samples").glob("samples-remote-*"))
    start = record["traffic_start_unix_s"]
    during = [cpu for t, cpu in samples if start <= t <= start + span_s]
    traffic_cpu_s = during[-1] - during[0] if len(during) > 1 else float("nan")
    print(f"remote workers on the stand-in, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"{os.cpu_count()} cores ({os.uname().machine}), {options.workers} workers x "
          f"{options.streams} streams in all, {options.output_tokens} tokens a request, "
          f"TTFT {options.ttft * 1e3:g} ms, ITL {options.itl * 1e3:g} ms")
    for worker in record["workers"]:
        print(f"  {worker['worker_id']}: {worker['rows']} rows, {worker['batches']} batches, "
              f"{worker['duplicate_rows']} resent, finished {worker['finished']}")
    print(f"rows through the channel: {rows} in {span_s:g} s = {rows / span_s:.0f} rows/s, "
          f"{channel_bytes / span_s / 1e6:.2f} MB/s (Arrow IPC as written)")
    print(f"Locust master CPU while the traffic ran: {traffic_cpu_s:.2f} s over {span_s:g} s "
          f"= {traffic_cpu_s / span_s:.1%} of one core "
          f"({traffic_cpu_s / max(rows, 1) * 1e6:.0f} us a row); over its life (imports, "
          f"start, stop): {samples[-1][1]:.2f} s")
    print(f"exit code {summary['exit_code']}; invalid reasons: "
          f"{summary['invalid_reasons'] or 'none'}")
    print(f"run folder: {run_dir}")


if __name__ == "__main__":
    main()
