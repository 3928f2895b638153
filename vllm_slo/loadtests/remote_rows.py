"""Rows and the plan through Locust's master/worker channel (`traffic.remote_workers`), the
parts that need no Locust: what each message holds, the worker's outbox of row batches, and
the master's writer of the rows it receives. The channel itself (Locust's `send_message` /
`register_message`) is vllm_slo/loadtests/remote_channel.py.

A worker keeps nothing on disk: it gets the run's config and plan from the master
(`setup_message`, the plan's bytes checked against their sha256 on arrival), sends its rows
as Arrow IPC stream bytes (`encode_batches`) about once a second, and keeps each batch until
the master acknowledges it (at most `OUTBOX_MAX_BYTES`; beyond that the oldest are no longer
kept for a resend). At its end it resends what was still not acknowledged `RESEND_AFTER_S`
after it was sent (an acknowledgement takes milliseconds: such a batch was likely lost on a
broken connection); the master keeps each request id once (`RowReceiver`), so a batch that
arrives twice adds nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

from vllm_slo.run_folder.locust_config import LocustConfig
from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA, SAMPLES_DIR

# message types on Locust's channel
HELLO = "vllm_slo_hello"  # worker -> master: {token, host, pid}
SETUP = "vllm_slo_setup"  # master -> worker: {config, plan, plan_sha256, stripe}
REFUSED = "vllm_slo_refused"  # master -> worker: {reason}
ROWS = "vllm_slo_rows"  # worker -> master: {token, seq, rows (IPC bytes), client (records)}
ACK = "vllm_slo_ack"  # master -> worker: {seq}
FINISHED = "vllm_slo_finished"  # worker -> master: {token, rows_sent}

TOKEN_ENV = "VLLM_SLO_RUN_TOKEN"  # how the token reaches a worker (never its command line)
OUTBOX_MAX_BYTES = 64 * 2**20  # unacknowledged row bytes a worker keeps for a resend
RESEND_AFTER_S = 2.0  # at its end a worker resends batches unacknowledged this long
SEND_ROWS_AT = 2000  # a worker sends early when this many rows are waiting (bounded memory)
EXIT_REFUSED = 3  # a worker's exit status when the master refused it


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def token_matches(given: Any, expected: str) -> bool:
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


def encode_batches(batches: Iterable[pa.RecordBatch]) -> bytes:
    """Row batches as one Arrow IPC stream (schema first), the bytes a ROWS message carries."""
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, SAMPLE_SCHEMA) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return bytes(sink.getvalue().to_pybytes())


def decode_batches(data: bytes) -> list[pa.RecordBatch]:
    """The batches of a ROWS message; ValueError when they are not rows of this schema."""
    try:
        reader = ipc.open_stream(pa.BufferReader(data))
        batches = list(reader)
    except (pa.ArrowInvalid, OSError) as error:
        raise ValueError(f"not an Arrow IPC stream of rows ({error})") from error
    if not reader.schema.equals(SAMPLE_SCHEMA, check_metadata=False):
        raise ValueError("rows in another schema than this suite's (a different version?)")
    return batches


@dataclass(frozen=True, slots=True)
class Setup:
    """What a worker needs to send its share: the config, the plan's parquet bytes, its stripe."""

    config: LocustConfig
    plan_bytes: bytes
    stripe: int


def setup_message(config: LocustConfig, plan_bytes: bytes, stripe: int) -> dict[str, Any]:
    return {"config": config.model_dump_json(by_alias=True), "plan": plan_bytes,
            "plan_sha256": sha256_hex(plan_bytes), "stripe": stripe}


def read_setup(data: Any) -> Setup:
    """A SETUP message's content; ValueError naming what is wrong (the plan's bytes not
    those the master hashed, a config this suite cannot read, no stripe)."""
    if not isinstance(data, dict):
        raise ValueError("the setup message is not a mapping")
    plan = data.get("plan")
    if not isinstance(plan, bytes):
        raise ValueError("the setup message holds no plan")
    if sha256_hex(plan) != data.get("plan_sha256"):
        raise ValueError(f"the plan arrived damaged: sha256 {sha256_hex(plan)[:12]}, the "
                         f"master sent {str(data.get('plan_sha256'))[:12]}")
    stripe = data.get("stripe")
    if not isinstance(stripe, int) or stripe < 0:
        raise ValueError(f"the setup message's stripe is {stripe!r}")
    config = LocustConfig.model_validate_json(data.get("config") or "")
    if stripe >= config.process_count:
        raise ValueError(f"stripe {stripe} of {config.process_count} workers")
    return Setup(config, plan, stripe)


class Outbox:
    """A worker's sent row batches awaiting the master's acknowledgement, oldest first; at
    most `max_bytes` of them (the oldest beyond that are dropped from the outbox: they were
    sent once, but will not be resent)."""

    def __init__(self, max_bytes: int = OUTBOX_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._waiting: OrderedDict[int, tuple[bytes, float]] = OrderedDict()
        self._bytes = 0
        self.next_seq = 0
        self.rows_sent = 0
        self.given_up = 0  # batches dropped unacknowledged to stay within max_bytes

    def add(self, payload: bytes, rows: int, now_s: float | None = None) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.rows_sent += rows
        self._waiting[seq] = (payload, time.monotonic() if now_s is None else now_s)
        self._bytes += len(payload)
        while self._bytes > self.max_bytes and len(self._waiting) > 1:
            _, (dropped, _sent) = self._waiting.popitem(last=False)
            self._bytes -= len(dropped)
            self.given_up += 1
        return seq

    def ack(self, seq: Any) -> None:
        waiting = self._waiting.pop(seq, None) if isinstance(seq, int) else None
        if waiting is not None:
            self._bytes -= len(waiting[0])

    def unacknowledged(self, older_than_s: float = 0.0, now_s: float | None = None
                       ) -> list[tuple[int, bytes]]:
        """(seq, payload) of the batches waiting for an ack longer than `older_than_s`."""
        now_s = time.monotonic() if now_s is None else now_s
        return [(seq, payload) for seq, (payload, sent_s) in self._waiting.items()
                if now_s - sent_s >= older_than_s]

    @property
    def waiting_bytes(self) -> int:
        return self._bytes


_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def safe_name(worker_id: str) -> str:
    """A worker id as a file name part (Locust's ids are `<hostname>_<hex>`)."""
    return _UNSAFE.sub("-", worker_id)[:120] or "worker"


@dataclass(slots=True)
class _Stream:
    sink: Any
    writer: Any


@dataclass
class RowReceiver:
    """The master's side of the rows: each worker's batches appended to its own IPC stream
    `samples/samples-remote-<worker>.arrows` (as a local worker's rows are written), its
    monitor records to `samples/client-remote-<worker>.jsonl`; a request id already kept is
    not written again (counted as a duplicate)."""

    run_dir: Path
    _seen: set[str] = field(default_factory=set)
    _streams: dict[str, _Stream] = field(default_factory=dict)

    def receive(self, worker_id: str, payload: bytes) -> tuple[int, int]:
        """Write a ROWS payload's new rows; (rows kept, duplicates). ValueError: unreadable."""
        kept = duplicates = 0
        for batch in decode_batches(payload):
            fresh = []
            for request_id in batch.column("request_id").to_pylist():
                fresh.append(request_id not in self._seen)  # a repeat in one batch too
                self._seen.add(request_id)
            new = batch if all(fresh) else batch.filter(pa.array(fresh, type=pa.bool_()))
            duplicates += batch.num_rows - new.num_rows
            if new.num_rows:
                self._stream(worker_id).writer.write_batch(new)
                kept += new.num_rows
        if kept:
            self._streams[worker_id].sink.flush()
        return kept, duplicates

    def client_records(self, worker_id: str, records: Any) -> None:
        """A worker's self-monitor records (one a second), as local workers write theirs."""
        if not isinstance(records, list) or not records:
            return
        path = self.run_dir / SAMPLES_DIR / f"client-remote-{safe_name(worker_id)}.jsonl"
        with open(path, "a") as out:
            for record in records:
                if isinstance(record, dict):
                    out.write(json.dumps(record) + "\n")

    def _stream(self, worker_id: str) -> _Stream:
        stream = self._streams.get(worker_id)
        if stream is None:
            path = self.run_dir / SAMPLES_DIR / f"samples-remote-{safe_name(worker_id)}.arrows"
            path.parent.mkdir(parents=True, exist_ok=True)
            sink = pa.OSFile(str(path), "wb")
            stream = self._streams[worker_id] = _Stream(sink, ipc.new_stream(sink, SAMPLE_SCHEMA))
        return stream

    def close(self) -> None:
        for stream in self._streams.values():
            stream.writer.close()
            stream.sink.close()
        self._streams.clear()

