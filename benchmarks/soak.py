#!/usr/bin/env python3
"""Soak: a long `vllm-slo run` at a steady open-loop rate against the known-timing stand-in.
Does the load generator's memory stay flat, and is every request the server served a row?

Starts the stand-in (`--record`: its own log of every request it served, joined to the rows by
X-Request-Id), runs `vllm-slo run` in attach mode (constant arrivals, one Locust process),
samples that Locust process's RSS (/proc/PID/status VmRSS) every `--sample-every` seconds and
prints RSS at start, after warm-up, at the end and its maximum (with a least-squares slope
after warm-up), then the stand-in's count of served requests against the rows on disk.
Exit status 1 if a row is missing or extra.

    python benchmarks/soak.py                      # 30 minutes at 20 req/s (issue 17)
    python benchmarks/soak.py --duration 2m        # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from vllm_slo.servers.standin.cli import read_record_log

SUITE_ID = re.compile(r"^\d+-\d+-\d+-\d+$")  # the locustfile's request ids (not readiness)


def seconds(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)\s*(s|m|h)?", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 30m, 1h)")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[match.group(2)]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=seconds, default=seconds("30m"), help="default 30m")
    p.add_argument("--rate", type=float, default=20.0, help="arrivals per second (default 20)")
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--ttft", type=float, default=0.05, help="stand-in seconds to first token")
    p.add_argument("--itl", type=float, default=0.01, help="stand-in seconds between tokens")
    p.add_argument("--warmup", type=seconds, default=None,
                   help="RSS 'start' is taken this long after the first rows (default: 10%% "
                        "of the duration, at least 20 s, at most 120 s)")
    p.add_argument("--sample-every", type=float, default=5.0, help="RSS sampling period, s")
    p.add_argument("--runs-dir", type=Path, default=None, help="default: a temporary folder")
    p.add_argument("--tracemalloc", type=Path, default=None,
                   help="FILE: Locust writes where its Python memory grew to FILE.<pid> "
                        "(vllm_slo/loadtests/memory_trace.py; slows the client, so RSS is not "
                        "comparable with a run without it)")
    p.add_argument("--smaps-every", type=float, default=0.0,
                   help="also save the Locust process's anonymous mappings (address range, "
                        "size, resident KiB, [heap] or not) every this many seconds to "
                        "smaps.jsonl, and print the mappings that changed most across the "
                        "largest RSS step (0: off)")
    return p.parse_args()


def vm_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def anonymous_mappings(pid: int) -> dict[str, list[int]] | None:
    """The process's anonymous and [heap] mappings from one read of /proc/PID/smaps:
    {"start-end": [size KiB, resident KiB, 1 if [heap] else 0]}; None when it is gone."""
    mappings: dict[str, list[int]] = {}
    current: list[int] | None = None
    try:
        with open(f"/proc/{pid}/smaps") as smaps:
            for line in smaps:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):
                    fields = line.split()
                    name = fields[5] if len(fields) > 5 else ""
                    current = [0, 0, int(name == "[heap]")] if name in ("", "[heap]") else None
                    if current is not None:
                        mappings[head] = current
                elif current is not None and head == "Size:":
                    current[0] = int(line.split()[1])
                elif current is not None and head == "Rss:":
                    current[1] = int(line.split()[1])
    except OSError:
        return None
    return mappings


def heap_and_anonymous_mib(mappings: dict[str, list[int]] | None) -> tuple[float, float]:
    """Resident MiB of the brk heap ([heap]: glibc malloc's main arena) and of the other
    anonymous mappings (other arenas, mmap'd blocks, Arrow's allocator, thread stacks): which
    one grows tells a fragmenting allocator from a Python-level leak."""
    if mappings is None:
        return float("nan"), float("nan")
    heap = sum(rss for _, rss, is_heap in mappings.values() if is_heap)
    anonymous = sum(rss for _, rss, is_heap in mappings.values() if not is_heap)
    return heap / 1024, anonymous / 1024


def mapping_changes(before: dict[str, list[int]], after: dict[str, list[int]],
                    top: int = 12) -> list[str]:
    """The mappings whose resident size changed most between two snapshots, as text lines."""
    changes = []
    for key in set(before) | set(after):
        old, new = before.get(key, [0, 0]), after.get(key, [0, 0])
        if new[1] != old[1]:
            state = "new" if key not in before else "gone" if key not in after else "grown"
            changes.append((new[1] - old[1], f"{key} {state}: size {new[0] or old[0]} KiB, "
                                             f"resident {old[1]} -> {new[1]} KiB"))
    changes.sort(key=lambda change: -abs(change[0]))
    sizes = sorted(entry[0] for entry in after.values())
    lines = [f"{len(before)} -> {len(after)} anonymous mappings; sizes now (KiB): "
             f"{len(sizes)} total, {sum(1 for s in sizes if s == 1024)} of exactly 1 MiB "
             f"(pymalloc arenas), {sum(1 for s in sizes if s >= 65536)} of 64 MiB or more"]
    lines.extend(f"  {delta:+d} KiB  {text}" for delta, text in changes[:top])
    return lines


def locust_pid(run_dir: Path) -> int | None:
    """The Locust process writing rows: samples/samples-<host>-<pid>.arrows."""
    for path in sorted((run_dir / "samples").glob("samples-*.arrows")):
        match = re.fullmatch(r"samples-.+-(\d+)", path.stem)
        if match:
            return int(match.group(1))
    return None


def main() -> int:
    args = parse_args()
    warmup_s = args.warmup if args.warmup is not None else min(120.0, max(20.0, args.duration / 10))
    runs_dir = (args.runs_dir or Path(tempfile.mkdtemp(prefix="vllm-slo-soak-"))).resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    record = runs_dir / "standin-served.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if args.tracemalloc:
        env["VLLM_SLO_TRACEMALLOC"] = str(args.tracemalloc.resolve())
        env["VLLM_SLO_TRACEMALLOC_AFTER_S"] = str(warmup_s)
    standin = subprocess.Popen(
        [sys.executable, "-m", "vllm_slo.servers.standin", "--port", "0", "--ttft",
         str(args.ttft), "--itl", str(args.itl), "--record", str(record)],
        stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    url = standin.stdout.readline().split()[-1]
    print(f"stand-in at {url}; {args.duration:g}s at {args.rate:g} req/s; runs in {runs_dir}",
          flush=True)
    cli = subprocess.Popen(
        [sys.executable, "-m", "vllm_slo.cli", "--runs-dir", str(runs_dir), "run",
         "scenario=chat", f"server.url={url}", f"traffic.duration={args.duration:g}s",
         "traffic.warmup=0s", "traffic.workers=1", "traffic.chat.turns=1",
         f"traffic.chat.output_tokens={args.output_tokens}", "traffic.prefix_cache=keep",
         "traffic.chat.system_prompt_tokens=20",
         f"traffic.arrival={{kind: constant, rate: {args.rate:g}, max_in_flight: 64}}",
         'slo={error_rate: "< 1%"}'],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=runs_dir)
    samples: list[tuple[float, float]] = []  # (seconds since the first rows, RSS MiB)
    smaps_log: list[tuple[float, dict[str, list[int]]]] = []
    pid = run_dir = first_rows_s = None
    try:
        while cli.poll() is None:
            time.sleep(min(1.0, args.sample_every))
            if run_dir is None:
                folders = sorted(p for p in runs_dir.iterdir() if p.is_dir())
                run_dir = folders[-1] if folders else None
            if pid is None and run_dir is not None:
                pid = locust_pid(run_dir)
                first_rows_s = time.monotonic() if pid else None
                if pid:
                    print(f"Locust process {pid}", flush=True)
            if pid is not None and (not samples or time.monotonic() - first_rows_s
                                    - samples[-1][0] >= args.sample_every):
                rss = vm_rss_mib(pid)
                mappings = anonymous_mappings(pid)  # one read serves both uses
                if rss is not None:
                    samples.append((time.monotonic() - first_rows_s, rss,
                                    *heap_and_anonymous_mib(mappings)))
                if mappings is not None and samples and args.smaps_every and (
                        not smaps_log or samples[-1][0] - smaps_log[-1][0] >= args.smaps_every):
                    smaps_log.append((samples[-1][0], mappings))
        output = cli.stdout.read()
    finally:
        if cli.poll() is None:
            cli.kill()
        cli.wait()
        standin.send_signal(signal.SIGTERM)  # the stand-in writes its log as it stops
        standin.wait(30)
        standin.stdout.close()
    print(output.strip().splitlines()[-1] if output.strip() else "(no output)")
    print(f"vllm-slo exit code {cli.returncode}; run folder {run_dir}")
    if not samples or run_dir is None:
        print("no RSS samples: the run never wrote rows")
        print(output)
        return 1
    columns = np.array(samples)
    times, rss = columns[:, 0], columns[:, 1]
    steady = times >= warmup_s
    first = int(np.argmax(steady)) if steady.any() else 0

    def slope(values: np.ndarray) -> float:
        return (np.polyfit(times[steady], values[steady], 1)[0] * 60
                if steady.sum() >= 3 else float("nan"))

    print(f"Locust RSS (MiB), {len(samples)} samples over {times[-1]:.0f}s: first {rss[0]:.1f}, "
          f"after {warmup_s:g}s warm-up {rss[first]:.1f}, end {rss[-1]:.1f}, max {rss.max():.1f};"
          f" end - after warm-up {rss[-1] - rss[first]:+.1f} MiB, slope after warm-up "
          f"{slope(rss):+.2f} MiB/min")
    for name, values in (("[heap]", columns[:, 2]), ("anonymous", columns[:, 3])):
        print(f"  of which {name}: after warm-up {values[first]:.1f}, end {values[-1]:.1f} "
              f"({values[-1] - values[first]:+.1f} MiB, {slope(values):+.2f} MiB/min)")
    np.savetxt(runs_dir / "rss.csv", columns, delimiter=",", fmt="%.3f",
               header="seconds_since_first_rows,rss_mib,heap_mib,anonymous_mib")
    print(f"samples: {runs_dir / 'rss.csv'}")
    if len(smaps_log) >= 2:
        with open(runs_dir / "smaps.jsonl", "w") as out:
            for at_s, mappings in smaps_log:
                out.write(json.dumps({"seconds_since_first_rows": round(at_s, 1),
                                      "mappings": mappings}) + "\n")
        step = int(np.argmax(np.diff(rss))) + 1  # the sample after the largest RSS rise
        before = max((i for i, (at_s, _) in enumerate(smaps_log) if at_s <= times[step - 1]),
                     default=0)
        after = min((i for i, (at_s, _) in enumerate(smaps_log) if at_s >= times[step]),
                    default=len(smaps_log) - 1)
        print(f"largest RSS step {rss[step] - rss[step - 1]:+.1f} MiB at {times[step]:.0f}s; "
              f"anonymous mappings at {smaps_log[before][0]:.0f}s vs {smaps_log[after][0]:.0f}s:")
        print("\n".join(mapping_changes(smaps_log[before][1], smaps_log[after][1])))
        print(f"whole run, {smaps_log[0][0]:.0f}s vs {smaps_log[-1][0]:.0f}s:")
        print("\n".join(mapping_changes(smaps_log[0][1], smaps_log[-1][1])))
    served = {rid: entry for rid, entry in read_record_log(record).items()
              if SUITE_ID.match(rid)}
    table = pq.read_table(run_dir / "samples.parquet", columns=["request_id", "ok"])
    rows = table.column("request_id").to_pylist()
    ok = sum(table.column("ok").to_pylist())
    missing, extra = set(served) - set(rows), set(rows) - set(served)
    print(f"stand-in served {len(served)} requests; rows on disk {len(rows)} ({ok} ok, "
          f"{len(rows) - len(set(rows))} duplicated); served without a row {len(missing)}, "
          f"rows the stand-in never served {len(extra)}; expected about "
          f"{args.rate * args.duration:.0f}")
    return 0 if not missing and not extra and len(rows) == len(set(rows)) else 1


if __name__ == "__main__":
    sys.exit(main())
