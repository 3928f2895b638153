"""`traffic.remote_workers` over Locust's own master/worker channel (ZeroMQ): the plan to every
worker and every row back, no shared file system (vllm_slo/loadtests/remote_rows.py holds the
messages and the row handling; this module the Locust side of them).

The master (the suite's Locust process, which has the run folder):
- admits a worker only once it has said the run token (HELLO): until then Locust's
  `client_ready` from it is held back, so a stray never counts as one of the expected workers
  and is never given users; a wrong token, no token within `HELLO_WAIT_S`, or one worker too
  many is refused (REFUSED, then Locust's `quit`), and named in `remote_workers.json`;
- sends each admitted worker the config, the plan and its stripe (SETUP) before Locust's own
  `client_ready` is let through (so before any `spawn` reaches it);
- writes the rows it receives (ROWS) into the run folder, one stream per worker, each request
  id once, and acknowledges each batch (ACK);
- watches the admitted workers: one that Locust's heartbeat marks missing, or that leaves
  before it said FINISHED, is lost, with its time and the rows it had delivered.

A worker (`vllm-slo worker`: `locust --worker` with the token in its environment) reads no
file: it says HELLO, takes its SETUP, sends its rows about once a second and at its end
(Locust's test_stop) its last rows, any batch long unacknowledged again, and FINISHED. On
SIGTERM it sends what it has, without FINISHED (the master counts it lost).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
from gevent.event import Event

from vllm_slo.loadtests.remote_rows import (
    ACK,
    EXIT_REFUSED,
    FINISHED,
    HELLO,
    REFUSED,
    RESEND_AFTER_S,
    ROWS,
    SETUP,
    Outbox,
    RowReceiver,
    Setup,
    encode_batches,
    read_setup,
    setup_message,
    token_matches,
)
from vllm_slo.run_folder.locust_config import LocustConfig
from vllm_slo.run_folder.remote_workers import RemoteWorkers, StrayWorker, WorkerRecord
from vllm_slo.run_folder.run_files import PLAN_FILE

if TYPE_CHECKING:
    import pyarrow as pa
    from locust.env import Environment

HELLO_WAIT_S = 10.0  # a connected worker that has not said the token by then is refused
WATCH_INTERVAL_S = 0.5
SAVE_INTERVAL_S = 1.0  # remote_workers.json rewritten (rows so far) at most this often


def _say(text: str) -> None:
    print(f"vllm-slo: {text}", file=sys.stderr, flush=True)


class MasterChannel:
    def __init__(self, environment: Environment, run_dir: Path, config: LocustConfig,
                 token: str) -> None:
        from locust.runners import MasterRunner

        runner = environment.runner
        assert isinstance(runner, MasterRunner)
        self.runner = runner
        self.run_dir = run_dir
        self.token = token
        self.expected = config.traffic.remote_workers
        self.config = config.model_copy(update={"process_count": self.expected})
        self.plan_bytes = (run_dir / PLAN_FILE).read_bytes()
        self.receiver = RowReceiver(run_dir)
        self.workers: dict[str, WorkerRecord] = {}
        self.strays: list[StrayWorker] = []
        self.stray_ids: set[str] = set()
        self.held: dict[str, Any] = {}
        self.traffic_start_unix_s: float | None = None
        self._let_through = runner.handle_message
        runner.handle_message = self._handle_message  # type: ignore[method-assign]
        runner.register_message(HELLO, self._hello)
        runner.register_message(ROWS, self._rows)
        runner.register_message(FINISHED, self._finished)
        # (Locust leaves EventHook.add_listener unannotated)
        environment.events.test_start.add_listener(self._test_started)  # type: ignore[no-untyped-call]
        environment.events.quit.add_listener(self._quit)  # type: ignore[no-untyped-call]
        self._watcher = gevent.spawn(self._watch)
        self.save()

    # --- admission
    def _handle_message(self, client_id: str, msg: Any) -> None:
        """Locust's own handling, except that a worker's `client_ready` waits for its HELLO
        (it is acknowledged at once, as Locust does, so the worker goes on to say it)."""
        if msg.type == "client_ready" and client_id not in self.workers:
            if client_id in self.stray_ids:
                return
            if client_id not in self.held:
                gevent.spawn_later(HELLO_WAIT_S, self._hello_overdue, client_id)
            self.held[client_id] = msg
            self.runner.send_message("ack", {"index": -1}, client_id=client_id)
            return
        self._let_through(client_id, msg)

    def _hello(self, environment: Environment, msg: Any, **_kwargs: Any) -> None:
        client_id, data = msg.node_id, msg.data if isinstance(msg.data, dict) else {}
        if client_id in self.workers or client_id in self.stray_ids:
            return
        given = data.get("token")
        if not token_matches(given, self.token):
            self._refuse(client_id, "no run token" if not given else "wrong run token")
            return
        if len(self.workers) >= self.expected:
            self._refuse(client_id, f"the run has its {self.expected} worker(s) already")
            return
        stripe = len(self.workers)
        self.workers[client_id] = WorkerRecord(
            worker_id=client_id, host=str(data.get("host", "?")),
            pid=int(data.get("pid", 0) or 0), stripe=stripe, joined_unix_s=time.time())
        self.runner.send_message(SETUP, setup_message(self.config, self.plan_bytes, stripe),
                                 client_id=client_id)
        _say(f"remote worker {client_id} joined (stripe {stripe}; {len(self.workers)} of "
             f"{self.expected})")
        held = self.held.pop(client_id, None)
        if held is not None:
            self._let_through(client_id, held)
        self.save()

    def _hello_overdue(self, client_id: str) -> None:
        if client_id in self.held and client_id not in self.workers:
            self._refuse(client_id, f"said no run token within {HELLO_WAIT_S:g}s "
                         f"(not a vllm-slo worker?)")

    def _refuse(self, client_id: str, reason: str) -> None:
        from locust.rpc import Message

        self.held.pop(client_id, None)
        self._stray(client_id, f"refused: {reason}")
        self.runner.send_message(REFUSED, {"reason": reason}, client_id=client_id)
        self.runner.server.send_to_client(Message("quit", None, client_id))  # type: ignore[no-untyped-call]

    def _stray(self, client_id: str, reason: str) -> None:
        if client_id in self.stray_ids:
            return
        self.stray_ids.add(client_id)
        self.strays.append(StrayWorker(worker_id=client_id, reason=reason,
                                       at_unix_s=time.time()))
        _say(f"worker {client_id} ignored: {reason}")
        self.save()

    # --- rows
    def _rows(self, environment: Environment, msg: Any, **_kwargs: Any) -> None:
        client_id, data = msg.node_id, msg.data if isinstance(msg.data, dict) else {}
        worker = self.workers.get(client_id)
        if worker is None or not token_matches(data.get("token"), self.token):
            self._stray(client_id, "rows without the run token (or from a worker not "
                        "admitted): not kept")
            return
        kept = duplicates = 0
        rows = data.get("rows")
        if isinstance(rows, bytes):
            try:
                kept, duplicates = self.receiver.receive(client_id, rows)
            except ValueError as error:
                _say(f"rows from {client_id} unreadable: {error}")
                return
        self.receiver.client_records(client_id, data.get("client"))
        self.workers[client_id] = worker.model_copy(update={
            "rows": worker.rows + kept, "duplicate_rows": worker.duplicate_rows + duplicates,
            "batches": worker.batches + 1})
        self.runner.send_message(ACK, {"seq": data.get("seq")}, client_id=client_id)

    def _finished(self, environment: Environment, msg: Any, **_kwargs: Any) -> None:
        worker = self.workers.get(msg.node_id)
        data = msg.data if isinstance(msg.data, dict) else {}
        if worker is None or not token_matches(data.get("token"), self.token):
            return
        self.workers[msg.node_id] = worker.model_copy(update={"finished": True})
        self.save()

    # --- losses
    def _watch(self) -> None:
        from locust.runners import STATE_MISSING

        next_save = time.monotonic() + SAVE_INTERVAL_S
        while True:
            gevent.sleep(WATCH_INTERVAL_S)
            for client_id, worker in list(self.workers.items()):
                if worker.finished or worker.lost_unix_s is not None:
                    continue
                client = self.runner.clients.get(client_id)
                if client is None:
                    self._lost(worker, "left before it finished (stopped, killed, or cut off)")
                elif client.state == STATE_MISSING:
                    self._lost(worker, "stopped answering Locust's heartbeat (killed or cut "
                               "off)")
            if time.monotonic() >= next_save:
                self.save()
                next_save = time.monotonic() + SAVE_INTERVAL_S

    def _lost(self, worker: WorkerRecord, reason: str) -> None:
        lost = worker.model_copy(update={"lost_unix_s": time.time(), "lost_reason": reason})
        self.workers[worker.worker_id] = lost
        _say(lost.loss(self.traffic_start_unix_s))
        self.save()

    def _test_started(self, **_kwargs: Any) -> None:
        if self.traffic_start_unix_s is None:
            self.traffic_start_unix_s = time.time()

    def _quit(self, **_kwargs: Any) -> None:
        """Locust's end (every worker has quit or gone missing): one admitted worker that
        never said it finished is lost now, at the latest."""
        self._watcher.kill(block=False)
        for worker in list(self.workers.values()):
            if not worker.finished and worker.lost_unix_s is None:
                self._lost(worker, "never said it finished by the end of the run")
        self.receiver.close()
        self.save()

    def record(self) -> RemoteWorkers:
        return RemoteWorkers(expected=self.expected,
                             traffic_start_unix_s=self.traffic_start_unix_s,
                             workers=tuple(self.workers.values()), strays=tuple(self.strays))

    def save(self) -> None:
        try:
            self.record().write(self.run_dir)
        except OSError as error:
            _say(f"writing the remote workers' record failed: {error}")


class WorkerChannel:
    """A worker's side: HELLO at once, SETUP handed to `on_setup`, rows out, acks in."""

    def __init__(self, environment: Environment, token: str,
                 on_setup: Callable[[Setup], None]) -> None:
        runner = environment.runner
        assert runner is not None
        self.runner = runner
        self.token = token
        self.on_setup = on_setup
        self.ready = Event()
        self.outbox = Outbox()
        self.client_records: list[dict[str, Any]] = []
        self.finished = False
        self.cut = False  # SIGTERM: its end is not FINISHED, however its users end
        self.runner.register_message(SETUP, self._setup)
        self.runner.register_message(REFUSED, self._refused)
        self.runner.register_message(ACK, self._ack)
        self.runner.send_message(HELLO, {"token": token, "host": socket.gethostname(),
                                         "pid": os.getpid()})

    def _setup(self, environment: Environment, msg: Any, **_kwargs: Any) -> None:
        try:
            setup = read_setup(msg.data)
            self.on_setup(setup)
        except ValueError as error:
            _say(f"the master's setup cannot be used: {error}")
            self._exit(EXIT_REFUSED)
        self.ready.set()

    def _refused(self, environment: Environment, msg: Any, **_kwargs: Any) -> None:
        reason = msg.data.get("reason") if isinstance(msg.data, dict) else None
        _say(f"the master refused this worker: {reason or 'no reason given'}")
        self._exit(EXIT_REFUSED)

    @staticmethod
    def _exit(code: int) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # nothing of the worker's is on disk to clean up

    def _ack(self, environment: Environment, msg: Any, **_kwargs: Any) -> None:
        self.outbox.ack(msg.data.get("seq") if isinstance(msg.data, dict) else None)

    def send(self, batches: list[pa.RecordBatch]) -> None:
        """Rows (and the self-monitor's records gathered meanwhile) to the master."""
        rows = sum(batch.num_rows for batch in batches)
        if not rows and not self.client_records:
            return
        payload = encode_batches(batches) if rows else b""
        seq = self.outbox.add(payload, rows) if rows else -1
        records, self.client_records = self.client_records, []
        self.runner.send_message(ROWS, {"token": self.token, "seq": seq,
                                        "rows": payload or None, "client": records})

    def finish(self, complete: bool) -> None:
        """The end: batches unacknowledged for RESEND_AFTER_S sent again (the master keeps
        each row once), and, when the worker's users ended as planned, FINISHED."""
        if self.finished:
            return
        for seq, payload in self.outbox.unacknowledged(RESEND_AFTER_S):
            self.runner.send_message(ROWS, {"token": self.token, "seq": seq, "rows": payload,
                                            "client": []})
        if complete and not self.cut:
            self.finished = True
            self.runner.send_message(FINISHED, {"token": self.token,
                                                "rows_sent": self.outbox.rows_sent})
