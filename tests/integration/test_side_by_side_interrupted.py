"""Ctrl-C during round 2 of a side-by-side experiment stops both launched servers and both
Locusts, keeps every round's rows, and says the experiment was cut. The servers are the
launched stand-in (tests/support/fake_vllm.py, behind vLLM's command line): what is tested is
the suite's handling of two launched process groups at once, without vLLM's start-up cost.
The same rounds on real vLLM run to completion in test_side_by_side_vllm_cpu.py."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.conftest import (
    FAKE_VLLM,
    HEALTH_BOUNDS_OFF,
    only_run_dir,
    processes_in_group,
    running_cli,
    signal_and_wait,
    wait_for,
)
from vllm_slo.transport.processes import process_group_alive

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def interrupted_in_round_two(tmp_path_factory: pytest.TempPathFactory):
    runs = tmp_path_factory.mktemp("side")
    arguments = [
        "run", "scenario=chat", *FAKE_VLLM, "trials=2",
        "variants={a: {}, b: {server: {args: {max-num-seqs: 2}}}}",
        "side_by_side={devices: [[0], [1]]}",
        "traffic.duration=8s", "traffic.warmup=1s", "traffic.arrival.users=4",
        "traffic.arrival.spawn_rate=100", "traffic.arrival.think_time=0s",
        "compare.cells=[ttft.p50]", *HEALTH_BOUNDS_OFF]
    with running_cli(arguments, runs) as cli:
        def round_two_sending() -> bool:
            run_dir = only_run_dir(runs)
            folders = sorted((run_dir / "trials").glob("00[34]-*")) if run_dir else []
            return len(folders) == 2 and all(list((f / "samples").glob("*.arrows"))
                                             for f in folders)

        wait_for(round_two_sending, 300, "round 2's traffic")
        time.sleep(2)
        output = signal_and_wait(cli, signal.SIGINT)
    run_dir = only_run_dir(runs)
    assert run_dir is not None
    trials = {folder.name: folder for folder in sorted((run_dir / "trials").iterdir())}
    return cli.returncode, output, run_dir, trials


def provenance(folder: Path) -> dict:
    return json.loads((folder / "provenance.json").read_text())


def test_ctrl_c_in_round_two_stops_both_and_keeps_the_rows(interrupted_in_round_two) -> None:
    returncode, output, run_dir, trials = interrupted_in_round_two
    assert returncode == 4, output
    assert "interrupted" in output
    assert list(trials) == ["001-a-1", "002-b-1", "003-b-2", "004-a-2"], output
    pids = {provenance(folder)["server_pid"] for folder in trials.values()}
    assert len(pids) == 4  # a launched server per trial
    for pgid in pids:
        wait_for(lambda pgid=pgid: not process_group_alive(pgid), 10, f"group {pgid} to end")
        assert not processes_in_group(pgid)
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True,
                             text=True).stdout
    assert not [line for line in listing.splitlines()
                if "locust" in line and str(run_dir) in line]
    for name in ("001-a-1", "002-b-1"):  # round 1 ran to its end
        summary = json.loads((trials[name] / "summary.json").read_text())
        assert summary["invalid_reasons"] == [], summary["invalid_reasons"]
    for name in ("003-b-2", "004-a-2"):
        summary = json.loads((trials[name] / "summary.json").read_text())
        assert "the run was interrupted before its planned end" in summary["invalid_reasons"]
        assert summary["requests"]["ok"] > 0  # rows recorded before Ctrl-C were kept
    experiment = json.loads((run_dir / "summary.json").read_text())
    assert "the experiment was interrupted before its planned end" in \
        experiment["invalid_reasons"]
    confound = [w for w in experiment["warnings"] if w.startswith("side by side")]
    assert confound and "a on [0], [1]; b on [1], [0]" in confound[0], experiment["warnings"]
