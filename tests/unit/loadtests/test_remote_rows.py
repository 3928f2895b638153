"""The remote workers' messages and rows without Locust: the setup a worker checks on arrival,
row batches as Arrow IPC bytes, the worker's bounded outbox, the master's writer that keeps
each request id once, the master's record of joins, losses and strays, and the worker
command's address parsing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_slo import cli
from vllm_slo.loadtests.locust_launcher import parse_master_address, worker_argv
from vllm_slo.loadtests.plan import build_plan, read_plan, write_plan
from vllm_slo.loadtests.remote_rows import (
    Outbox,
    RowReceiver,
    decode_batches,
    encode_batches,
    read_setup,
    setup_message,
    token_matches,
)
from vllm_slo.reports.samples import consolidate
from vllm_slo.run_folder.locust_config import LocustConfig
from vllm_slo.run_folder.remote_workers import RemoteWorkers, StrayWorker, WorkerRecord
from vllm_slo.run_folder.samples_format import RowBatcher
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.traffic_spec import TrafficSpec


def _row(request_id: str, offset_s: float = 0.0) -> dict:
    return {"request_id": request_id, "process_id": 7, "user_id": 0, "plan_index": 1,
            "phase": "measure", "endpoint": "chat", "intended_send_unix_s": 1.8e9 + offset_s,
            "send_unix_s": 1.8e9 + offset_s, "send_lag_s": 0.0, "status_code": 200,
            "ok": True, "chunk_offsets_s": [0.01, 0.02], "chunk_tokens": [1, 1]}


def _payload(*request_ids: str) -> bytes:
    batcher = RowBatcher()
    for k, request_id in enumerate(request_ids):
        batcher.append(_row(request_id, k))
    return encode_batches(batcher.take_batches())


def _config(workers: int = 2) -> LocustConfig:
    traffic = TrafficSpec.model_validate({"profile": "chat", "remote_workers": workers})
    return LocustConfig(traffic=traffic, model_id="tiny", process_count=workers)


def test_rows_survive_the_ipc_bytes() -> None:
    batches = decode_batches(_payload("a", "b", "c"))
    assert [r for b in batches for r in b.column("request_id").to_pylist()] == ["a", "b", "c"]
    assert batches[0].column("chunk_offsets_s").to_pylist()[0] == pytest.approx([0.01, 0.02])
    with pytest.raises(ValueError, match="not an Arrow IPC stream"):
        decode_batches(b"not arrow")


def test_receiver_keeps_each_request_id_once_across_resends_and_workers(tmp_path: Path
                                                                        ) -> None:
    receiver = RowReceiver(tmp_path)
    assert receiver.receive("host_a", _payload("s0-1", "s0-2")) == (2, 0)
    assert receiver.receive("host_a", _payload("s0-1", "s0-2", "s0-3")) == (1, 2)  # a resend
    assert receiver.receive("host_b", _payload("s1-1", "s1-1")) == (1, 1)  # twice in one batch
    receiver.client_records("host_b", [{"cpu_fraction": 0.5}, "not a record"])
    receiver.close()
    table = consolidate(tmp_path)
    assert sorted(table.column("request_id").to_pylist()) == ["s0-1", "s0-2", "s0-3", "s1-1"]
    written = sorted(p.name for p in (tmp_path / "samples").iterdir())
    assert written == ["client-remote-host_b.jsonl", "samples-remote-host_a.arrows",
                       "samples-remote-host_b.arrows"]
    records = (tmp_path / "samples" / "client-remote-host_b.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in records] == [{"cpu_fraction": 0.5}]


def test_outbox_keeps_unacknowledged_batches_within_its_bound() -> None:
    outbox = Outbox(max_bytes=250)
    first = outbox.add(b"x" * 100, rows=3, now_s=10.0)
    second = outbox.add(b"y" * 100, rows=2, now_s=11.0)
    outbox.ack(first)
    outbox.ack("junk")  # an ack that names no batch changes nothing
    assert outbox.unacknowledged(now_s=11.0) == [(second, b"y" * 100)]
    third = outbox.add(b"z" * 100, rows=1, now_s=12.5)
    fourth = outbox.add(b"w" * 100, rows=1, now_s=13.0)  # 300 bytes waiting: the oldest goes
    assert [seq for seq, _ in outbox.unacknowledged(now_s=13.0)] == [third, fourth]
    assert outbox.given_up == 1 and outbox.waiting_bytes == 200 and outbox.rows_sent == 7
    # at the end only the batches long unacknowledged are resent (an ack takes milliseconds)
    assert [seq for seq, _ in outbox.unacknowledged(2.0, now_s=14.6)] == [third]


def test_setup_round_trip_and_a_damaged_plan_refused(tmp_path: Path, tiny_counter) -> None:
    config = _config(2)
    plan = build_plan(config.traffic, tiny_counter, 4096, 12)
    write_plan(plan, tmp_path / "plan.parquet")
    data = (tmp_path / "plan.parquet").read_bytes()
    setup = read_setup(setup_message(config, data, 1))
    assert setup.stripe == 1 and setup.config == config
    assert read_plan(setup.plan_bytes).requests == plan.requests
    damaged = setup_message(config, data, 1)
    damaged["plan"] = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(ValueError, match="the plan arrived damaged"):
        read_setup(damaged)
    with pytest.raises(ValueError, match="stripe 2 of 2 workers"):
        read_setup(setup_message(config, data, 2))


def test_token_check() -> None:
    assert token_matches("abc", "abc")
    assert not token_matches("abd", "abc")
    assert not token_matches(None, "abc")
    assert not token_matches(b"abc", "abc")


def _worker(stripe: int, **fields: object) -> WorkerRecord:
    return WorkerRecord(worker_id=f"h{stripe}_ff", host=f"h{stripe}", pid=100 + stripe,
                        stripe=stripe, joined_unix_s=1000.0, **fields)


def test_record_names_losses_missing_workers_and_unfinished_ones(tmp_path: Path) -> None:
    good = RemoteWorkers(expected=2, traffic_start_unix_s=1001.0, workers=(
        _worker(0, rows=50, finished=True), _worker(1, rows=40, finished=True)))
    assert good.problems() == [] and good.rows == 90
    lost = RemoteWorkers(expected=3, traffic_start_unix_s=1001.0, workers=(
        _worker(0, rows=50, finished=True),
        _worker(1, rows=12, lost_unix_s=1004.5, lost_reason="stopped answering"),
    ), strays=(StrayWorker(worker_id="x_1", reason="refused: wrong run token",
                           at_unix_s=1000.5),))
    assert lost.problems() == [
        "only 2 of 3 remote workers joined",
        "remote worker h1_ff (stripe 1) lost 3.5s into the run: stopped answering; "
        "12 rows delivered"]
    unfinished = RemoteWorkers(expected=1, workers=(_worker(0, rows=5),))
    assert unfinished.problems() == [
        "remote worker h0_ff (stripe 0) never said it finished; 5 rows delivered"]
    lost.write(tmp_path)
    assert RemoteWorkers.read(tmp_path) == lost
    assert RemoteWorkers.read(tmp_path / "nowhere") is None


@pytest.mark.parametrize(("text", "expected"), [
    ("10.0.0.5:5557", ("10.0.0.5", 5557)), ("master.svc:1", ("master.svc", 1)),
    ("[::1]:5557", ("::1", 5557))])
def test_master_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_master_address(text) == expected


@pytest.mark.parametrize("text", ["10.0.0.5", "host:0", "host:70000", ":5557", "::1:5557"])
def test_bad_master_address_is_a_usage_error(text: str) -> None:
    with pytest.raises(ScenarioError, match="expected HOST:PORT"):
        parse_master_address(text)


def test_worker_command_round_trips_through_the_address_parser() -> None:
    traffic = TrafficSpec.model_validate({"profile": "chat", "remote_workers": 2,
                                          "master_port": 6000})
    argv = worker_argv(traffic, "::1", "tok")
    assert argv == ["vllm-slo", "worker", "--master", "[::1]:6000", "--token=tok"]
    assert parse_master_address(argv[3]) == ("::1", 6000)


def test_a_token_that_begins_with_a_dash_reaches_the_worker_as_its_value() -> None:
    # secrets.token_urlsafe begins with `-` one time in 64: `--token -x` was a usage error
    traffic = TrafficSpec.model_validate({"profile": "chat", "remote_workers": 1})
    argv = worker_argv(traffic, "127.0.0.1", "-BlONcDPr2RJP67")
    options = cli._parser().parse_args(argv[1:])
    assert options.token == "-BlONcDPr2RJP67"
    assert options.master == f"127.0.0.1:{traffic.master_port}"
