"""Locust's distributed mode as its users run it across hosts: with `traffic.remote_workers`
the suite runs the master only, prints the worker command, and the rows of workers started by
hand (here: on this host, as separate processes, as another host would) reach the run folder,
each served request exactly once."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import (
    HEALTH_BOUNDS_OFF,
    cli_env,
    running_cli,
    standin_server,
)
from vllm_slo.servers.standin.cli import read_record_log

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_remote_workers_started_by_hand_deliver_every_row(tmp_path: Path) -> None:
    record = tmp_path / "served.jsonl"
    runs = tmp_path / "runs"
    workers: list[subprocess.Popen] = []
    arguments = ["run", "scenario=chat", "traffic.chat.output_tokens=8", "traffic.chat.turns=1",
                 "traffic.prefix_cache=keep", "traffic.chat.system_prompt_tokens=20",
                 "traffic.remote_workers=2", f"traffic.master_port={free_port()}",
                 "traffic.duration=5s", "traffic.warmup=1s",
                 "traffic.arrival={kind: closed, users: 8, spawn_rate: 8, think_time: 0s}",
                 "slo={}", *HEALTH_BOUNDS_OFF]
    with standin_server("--ttft", "0.02", "--itl", "0.005", "--record", str(record)) as url, \
            running_cli([*arguments, f"server.url={url}"], runs) as cli:
        output, command = [], [""]
        for line in cli.stdout:
            output.append(line)
            if "--worker" in line:
                command = line.split()
                break
        assert command[0] == "locust", "".join(output)
        assert command[command.index("--master-host") + 1] == "127.0.0.1"
        for _ in range(2):
            workers.append(subprocess.Popen(
                [sys.executable, "-m", *command], stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT, env=cli_env(), cwd=tmp_path))
        rest, _ = cli.communicate(timeout=240)
        output.append(rest)
    for worker in workers:
        worker.wait(30)
    text = "".join(output)
    assert cli.returncode == 0, text
    run_dir = next(runs.iterdir())
    table = pq.read_table(run_dir / "samples.parquet").to_pydict()
    assert set(table["process_id"]) == {w.pid for w in workers}  # rows from each worker
    row_ids = table["request_id"]
    assert len(row_ids) == len(set(row_ids)) > 50
    served = list(read_record_log(record))
    assert sorted(i for i in served if i in set(row_ids)) == sorted(row_ids)
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["locust_workers"] == 2 and provenance["locust_master"].startswith("127.")
