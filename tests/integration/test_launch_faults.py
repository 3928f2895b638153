"""Launch-mode faults without vLLM's start-up cost: the suite launches the stand-in behind
vLLM's command line (tests/support/fake_vllm.py, through `server.command`), which then dies
mid-run, never becomes ready, or finds its port taken. Each ends with a clear reason, exit 4,
the rows measured so far kept, and no process left behind."""

from __future__ import annotations

import json
import re
import socket
import sys
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import FAKE_VLLM, REPO, cli_env, only_run_dir, run_cli
from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.servers.vllm_server import (
    PORT_ATTEMPTS,
    VllmServer,
    plan_launch,
)
from vllm_slo.transport.processes import process_group_alive

pytestmark = pytest.mark.integration

FAKE = [*FAKE_VLLM, "traffic.arrival={kind: closed, users: 4, spawn_rate: 4, think_time: 0s}"]


def run_with(mode: str, tmp_path: Path, *extra: str):
    return run_cli(["run", "scenario=chat", *FAKE, *extra], tmp_path,
                   env={**cli_env(), "FAKE_VLLM_MODE": mode})


def left_behind(output: str) -> list[str]:
    """Processes still running the fake server launched on the port the output names."""
    port = re.search(r"--port (\d+)", output).group(1)
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "fake_vllm.py" in command and f"--port {port}" in command:
            found.append(command)
    return found


def test_a_launched_server_that_dies_mid_run(tmp_path: Path) -> None:
    # dies after 40 requests (~7 s of 4 users): counted, not timed, so a slow client start
    # cannot leave the window empty (at `exit_after` 6 s, a loaded CI box had measured none)
    result = run_with("exit_after:40", tmp_path, "traffic.duration=30s", "traffic.warmup=1s")
    assert result.returncode == 4, result.output
    assert "server died during the run" in result.output
    table = pq.read_table(result.run_dir / "samples.parquet").to_pydict()
    assert sum(table["ok"]) > 20  # the rows before it are kept
    status = json.loads((result.run_dir / "run_status.json").read_text())
    assert "exited with code 1" in status["server_failure"]
    assert "engine core died" in status["server_failure"]  # the log tail says why
    assert not left_behind(result.output)


def test_a_server_that_never_becomes_ready(tmp_path: Path) -> None:
    result = run_with("never_ready", tmp_path, "server.ready_timeout=4s")
    assert result.returncode == 4, result.output
    assert "not ready after 4s: /health answered nothing" in result.output
    assert not left_behind(result.output)  # the whole process group was stopped


def test_a_server_whose_port_is_taken(tmp_path: Path) -> None:
    """Every launch finds its port taken: PORT_ATTEMPTS launches on fresh ports, then the
    last failure, clearly."""
    result = run_with("port_taken", tmp_path, "server.ready_timeout=30s")
    assert result.returncode == 4, result.output
    assert "vLLM exited with code 1" in result.output
    assert "address already in use" in result.output  # the log tail, in the error itself
    log = (only_run_dir(tmp_path) / "server.log").read_text()
    assert log.count("starting again on port") == PORT_ATTEMPTS - 1
    assert len(set(re.findall(r"--port (\d+)", log))) == PORT_ATTEMPTS


def test_a_port_taken_before_vllm_binds_it_is_given_up_for_a_fresh_one(tmp_path: Path) -> None:
    """The race for real: another process listens on the probed port when the server starts
    (the stand-in behind vLLM's command line fails to bind: EADDRINUSE); the server is started
    again on a fresh port, becomes ready there, and stops as a whole."""
    spec = ServerSpec(model="fake-model", served_model_name="fake-model",
                      command=[sys.executable, str(REPO / "tests" / "support" / "fake_vllm.py")])
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        plan = plan_launch(spec, "gpu", "fake-model", taken)
        with VllmServer(plan, tmp_path / "server.log", ready_timeout_s=60) as server:
            assert server.ports_taken == [taken]
            assert server.plan.port != taken and f"--port {server.plan.port}" in " ".join(
                server.plan.argv)
            with urllib.request.urlopen(f"{server.base_url}/v1/models", timeout=5) as answer:
                assert b"fake-model" in answer.read()
            pgid = server.pid
        assert pgid is not None and not process_group_alive(pgid)
    log = (tmp_path / "server.log").read_text()
    assert "address already in use" in log.lower()
    assert f"port {taken} was taken before vLLM bound it" in log
