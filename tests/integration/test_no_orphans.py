"""No orphans (issue 40, item 2): `kill -9` of the CLI mid-run ends the launched server (its
lifeline, `vllm serve` and every process it started: vLLM's API server, EngineCore and
workers; behind vLLM's command line, the stand-in's launcher and the stand-in) and Locust
(master and `--processes` workers) within seconds, the server's port stops answering, and
`vllm-slo report` still renders the folder. Every process of the run is found by a marker in
its environment (each inherits the CLI's), not by its group: one that left the group would be
found too. Against the known-timing stand-in behind vLLM's command line, and real vLLM CPU."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.conftest import (
    FAKE_VLLM,
    HEALTH_BOUNDS_OFF,
    cli_env,
    only_run_dir,
    requires_vllm,
    wait_for,
)
from vllm_slo.run_folder.samples_format import read_stream_tolerant
from vllm_slo.transport.processes import ORPHAN_GRACE_S

pytestmark = pytest.mark.integration

MARK = "VLLM_SLO_TEST_TREE"
# the lifeline's grace (SIGTERM, then SIGKILL) plus a loaded 2-core host's delays
GONE_WITHIN_S = ORPHAN_GRACE_S + 5.0


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    started_ticks: int  # since boot: with the pid, names one process (pids are reused)
    argv: str
    marked: bool


def live_processes(mark: str) -> dict[int, Proc]:
    """Every live process (zombies left out), from /proc; `marked`: its environment carries
    MARK=mark (setproctitle, as vLLM's EngineCore uses it, may overwrite that memory: the
    process is then found by its group or its parent)."""
    needle = f"{MARK}={mark}".encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if fields[0] != "Z":
            found[int(entry.name)] = Proc(int(entry.name), int(fields[1]), int(fields[2]),
                                          int(fields[19]), argv, needle in environ)
    return found


def run_tree(procs: dict[int, Proc]) -> dict[int, Proc]:
    """Of `procs`, the run's: those marked, those in their process groups, and the
    descendants of all these."""
    groups = {p.pgid for p in procs.values() if p.marked}
    tree = {pid: p for pid, p in procs.items() if p.marked or p.pgid in groups}
    grown = True
    while grown:
        children = {pid: p for pid, p in procs.items() if p.ppid in tree and pid not in tree}
        tree.update(children)
        grown = bool(children)
    return tree


def still_alive(tree: dict[int, Proc], mark: str, cli_pid: int) -> list[Proc]:
    """Of `tree`, the processes still alive (the same pid started at the same time), and
    any new process of the run other than the CLI."""
    procs = live_processes(mark)
    return [*(p for pid, p in procs.items()
              if pid in tree and tree[pid].started_ticks == p.started_ticks),
            *(p for pid, p in run_tree(procs).items() if pid not in tree and pid != cli_pid)]


@contextlib.contextmanager
def marked_cli(arguments: list[str], runs_dir: Path, mark: str) -> Iterator[subprocess.Popen]:
    """The CLI in a session of its own (so that killing it touches nothing else of the test),
    its environment marked; whatever the test leaves is SIGKILLed by the mark on the way out
    (a failing test must not leave a server running)."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "vllm_slo.cli", "--runs-dir", str(runs_dir), *arguments],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**cli_env(), MARK: mark}, cwd=runs_dir.parent, start_new_session=True)
    try:
        yield cli
    finally:
        for pid in run_tree(live_processes(mark)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        cli.kill()
        cli.communicate()


def rows_on_disk(runs_dir: Path, files: int) -> bool:
    """At least `files` Locust processes' streams hold a measured row (one sent after the
    warm-up): a kill then cuts a run with measurements, whatever the host's load. Bytes on disk
    were not enough: a loaded CI run's first batches held warm-up rows only, and the cut run
    had none measured."""
    run_dir = only_run_dir(runs_dir)
    if run_dir is None:
        return False
    measured = 0
    for path in (run_dir / "samples").glob("samples-*.arrows"):
        phases = read_stream_tolerant(path).column("phase").to_pylist()
        measured += "measure" in phases
    return measured >= files


def server_port(run_dir: Path) -> int:
    """The port the suite gave the server: the one after `--host` on the launch line."""
    first = (run_dir / "server.log").read_text().splitlines()[0]
    return int(re.search(r"--host 127\.0\.0\.1 --port (\d+)", first).group(1))


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False


def kill_cli_and_time_the_tree(cli: subprocess.Popen, mark: str) -> tuple[list[str], float]:
    """SIGKILL the CLI alone: the command lines of the run's other processes before, and
    seconds until all are gone."""
    tree = run_tree(live_processes(mark))
    tree.pop(cli.pid)
    os.kill(cli.pid, signal.SIGKILL)
    killed = time.monotonic()
    cli.wait(10)
    wait_for(lambda: not still_alive(tree, mark, cli.pid), GONE_WITHIN_S,
             "the run's processes to end", poll_s=0.1)
    return [p.argv for p in tree.values()], time.monotonic() - killed


def report_renders(run_dir: Path) -> subprocess.CompletedProcess[str]:
    (run_dir / "report.html").unlink(missing_ok=True)
    return subprocess.run([sys.executable, "-m", "vllm_slo.cli", "report", str(run_dir)],
                          capture_output=True, text=True, env=cli_env(), timeout=180)


def assert_report_renders_the_cut_run(run_dir: Path) -> None:
    """`report` on the folder: the rows on disk rendered, the run named as cut short (exit 4,
    an invalid measurement: not an internal error, not a verdict)."""
    report = report_renders(run_dir)
    output = report.stdout + report.stderr
    assert report.returncode == 4, output
    assert "internal error" not in output and "Traceback" not in output, output
    assert "did not finish" in report.stdout, output
    assert (run_dir / "report.html").is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["requests"]["measured"] > 0


def test_kill_9_of_the_cli_ends_the_launched_server_and_locust(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    with marked_cli(["run", "scenario=chat", *FAKE_VLLM, *HEALTH_BOUNDS_OFF,
                     "traffic.duration=120s", "traffic.warmup=1s", "traffic.workers=2",
                     "traffic.arrival={kind: closed, users: 4, spawn_rate: 100, "
                     "think_time: 0.05s}"], tmp_path, mark) as cli:
        wait_for(lambda: rows_on_disk(tmp_path, 2), 120, "rows from both Locust workers",
                 poll_s=0.2)
        run_dir = only_run_dir(tmp_path)
        port = server_port(run_dir)
        assert answers(port)
        commands, gone_s = kill_cli_and_time_the_tree(cli, mark)
    print(f"kill -9 of the CLI: {len(commands)} processes gone {gone_s:.2f}s later: "
          + "; ".join(argv[:70] for argv in commands))
    # two lifelines, fake vLLM, the stand-in it started, Locust's master and its 2 workers
    assert sum("lifeline.py" in c for c in commands) == 2, commands
    assert sum("fake_vllm.py" in c and "lifeline.py" not in c for c in commands) == 1, commands
    assert sum("vllm_slo.servers.standin" in c for c in commands) == 1, commands
    assert sum("locust" in c and "lifeline.py" not in c for c in commands) == 3, commands
    assert gone_s < GONE_WITHIN_S
    assert not answers(port)
    # the lifelines said what they did, in the server's log and Locust's
    for log in ("server.log", "locust.log"):
        assert "ended or let go: stopping process group" in (run_dir / log).read_text()
    assert_report_renders_the_cut_run(run_dir)


@requires_vllm
def test_kill_9_of_the_cli_ends_vllm_cpu_and_locust(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    with marked_cli(["run", "scenario=chat", *HEALTH_BOUNDS_OFF, "traffic.duration=120s",
                     "traffic.warmup=1s", "traffic.arrival.users=2",
                     "traffic.chat.output_tokens=8"], tmp_path, mark) as cli:
        wait_for(lambda: rows_on_disk(tmp_path, 1), 400, "the first rows", poll_s=0.5)
        run_dir = only_run_dir(tmp_path)
        port = server_port(run_dir)
        assert answers(port)
        time.sleep(2)  # a few seconds of traffic
        commands, gone_s = kill_cli_and_time_the_tree(cli, mark)
    print(f"kill -9 of the CLI: {len(commands)} processes gone {gone_s:.2f}s later: "
          + "; ".join(argv[:70] for argv in commands))
    assert sum("vllm_slo.servers.vllm_cli" in c and "lifeline.py" not in c
               for c in commands) == 1, commands  # vLLM's API server
    assert any("EngineCore" in c for c in commands), commands  # and its engine, a child
    assert any("locust" in c and "lifeline.py" not in c for c in commands), commands
    assert gone_s < GONE_WITHIN_S
    assert not answers(port)
    assert_report_renders_the_cut_run(run_dir)


def test_sigterm_to_the_cli_ends_the_launched_server_and_locust_promptly(tmp_path: Path
                                                                         ) -> None:
    """SIGTERM (a CI job's timeout, `kill PID`) to the CLI alone: the run stops as after
    Ctrl-C (exit 4, "interrupted", rows kept and rendered) and every process of the run,
    Locust's included, is gone when the CLI exits."""
    mark = uuid.uuid4().hex
    with marked_cli(["run", "scenario=chat", *FAKE_VLLM, *HEALTH_BOUNDS_OFF,
                     "traffic.duration=120s", "traffic.warmup=1s", "traffic.workers=2",
                     "traffic.arrival={kind: poisson, rate: 20, max_in_flight: 32}"],
                    tmp_path, mark) as cli:
        wait_for(lambda: rows_on_disk(tmp_path, 2), 120, "rows from both Locust workers",
                 poll_s=0.2)
        run_dir = only_run_dir(tmp_path)
        time.sleep(2)  # past the warm-up: measured rows
        tree = run_tree(live_processes(mark))
        tree.pop(cli.pid)
        os.kill(cli.pid, signal.SIGTERM)
        signalled = time.monotonic()
        wait_for(lambda: not still_alive(tree, mark, cli.pid), 20, "the run's processes to end",
                 poll_s=0.1)
        gone_s = time.monotonic() - signalled
        output, _ = cli.communicate(timeout=60)
        exited_s = time.monotonic() - signalled
        left = still_alive(tree, mark, cli.pid)
    print(f"SIGTERM to the CLI: its {len(tree)} processes gone {gone_s:.2f}s later, the CLI "
          f"exited {exited_s:.2f}s later (exit {cli.returncode}, report written)")
    assert cli.returncode == 4, output
    assert "interrupted" in output
    assert sum("locust" in p.argv and "lifeline.py" not in p.argv
               for p in tree.values()) == 3
    assert not left, [p.argv for p in left]
    assert exited_s < 20, output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "the run was interrupted before its planned end" in summary["invalid_reasons"]
    assert summary["requests"]["measured"] > 0
    assert (run_dir / "report.html").is_file()
