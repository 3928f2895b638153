"""Process lifecycle: Ctrl-C and SIGTERM leave no orphan (vLLM's API server, EngineCore and
workers, Locust), vLLM's own rejection of engine args is a usage error (exit 2)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import (
    REPO,
    cli_env,
    only_run_dir,
    process_group_alive,
    processes_in_group,
    requires_vllm,
    run_cli,
)

pytestmark = [pytest.mark.integration, requires_vllm]


def start_cli(arguments: list[str], runs_dir: Path) -> subprocess.Popen:
    # its own session, like a terminal's foreground job: the signal goes to the CLI's group
    return subprocess.Popen(
        [sys.executable, "-m", "scenarios.cli", "--runs-dir", str(runs_dir), *arguments],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(), cwd=REPO,
        start_new_session=True)


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def locust_processes(run_dir: Path) -> list[str]:
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True,
                             text=True).stdout
    return [line for line in listing.splitlines()
            if "locust" in line and str(run_dir) in line]


def server_pgid(run_dir: Path) -> int:
    return int(json.loads((run_dir / "provenance.json").read_text())["server_pid"])


def test_ctrl_c_mid_run_stops_everything_and_keeps_the_rows(tmp_path: Path) -> None:
    cli = start_cli(["run", "scenario=chat", "traffic.duration=120s", "traffic.warmup=1s"],
                    tmp_path)
    try:
        wait_for(lambda: (d := only_run_dir(tmp_path)) is not None
                 and list((d / "samples").glob("*.arrows")), 300, "the first samples")
        run_dir = only_run_dir(tmp_path)
        pgid = server_pgid(run_dir)
        assert process_group_alive(pgid)
        time.sleep(3)  # a few seconds of traffic
        os.killpg(cli.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        output, _ = cli.communicate(timeout=90)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    assert cli.returncode == 4, output
    assert "interrupted" in output
    wait_for(lambda: not process_group_alive(pgid), 10, "the vLLM process group to end")
    assert not processes_in_group(pgid)
    wait_for(lambda: not locust_processes(run_dir), 10, "Locust to end")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "the run was interrupted before its planned end" in summary["invalid_reasons"]
    assert summary["requests"]["ok"] > 0  # rows recorded before Ctrl-C were kept
    assert (run_dir / "report.html").is_file()


def test_sigterm_during_server_start_leaves_no_orphans(tmp_path: Path) -> None:
    cli = start_cli(["run", "scenario=chat"], tmp_path)
    try:
        def engine_started() -> bool:
            run_dir = only_run_dir(tmp_path)
            log = run_dir / "server.log" if run_dir else None
            return bool(log and log.is_file() and "EngineCore" in log.read_text())

        wait_for(engine_started, 240, "vLLM's EngineCore to start")
        run_dir = only_run_dir(tmp_path)
        argv = (run_dir / "server.log").read_text().splitlines()[0].split()
        port = argv[argv.index("--port") + 1]
        children = subprocess.run(["ps", "-ww", "-eo", "pid=,pgid=,args="], capture_output=True,
                                  text=True).stdout
        pgids = {int(line.split()[1]) for line in children.splitlines()
                 if "servers.vllm_cli" in line and f"--port {port}" in line}
        assert pgids, children
        os.killpg(cli.pid, signal.SIGTERM)
        output, _ = cli.communicate(timeout=90)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    assert cli.returncode == 4, output
    for pgid in pgids:
        wait_for(lambda pgid=pgid: not process_group_alive(pgid), 10, f"group {pgid} to end")
    assert (run_dir / "summary.json").is_file()


def test_vllm_rejecting_an_engine_arg_is_a_usage_error(tmp_path: Path) -> None:
    # --swap-space was removed in vLLM's V1 engine: its argparse rejects it
    result = run_cli(["run", "scenario=chat", "server.args.swap-space=1"], tmp_path,
                     timeout_s=300)
    assert result.returncode == 2, result.output
    assert "vLLM rejected the server configuration" in result.output
    assert "swap-space" in result.output
