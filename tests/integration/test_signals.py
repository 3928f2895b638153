"""Signals during a run, against the known-timing stand-in (attach mode, no vLLM start):
SIGTERM stops the suite and every Locust process (master and `--processes` workers) within
seconds, keeps every row and lets `vllm-slo report` render a partial report marked
"interrupted"; a SIGKILL of the whole run (runner and Locust) loses only the rows of requests
that finished within the last flush interval, measured against the stand-in's own log."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import (
    cli_env,
    only_run_dir,
    running_cli,
    signal_and_wait,
    standin_server,
    wait_for,
)
from vllm_slo.loadtests import locust_launcher
from vllm_slo.run_folder.samples_format import read_stream_tolerant
from vllm_slo.servers.standin.cli import read_record_log

pytestmark = pytest.mark.integration

COMMON = ["traffic.chat.output_tokens=8", "traffic.chat.turns=1", "traffic.prefix_cache=keep",
          "traffic.chat.system_prompt_tokens=20", "slo={error_rate: \"< 50%\"}",
          "traffic.duration=120s", "traffic.warmup=0s"]
# the Locust users' flush interval (importing them would monkey-patch this process)
FLUSH_INTERVAL_S = float(re.search(
    r"^FLUSH_INTERVAL_S = ([0-9.]+)$",
    (Path(locust_launcher.__file__).parent / "users.py").read_text(), re.M).group(1))
SUITE_ID = re.compile(r"^\d+-\d+-\d+-\d+$")  # locustfile: pid-user-count-plan index


def locust_pids(run_dir: Path) -> list[int]:
    """Live Locust processes (master and workers) of this run, from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"locust" in b" ".join(argv) and str(run_dir).encode() in argv:
            pids.append(int(entry.name))
    return pids


def stream_rows(run_dir: Path) -> pa.Table:
    return pa.concat_tables([read_stream_tolerant(p)
                             for p in sorted((run_dir / "samples").glob("*.arrows"))])


def served_log(record: Path) -> dict[str, dict]:
    """The stand-in's log, keyed by the suite's request id (readiness probes left out)."""
    return {rid: entry for rid, entry in read_record_log(record).items()
            if SUITE_ID.match(rid)}


def samples_files(run_dir: Path | None, count: int) -> bool:
    if run_dir is None:
        return False
    files = list((run_dir / "samples").glob("samples-*.arrows"))
    return len(files) >= count and all(f.stat().st_size > 1000 for f in files)


def test_sigterm_stops_every_locust_process_and_keeps_every_row(tmp_path: Path) -> None:
    record = tmp_path / "served.jsonl"
    with standin_server("--ttft", "0.02", "--itl", "0.005", "--record", str(record)) as url, \
            running_cli(["run", "scenario=chat", f"server.url={url}", *COMMON,
                         "traffic.workers=2", "traffic.arrival={kind: closed, users: 6, "
                         "spawn_rate: 100, think_time: 0.05s}"], tmp_path) as cli:
            wait_for(lambda: samples_files(only_run_dir(tmp_path), 2), 90,
                     "rows from both Locust workers", poll_s=0.2)
            run_dir = only_run_dir(tmp_path)
            time.sleep(2)  # a few seconds of traffic
            before = locust_pids(run_dir)
            assert len(before) >= 3, before  # the --processes master and its two workers
            signalled = time.monotonic()
            output = signal_and_wait(cli, signal.SIGTERM, timeout_s=60)
            stopped_s = time.monotonic() - signalled
    print(f"SIGTERM to exit: {stopped_s:.1f}s; Locust processes before: {before}")
    assert cli.returncode == 4, output
    assert "interrupted" in output
    assert stopped_s < 20, output  # the stand-in answers at once: Locust stops in seconds
    assert not locust_pids(run_dir), "orphan Locust processes"
    assert not [pid for pid in before if Path(f"/proc/{pid}").exists()
                and "Z" not in (Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3])]
    status = json.loads((run_dir / "run_status.json").read_text())
    assert status["interrupted"] is True
    # every row written is on disk and readable, consolidated and in the streams alike
    streams = stream_rows(run_dir)
    table = pq.read_table(run_dir / "samples.parquet")
    assert table.num_rows == streams.num_rows > 50
    assert len(set(table.column("process_id").to_pylist())) == 2
    # nothing lost: every request the stand-in answered to the end is a row, and every row
    # was served (a request cut by the stop is either a row or one the server saw dropped)
    served = served_log(record)
    rows = set(table.column("request_id").to_pylist())
    assert rows <= set(served)
    completed = {i for i, e in served.items() if not e["client_disconnected"]}
    assert completed <= rows, sorted(completed - rows)[:5]
    # the saved folder renders again as a partial report, marked interrupted
    (run_dir / "report.html").unlink()
    report = subprocess.run([sys.executable, "-m", "vllm_slo.cli", "report", str(run_dir)],
                            capture_output=True, text=True, env=cli_env(), timeout=120)
    assert report.returncode == 4, report.stdout + report.stderr
    assert "interrupted" in report.stdout
    assert (run_dir / "report.html").is_file()
    assert "interrupted" in (run_dir / "report.html").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "the run was interrupted before its planned end" in summary["invalid_reasons"]
    assert summary["requests"]["measured"] == table.num_rows


def test_sigkill_of_the_whole_run_loses_at_most_the_last_flush_interval(tmp_path: Path
                                                                        ) -> None:
    """SIGKILL of the runner's group and Locust's (its own session) at a known moment: the
    rows on disk are every request the stand-in finished before the kill except those that
    finished within the last flush interval (the loss window, printed); `vllm-slo report`
    renders what is on disk and says the run did not finish."""
    record = tmp_path / "served.jsonl"
    with standin_server("--ttft", "0.02", "--itl", "0.005", "--record", str(record)) as url, \
            running_cli(["run", "scenario=chat", f"server.url={url}", *COMMON,
                         "traffic.workers=1", "traffic.arrival={kind: closed, users: 4, "
                         "spawn_rate: 100, think_time: 0.02s}"], tmp_path) as cli:
            wait_for(lambda: samples_files(only_run_dir(tmp_path), 1), 90, "the first rows",
                     poll_s=0.2)
            run_dir = only_run_dir(tmp_path)
            # a few flushes in, just before the next one is due (the first rows appear at a
            # flush; polled every 0.2 s): close to the worst case, a whole interval unflushed
            time.sleep(3.8)
            groups = {os.getpgid(pid) for pid in locust_pids(run_dir)}
            assert groups and cli.pid not in groups  # Locust runs in a session of its own
            killed_s = time.monotonic()
            for pgid in groups:
                os.killpg(pgid, signal.SIGKILL)
            os.killpg(cli.pid, signal.SIGKILL)
            cli.communicate(timeout=10)
            wait_for(lambda: not locust_pids(run_dir), 10, "Locust to die")
    served = served_log(record)  # the stand-in wrote its log when it stopped
    table = stream_rows(run_dir)
    assert not (run_dir / "samples.parquet").exists()  # nothing consolidated: a hard kill
    rows = set(table.column("request_id").to_pylist())
    assert rows <= set(served)
    finished = {i: e["last_chunk_s"] for i, e in served.items()
                if e["last_chunk_s"] is not None and e["last_chunk_s"] < killed_s}
    lost = {i: t for i, t in finished.items() if i not in rows}
    window_s = killed_s - min(lost.values()) if lost else 0.0
    kept_newest_s = killed_s - max(finished[i] for i in rows)
    print(f"SIGKILL: {len(finished)} requests finished before the kill, {len(rows)} rows "
          f"on disk, {len(lost)} lost; loss window {window_s:.2f}s (flush interval "
          f"{FLUSH_INTERVAL_S:g}s); newest row finished {kept_newest_s:.2f}s before the kill")
    assert len(rows) > 50
    # the flusher writes every FLUSH_INTERVAL_S: what is lost finished after the last flush
    # (+ 1 s for a loaded 2-core host delaying the flusher greenlet and the client's read)
    assert window_s <= FLUSH_INTERVAL_S + 1.0, window_s
    assert kept_newest_s <= FLUSH_INTERVAL_S + 1.0  # and a flush had happened that recently
    # the folder still renders from the streams, and says it was cut short
    report = subprocess.run([sys.executable, "-m", "vllm_slo.cli", "report", str(run_dir)],
                            capture_output=True, text=True, env=cli_env(), timeout=120)
    assert report.returncode == 4, report.stdout + report.stderr
    assert "did not finish" in report.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["requests"]["measured"] == len(rows)
