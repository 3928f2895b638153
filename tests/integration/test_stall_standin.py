"""A server frozen mid-run (attach mode: the stand-in SIGSTOPped) keeps its connections open
and answers nothing; the run is invalid (exit 4) and names the stall with its time, though no
request timeout fired (its requests end as `cancelled` at the stop)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import cli_env, run_cli

pytestmark = pytest.mark.integration


def test_a_frozen_server_is_a_stall_not_a_pass(tmp_path: Path) -> None:
    standin = subprocess.Popen(
        [sys.executable, "-m", "vllm_slo.servers.standin", "--port", "0", "--ttft", "0.02",
         "--itl", "0.005"], stdout=subprocess.PIPE, text=True, env=cli_env(),
        start_new_session=True)
    url = standin.stdout.readline().split()[-1]
    freezer = subprocess.Popen(  # freeze it 3 s after the first rows reach disk
        [sys.executable, "-c", "import glob, os, signal, time\n"
         f"while not glob.glob({str(tmp_path)!r} + '/*/samples/samples-*.arrows'):\n"
         "    time.sleep(0.1)\n"
         f"time.sleep(3); os.kill({standin.pid}, signal.SIGSTOP)"])
    try:
        result = run_cli(["run", "scenario=chat", f"server.url={url}",
                          "traffic.chat.output_tokens=8", "traffic.chat.turns=1",
                          "traffic.prefix_cache=keep", "traffic.chat.system_prompt_tokens=20",
                          "traffic.duration=12s", "traffic.warmup=1s", "traffic.stop_timeout=3s",
                          "traffic.arrival={kind: closed, users: 8, spawn_rate: 8, "
                          "think_time: 0s}", "slo={error_rate: \"< 100%\"}"], tmp_path)
    finally:
        if freezer.poll() is None:
            freezer.kill()
        freezer.wait(10)
        if standin.poll() is None:  # frozen: wake it so that the kill is delivered and reaped
            os.kill(standin.pid, signal.SIGCONT)
            os.kill(standin.pid, signal.SIGKILL)
        standin.wait(10)
        standin.stdout.close()
    assert result.returncode == 4, result.output
    assert "server stalled: no chunk arrived on any of 8 streams" in result.output, result.output
    summary = json.loads((result.run_dir / "summary.json").read_text())
    (reason,) = [r for r in summary["invalid_reasons"] if "server stalled" in r]
    assert "cut by the client" in reason  # the frozen requests ended cancelled at the stop
