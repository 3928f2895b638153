"""Process lifecycle: Ctrl-C and SIGTERM leave no orphan (vLLM's API server, EngineCore and
workers, Locust), vLLM's own rejection of engine args is a usage error (exit 2)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.conftest import (
    only_run_dir,
    processes_in_group,
    requires_vllm,
    run_cli,
    running_cli,
    signal_and_wait,
    wait_for,
)
from vllm_slo.transport.processes import process_group_alive

pytestmark = [pytest.mark.integration, requires_vllm]


def locust_processes(run_dir: Path) -> list[str]:
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True,
                             text=True).stdout
    return [line for line in listing.splitlines()
            if "locust" in line and str(run_dir) in line]


def server_pgid(run_dir: Path) -> int:
    return int(json.loads((run_dir / "provenance.json").read_text())["server_pid"])


def test_ctrl_c_mid_run_stops_everything_and_keeps_the_rows(tmp_path: Path) -> None:
    with running_cli(["run", "scenario=chat", "traffic.duration=120s", "traffic.warmup=1s"],
                     tmp_path) as cli:
        wait_for(lambda: (d := only_run_dir(tmp_path)) is not None
                 and list((d / "samples").glob("*.arrows")), 300, "the first samples")
        run_dir = only_run_dir(tmp_path)
        pgid = server_pgid(run_dir)
        assert process_group_alive(pgid)
        time.sleep(3)  # a few seconds of traffic
        output = signal_and_wait(cli, signal.SIGINT)  # what a terminal's Ctrl-C does
    assert cli.returncode == 4, output
    assert "interrupted" in output
    wait_for(lambda: not process_group_alive(pgid), 10, "the vLLM process group to end")
    assert not processes_in_group(pgid)
    wait_for(lambda: not locust_processes(run_dir), 10, "Locust to end")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "the run was interrupted before its planned end" in summary["invalid_reasons"]
    assert summary["requests"]["ok"] > 0  # rows recorded before Ctrl-C were kept
    assert (run_dir / "report.html").is_file()


@pytest.mark.vllm_no_traffic
def test_sigterm_during_server_start_leaves_no_orphans(tmp_path: Path) -> None:
    with running_cli(["run", "scenario=chat"], tmp_path) as cli:
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
                 if "vllm_slo.servers.vllm_cli" in line and f"--port {port}" in line}
        assert pgids, children
        output = signal_and_wait(cli, signal.SIGTERM)
    assert cli.returncode == 4, output
    for pgid in pgids:
        wait_for(lambda pgid=pgid: not process_group_alive(pgid), 10, f"group {pgid} to end")
    assert (run_dir / "summary.json").is_file()


@pytest.mark.vllm_no_traffic
def test_vllm_rejecting_an_engine_arg_is_a_usage_error(tmp_path: Path) -> None:
    # --swap-space was removed in vLLM's V1 engine: its parser rejects it, now before the
    # launch (vllm_slo/servers/vllm_args.py); an engine refusing at start-up is
    # test_vllm_args.py::test_a_kv_cache_too_small_for_max_model_len_is_diagnosed
    result = run_cli(["run", "scenario=chat", "server.args.swap-space=1"], tmp_path,
                     timeout_s=300)
    assert result.returncode == 2, result.output
    assert "server.args.swap-space: vLLM's `vllm serve` has no flag --swap-space" in \
        result.output
    assert "nothing was started" in result.output and result.run_dir is None
