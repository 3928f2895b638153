"""An impatient second Ctrl-C (issue 25): while the run stops its server and Locust after the
first, a second SIGINT is acknowledged, not obeyed, so the run still consolidates
samples.parquet and writes summary.json and its report, exits 4 ("interrupted") and leaves no
process; never exit 130 with a KeyboardInterrupt traceback. Launch mode, with the known-timing
stand-in behind vLLM's command line (tests/support/fake_vllm.py)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import (
    FAKE_VLLM,
    HEALTH_BOUNDS_OFF,
    only_run_dir,
    running_cli,
    wait_for,
)

pytestmark = pytest.mark.integration


def _rows_on_disk(runs: Path) -> bool:
    run_dir = only_run_dir(runs)
    return run_dir is not None and any(
        path.stat().st_size > 1000 for path in (run_dir / "samples").glob("samples-*.arrows"))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_second_ctrl_c_while_stopping_still_leaves_the_report(tmp_path: Path) -> None:
    with running_cli(["run", "scenario=chat", *FAKE_VLLM, *HEALTH_BOUNDS_OFF,
                      "traffic.duration=60s", "traffic.warmup=1s",
                      "traffic.arrival={kind: closed, users: 4, spawn_rate: 100, "
                      "think_time: 0.05s}"], tmp_path) as cli:
        wait_for(lambda: _rows_on_disk(tmp_path), 120, "rows on disk", poll_s=0.2)
        run_dir = only_run_dir(tmp_path)
        assert run_dir is not None
        time.sleep(1.5)
        os.killpg(cli.pid, signal.SIGINT)  # the terminal's Ctrl-C
        time.sleep(0.3)  # the run is stopping Locust and the server
        os.killpg(cli.pid, signal.SIGINT)  # and again, impatiently
        output, _ = cli.communicate(timeout=90)
    assert cli.returncode == 4, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert "vllm-slo: stopping already" in output
    assert "interrupted" in output
    status = json.loads((run_dir / "run_status.json").read_text())
    assert status["interrupted"] is True
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 4
    assert "the run was interrupted before its planned end" in summary["invalid_reasons"]
    assert (run_dir / "report.html").is_file()
    assert pq.read_table(run_dir / "samples.parquet").num_rows > 0
    server_pid = json.loads((run_dir / "provenance.json").read_text()).get("server_pid")
    assert server_pid is not None and not _alive(server_pid), "the launched server is left"
