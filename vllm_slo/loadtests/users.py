"""The Locust side of vllm-slo: users that stream OpenAI-compatible requests from the run's
pre-sampled request plan and record one row per request. Locust runs them through the
locustfiles in the repository's loadtests/ folder (loadtests/locustfile.py, whose docstring
gives the command line); every reported number comes from the rows written to
`<run-dir>/samples/`, Locust's own statistics feed its console only.

Closed loop (`ClosedLoopUser`): each user works through one conversation at a time, turn after
turn, with think time; intended send time = actual send time. An agent session with
`fan_out` runs its sub-agents concurrently inside its user (one greenlet and connection per
sub-agent, every request through the same `send`), then its join turn.
Open loop (`OpenLoopUser`): users are the in-flight slots (`max_in_flight`); a free slot claims
the next scheduled arrival and sends it at its intended time. An arrival claimed after its time
(every slot was busy) is marked `queued_for_slot`; its latency counts from the intended time,
so queueing is included (coordinated-omission-safe).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import random
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
import numpy as np
from gevent.event import Event
from locust import User, constant, events, task
from locust.exception import StopUser
from locust.runners import MasterRunner, WorkerRunner
from locust.user.task import LOCUST_STATE_STOPPING, LOCUST_STATE_WAITING

from vllm_slo.loadtests import arrow_memory, locust_quirks, memory_trace
from vllm_slo.loadtests.agent_session import AgentSession
from vllm_slo.loadtests.arrivals import SCHEDULE_LEAD_S, schedule_offsets_s
from vllm_slo.loadtests.client_monitor import ClientMonitor
from vllm_slo.loadtests.lora_split import LoraSplit, request_model
from vllm_slo.loadtests.openai_stream import RequestOutcome, request_body, send_streamed
from vllm_slo.loadtests.plan import PlannedRequest, RequestPlan, read_plan
from vllm_slo.loadtests.prompts import flatten_for_completions
from vllm_slo.loadtests.reader_pump import pump
from vllm_slo.loadtests.remote_channel import MasterChannel, WorkerChannel
from vllm_slo.loadtests.remote_rows import SEND_ROWS_AT, TOKEN_ENV, Setup
from vllm_slo.loadtests.request_rows import request_row
from vllm_slo.loadtests.wall_clock import WallClock
from vllm_slo.run_folder.locust_config import LocustConfig
from vllm_slo.run_folder.run_files import PLAN_FILE
from vllm_slo.run_folder.samples_format import SAMPLES_DIR, RowBatcher, SampleWriter
from vllm_slo.scenarios.plugins import load_plugins
from vllm_slo.scenarios.traffic_spec import TrafficSpec
from vllm_slo.transport.http_stream import READ_COUNTERS, HttpStreamClient

if TYPE_CHECKING:
    from locust.argument_parser import LocustArgumentParser
    from locust.env import Environment

FLUSH_INTERVAL_S = 1.0
BACKOFF_FIRST_S = 0.05  # closed loop, after a request got no response at all: doubling waits
BACKOFF_MAX_S = 2.0
LATE_CLAIM_S = 0.001  # an arrival claimed later than this after its time waited for a slot
SETUP_WAIT_S = 60.0  # a remote worker's users wait this long for the master's setup
# the start gate (side-by-side rounds): a master polls for its workers this often, up to this
# long past the gate; a start later than the warning's bound is reported in locust.log
WORKERS_READY_POLL_S = 0.02
WORKERS_LATE_WAIT_S = 60.0
START_LATE_WARN_S = 0.1

locust_quirks.install()  # Locust behaviours that distort timings (locust_quirks.py)
arrow_memory.use_system_allocator()  # flat memory over long runs (arrow_memory.py)


class _Run:
    """Per-process state: configuration, plan, schedule, the sample writer and the
    self-monitor (vllm_slo/loadtests/client_monitor.py)."""

    def __init__(self) -> None:
        self.traffic: TrafficSpec | None = None
        self.model_id = ""
        self.lora: LoraSplit | None = None  # traffic.lora: the model each conversation names
        self.agent: AgentSession | None = None  # profile agent: tool latency, tool framing
        self.api_key: str | None = None
        self.run_dir: Path | None = None
        self.plan: RequestPlan | None = None
        self.conversations: list[list[int]] = []
        self.process_index = 0
        self.process_count = 1
        self.writer: RowBatcher | None = None  # a SampleWriter, or rows for the master
        self.channel: WorkerChannel | None = None  # a remote worker: the master's channel
        self.request_id_prefix = ""  # a remote worker: its stripe (ids unique across hosts)
        self.flusher: gevent.Greenlet | None = None
        self.monitor = ClientMonitor()
        self.wall_clock = WallClock()
        self.start_perf_s: float | None = None
        self.start_unix_s: float | None = None
        self.schedule_indices = np.empty(0, dtype=np.int64)
        self.schedule_offsets_s = np.empty(0)
        self.next_arrival = 0
        self.conversations_claimed = 0
        self.next_user_id = 0
        self.last_flush_perf_s = 0.0

    def configure(self, run_dir: Path, worker_index: int, runs_users: bool) -> None:
        self.run_dir = run_dir
        load_plugins()  # the metrics and profiles the CLI registered (VLLM_SLO_PLUGINS)
        config = LocustConfig.read(run_dir)
        self.traffic = config.traffic
        if not runs_users:  # a --processes master: it only needs the traffic (load shapes)
            return
        self._take(config, read_plan(run_dir / PLAN_FILE), worker_index % config.process_count)

    def configure_remote(self, setup: Setup) -> None:
        """A remote worker: the config, plan and stripe the master sent (nothing read from
        disk); its request ids carry its stripe, unique across hosts."""
        self.traffic = setup.config.traffic
        self.request_id_prefix = f"s{setup.stripe}-"
        self._take(setup.config, read_plan(setup.plan_bytes), setup.stripe)
        gc.collect()
        gc.freeze()

    def _take(self, config: LocustConfig, plan: RequestPlan, process_index: int) -> None:
        assert self.traffic is not None
        self.model_id = config.model_id
        key_env = config.api_key_env
        self.api_key = os.environ.get(key_env) if key_env else None
        self.process_count = config.process_count
        self.process_index = process_index
        self.plan = plan
        if self.traffic.lora:  # dealt to the plan's conversations
            self.lora = LoraSplit(self.traffic.lora, self.plan.requests)
        self.agent = AgentSession.of(self.traffic, self.plan.requests)
        by_conversation: dict[int, list[int]] = {}
        for position, request in enumerate(self.plan.requests):
            by_conversation.setdefault(request.conversation_id, []).append(position)
        self.conversations = list(by_conversation.values())
        if self.traffic.arrival.open_loop:
            offsets = schedule_offsets_s(self.traffic.arrival, self.traffic.total_s,
                                         self.traffic.seed,
                                         [request.arrival_s for request in plan.requests])
            indices = np.arange(offsets.size)
            mine = indices % self.process_count == self.process_index
            self.schedule_indices, self.schedule_offsets_s = indices[mine], offsets[mine]

    def start(self) -> None:
        if self.start_perf_s is None:
            lead = SCHEDULE_LEAD_S if self.traffic and self.traffic.arrival.open_loop else 0.0
            self.start_perf_s = time.perf_counter() + lead
            self.start_unix_s = self.wall_clock.unix_s(self.start_perf_s)
        self._start_monitoring()

    def _start_monitoring(self) -> None:
        """The lag timer and the once-a-second flusher/recorder (users' processes only)."""
        if self.flusher is None and (self.run_dir is not None or self.channel is not None):
            self.monitor.start()
            self.flusher = gevent.spawn(self._flush_forever)

    def claim_conversation(self) -> list[int]:
        """Closed loop: conversations in plan order, striped over processes; cycles at the end
        of the plan (reused prompts show up as repeated plan_index values)."""
        position = self.process_index + self.conversations_claimed * self.process_count
        self.conversations_claimed += 1
        return self.conversations[position % len(self.conversations)]

    def claim_arrival(self) -> tuple[int, float] | None:
        if self.next_arrival >= self.schedule_indices.size:
            return None
        k = self.next_arrival
        self.next_arrival += 1
        return int(self.schedule_indices[k]), float(self.schedule_offsets_s[k])

    def phase(self, offset_s: float) -> str:
        assert self.traffic is not None
        if offset_s < self.traffic.warmup_s:
            return "warmup"
        if offset_s < self.traffic.warmup_s + self.traffic.duration_s:
            return "measure"
        return "cooldown"

    def record(self, row: dict[str, Any]) -> None:
        """Keep one request's row; rows reach disk within about a second, flushed by a
        background greenlet and, should it be starved, by the next row after the interval."""
        if self.writer is None:
            self.writer = (RowBatcher() if self.channel is not None
                           else SampleWriter(self._new_samples_path()))
            self.last_flush_perf_s = time.perf_counter()
            self._start_monitoring()
        self.writer.append(row)
        if (time.perf_counter() - self.last_flush_perf_s > 2 * FLUSH_INTERVAL_S
                or (self.channel is not None and self.writer.rows_buffered >= SEND_ROWS_AT)):
            self.flush()

    def _new_samples_path(self) -> Path:
        """A file of this process's own that never replaces an earlier one (a row that arrives
        after the writer was closed, e.g. from a request still in flight at shutdown, starts a
        new file instead of truncating the old)."""
        assert self.run_dir is not None
        stem = f"samples-{socket.gethostname()}-{os.getpid()}"
        path = self.run_dir / SAMPLES_DIR / f"{stem}.arrows"
        part = 1
        while path.exists():
            part += 1
            path = self.run_dir / SAMPLES_DIR / f"{stem}-{part}.arrows"
        return path

    def flush(self) -> None:
        """Write the rows gathered so far. A failure is one line in locust.log, never the end
        of flushing: the next second's rows are written as ever (the writer itself never
        fails on a row's values: samples_format.SampleWriter)."""
        self.last_flush_perf_s = time.perf_counter()
        if self.channel is not None:  # a remote worker: rows (and monitor records) to the master
            try:
                self.channel.send([] if self.writer is None else self.writer.take_batches())
            except Exception as exc:  # the channel broken: say so, keep going
                print(f"vllm-slo: sending rows to the master failed: {type(exc).__name__}: "
                      f"{exc}", file=sys.stderr, flush=True)
            arrow_memory.release_unused()
            return
        if not isinstance(self.writer, SampleWriter):
            return
        try:
            self.writer.flush()
        except Exception as exc:  # e.g. a full disk: say so, keep going
            print(f"vllm-slo: writing rows to {self.writer.path} failed: "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        arrow_memory.release_unused()  # the batch's freed memory back to the system

    def _flush_forever(self) -> None:
        """Every second: flush rows, and append the self-monitor's record of that second
        (CPU, event-loop lag, socket reads / SSE events, requests in flight) to
        samples/client-<host>-<pid>.jsonl (a remote worker: both to the master)."""
        self.monitor.record()  # the first period starts now
        retries = READ_COUNTERS.keepalive_retries

        def next_record() -> dict[str, Any]:
            nonlocal retries
            record = self.monitor.record()
            # requests re-sent on a fresh connection (their idle keep-alive one had been
            # closed by the server: http_stream), and rows the writer had to mend or drop
            record["keepalive_retries"] = READ_COUNTERS.keepalive_retries - retries
            retries = READ_COUNTERS.keepalive_retries
            if self.writer is not None:
                record["rows_repaired"] = self.writer.rows_repaired
                record["rows_dropped"] = self.writer.rows_dropped
            return record

        if self.channel is not None:
            while True:
                gevent.sleep(FLUSH_INTERVAL_S)
                self.channel.client_records.append(next_record())
                self.flush()
        assert self.run_dir is not None
        stats_path = (self.run_dir / SAMPLES_DIR /
                      f"client-{socket.gethostname()}-{os.getpid()}.jsonl")
        stats_path.parent.mkdir(parents=True, exist_ok=True)
        with open(stats_path, "a") as stats:
            while True:
                gevent.sleep(FLUSH_INTERVAL_S)
                self.flush()
                record = next_record()
                try:
                    stats.write(json.dumps(record) + "\n")
                    stats.flush()
                except OSError as exc:
                    print(f"vllm-slo: writing {stats_path} failed: {exc}", file=sys.stderr,
                          flush=True)

    def finish_remote(self, complete: bool) -> None:
        """A remote worker's end (its users done: `complete`; a SIGTERM: not): the last rows
        and the unacknowledged batches to the master, and FINISHED when complete."""
        if self.channel is None or self.channel.finished:
            return
        self.flush()
        self.channel.finish(complete)

    def close(self) -> None:
        if self.flusher is not None:
            self.flusher.kill(block=False)
            self.flusher = None
        self.monitor.stop()
        if isinstance(self.writer, SampleWriter):
            self.writer.close()
        self.writer = None


RUN = _Run()


# (the listeners' ignores: Locust leaves EventHook.add_listener unannotated)
@events.init_command_line_parser.add_listener  # type: ignore[untyped-decorator]
def _add_arguments(parser: LocustArgumentParser) -> None:
    parser.add_argument("--vllm-slo-run-dir", type=str, default="",
                        help="vllm-slo run folder (holds locust_config.json and the plan)")
    parser.add_argument("--vllm-slo-start-at", type=float, default=0.0,
                        help="start the traffic at this wall-clock instant (Unix s), not as "
                             "soon as Locust is up (side-by-side rounds start together)")


def _wait_for_start_gate(environment: Environment, start_at_unix_s: float) -> None:
    """Hold this process (a standalone runner or the --processes master: the one that starts
    the test) until the agreed instant. Greenlets go on meanwhile (the master's workers
    connect), and Locust's --run-time counts from the start that follows. A master also
    waits here for its workers: Locust's own wait for them polls once a second, so workers
    ready just after the gate would start the traffic up to a second late (seen: 0.61 s)."""
    gevent.sleep(max(0.0, start_at_unix_s - time.time()))
    runner = environment.runner
    options = environment.parsed_options
    if isinstance(runner, MasterRunner) and options is not None:
        give_up_unix_s = start_at_unix_s + WORKERS_LATE_WAIT_S  # then Locust's wait goes on
        while (len(runner.clients.ready) < options.expect_workers
               and time.time() < give_up_unix_s):
            gevent.sleep(WORKERS_READY_POLL_S)
    late_s = time.time() - start_at_unix_s
    if late_s > START_LATE_WARN_S:
        print(f"vllm-slo: Locust was up {late_s:.2f}s after the agreed traffic start; "
              f"starting at once", flush=True)


def _remote_worker(environment: Environment, token: str) -> None:
    """A `vllm-slo worker`: everything from the master, rows back to it (remote_channel.py)."""
    load_plugins()  # the metrics and profiles registered here (VLLM_SLO_PLUGINS)
    RUN.channel = WorkerChannel(environment, token, RUN.configure_remote)

    # added after the runner's own: on SIGTERM, runs before it tells the master it quits
    @environment.events.quitting.add_listener  # type: ignore[untyped-decorator]
    def _cut(**_kwargs: Any) -> None:
        if RUN.channel is not None and not RUN.channel.finished:
            RUN.channel.cut = True  # whatever its users still record goes too, unfinished
            RUN.finish_remote(complete=False)

    @environment.events.test_stop.add_listener  # type: ignore[untyped-decorator]
    def _stopped(**_kwargs: Any) -> None:
        RUN.finish_remote(complete=True)


@events.init.add_listener  # type: ignore[untyped-decorator]
def _configure(environment: Environment, **_kwargs: Any) -> None:
    options = environment.parsed_options
    run_dir = getattr(options, "vllm_slo_run_dir", "") if options else ""
    token = os.environ.get(TOKEN_ENV, "")
    if not run_dir and token and isinstance(environment.runner, WorkerRunner):
        _remote_worker(environment, token)
        gevent.get_hub().loop.update_now()
        return
    if not run_dir:
        raise SystemExit("--vllm-slo-run-dir is required (a folder with locust_config.json); "
                         f"a remote worker needs {TOKEN_ENV} instead (`vllm-slo worker`)")
    master = isinstance(environment.runner, MasterRunner)
    RUN.configure(Path(run_dir), getattr(environment.runner, "worker_index", 0) or 0,
                  runs_users=not master)
    assert RUN.traffic is not None
    if master and RUN.traffic.remote_workers:
        if not token:
            raise SystemExit(f"traffic.remote_workers: the master needs {TOKEN_ENV}")
        MasterChannel(environment, Path(run_dir), LocustConfig.read(Path(run_dir)), token)
    # the plan and everything loaded so far live for the whole run: keep them out of the
    # cyclic collector's scans (a full collection over them paused every stream for ms)
    gc.collect()
    gc.freeze()
    start_at_unix_s = getattr(options, "vllm_slo_start_at", 0.0) if options else 0.0
    if start_at_unix_s and not isinstance(environment.runner, WorkerRunner):
        _wait_for_start_gate(environment, start_at_unix_s)
    # gevent's loop caches "now" and has not turned since the hub was made, before the slow
    # imports and the plan load: Locust's --run-time timer (spawn_later) would count from that
    # stale time and end the run early by as much (seen: a 6 s run stopped after 2.3 s)
    gevent.get_hub().loop.update_now()


@events.test_start.add_listener  # type: ignore[untyped-decorator]
def _started(environment: Environment, **_kwargs: Any) -> None:
    if not isinstance(environment.runner, MasterRunner):
        RUN.start()
        memory_trace.start_if_asked()  # a soak's diagnostic; nothing unless asked


@events.quitting.add_listener  # type: ignore[untyped-decorator]
def _quitting(environment: Environment, **_kwargs: Any) -> None:
    RUN.flush()  # users may still finish in-flight requests after this: keep the writer open


@events.quit.add_listener  # type: ignore[untyped-decorator]
def _quit(exit_code: int, **_kwargs: Any) -> None:
    RUN.close()  # after the runner stopped every user


atexit.register(RUN.close)  # also when a process ends some other way (e.g. a worker)


class _StreamingUser(User):
    abstract = True

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.stopping = Event()  # set when Locust asks this user to stop: wakes its waits

    def stop(self, force: bool = False) -> bool:
        """Locust kills a user it finds waiting, but the kill lands a loop turn later: a user
        whose wait ended meanwhile has sent its next request by then, and that request dies
        in flight (seen: 59 of 64 closed-loop users cancelled at the end of a run; Locust's
        stop blocks the loop ~0.1 s first, so most waits end in that turn). A waiting user is
        stopped gracefully instead, as Locust stops a busy one: marked stopping, its wait
        woken; it leaves at the next check without sending. `force` still kills."""
        if not force and self._state == LOCUST_STATE_WAITING:
            self._state = LOCUST_STATE_STOPPING
            self.stopping.set()
            return False
        killed: bool = super().stop(force)  # locust leaves its return unannotated
        if not killed:
            self.stopping.set()
        return killed

    def pause(self, seconds: float) -> None:
        """Wait inside a task (think time, back-off, an arrival's time); ends early and
        leaves the user (StopUser, nothing sent) once Locust asks it to stop."""
        if seconds > 0:
            self.stopping.wait(seconds)
        if self._state == LOCUST_STATE_STOPPING:
            raise StopUser()

    def on_start(self) -> None:
        if RUN.channel is not None and not RUN.channel.ready.wait(SETUP_WAIT_S):
            print(f"vllm-slo: no setup from the master within {SETUP_WAIT_S:g}s",
                  file=sys.stderr, flush=True)
            raise StopUser()
        assert RUN.traffic is not None
        RUN.start()
        self.user_id = RUN.next_user_id
        RUN.next_user_id += 1
        self.requests_sent = 0
        self.client = self.new_client()
        self.branch_clients: list[HttpStreamClient] = []  # an agent's sub-agents, one each

    def new_client(self) -> HttpStreamClient:
        assert RUN.traffic is not None
        # no timeout on each socket read (gevent arms a timer per wait: ~10% of the client's
        # CPU at 400 streams); one watchdog per request bounds it instead (send). The
        # process's reader pump reads every user's responses
        # (vllm_slo/loadtests/reader_pump.py); VLLM_SLO_READER=blocking reads in each user's
        # greenlet instead (for comparisons)
        reader = None if os.environ.get("VLLM_SLO_READER") == "blocking" else pump().read
        assert self.host is not None  # the launcher always passes --host
        return HttpStreamClient(self.host, RUN.traffic.request_timeout_s, RUN.api_key,
                                read_timeouts=False, reader=reader)

    def on_stop(self) -> None:
        self.client.close()
        for client in self.branch_clients:
            client.close()

    def send(self, position: int, intended_perf_s: float | None, queued: bool,
             client: HttpStreamClient | None = None) -> RequestOutcome:
        """Send plan entry `position` and record its row (on `client`: a sub-agent's own
        connection; None: the user's). Open loop: latencies count from the scheduled
        `intended_perf_s`; closed loop (None): from the actual send."""
        traffic, plan = RUN.traffic, RUN.plan
        assert traffic is not None and plan is not None  # _configure ran: this process has users
        request: PlannedRequest = plan.requests[position % len(plan.requests)]
        prompt = (list(request.messages) if traffic.endpoint == "chat"
                  else flatten_for_completions(request.messages))
        extra_body = traffic.extra_body
        if RUN.agent is not None and traffic.endpoint == "chat":  # the tool-call framing
            prompt, extra_body = RUN.agent.framed(request, extra_body)
        adapter = (None if RUN.lora is None
                   else RUN.lora.name_for(request.conversation_id))
        body = request_body(traffic.endpoint, request_model(adapter, RUN.model_id), prompt,
                            request.max_tokens, traffic.ignore_eos, traffic.temperature,
                            traffic.reasoning, extra_body)
        # unique per run: process, user, the user's own request count, plan entry
        request_id = (f"{RUN.request_id_prefix}{os.getpid()}-{self.user_id}-"
                      f"{self.requests_sent}-{request.index}")
        self.requests_sent += 1
        RUN.monitor.in_flight.enter()
        timeout_s = traffic.request_timeout_s

        def record(outcome: RequestOutcome) -> None:
            intended_s = outcome.send_perf_s if intended_perf_s is None else intended_perf_s
            start_perf_s = RUN.start_perf_s
            assert start_perf_s is not None  # set by RUN.start() in on_start
            row = request_row(
                request_id=request_id,
                process_id=os.getpid(), user_id=self.user_id, request=request,
                endpoint=traffic.endpoint, phase=RUN.phase(intended_s - start_perf_s),
                intended_perf_s=intended_s,
                send_unix_s=RUN.wall_clock.unix_s(outcome.send_perf_s), queued=queued,
                outcome=outcome)
            row["adapter"] = adapter  # traffic.lora's name (base included); None: no split
            if RUN.agent is not None:  # the requests of the request's session, its branch
                row["session_turns"] = RUN.agent.turns_of(request.conversation_id)
                row["branch"] = request.branch
            RUN.record(row)

        # the watchdog's TimeoutError interrupts the wait for the response (the pump lets go
        # of the socket, the client closes it): a timeout row with the chunks so far; a
        # request cut by Locust stopping its users is a `cancelled` row, not lost
        try:
            with gevent.Timeout(timeout_s, TimeoutError(
                    f"response not finished after {timeout_s:g}s (traffic.request_timeout)")):
                outcome = send_streamed(client or self.client, traffic.endpoint, body,
                                        request_id, on_cancel=record)
        finally:
            RUN.monitor.in_flight.leave()
        record(outcome)
        self.environment.events.request.fire(
            request_type="POST", name=f"{traffic.profile} {traffic.endpoint}",
            response_time=(outcome.end_perf_s - outcome.send_perf_s) * 1000.0,
            response_length=outcome.output_tokens or 0,
            exception=None if outcome.ok else RuntimeError(outcome.error), context={})
        return outcome


class ClosedLoopUser(_StreamingUser):
    """One conversation at a time, turn after turn, think time between requests (waited
    inside the task, see `pause`; Locust's own wait_time stays 0). An agent session's
    sub-agents run concurrently after its fan-out turn (`run_branches`)."""

    wait_time = constant(0)

    def on_start(self) -> None:
        super().on_start()
        self.pending: list[int] = []
        self.branches: tuple[tuple[int, ...], ...] = ()  # run after `fork_at` is answered
        self.fork_at: int | None = None
        self.backoff_s = 0.0

    def _claim(self) -> None:
        positions = RUN.claim_conversation()
        if RUN.agent is None:
            self.pending, self.branches, self.fork_at = list(positions), (), None
            return
        steps = RUN.agent.steps(positions)
        self.pending = [*steps.before, *steps.after]
        self.branches = steps.branches
        self.fork_at = steps.before[-1] if steps.branches and steps.before else None

    @task
    def next_turn(self) -> None:
        if not self.pending:
            self._claim()
        position = self.pending.pop(0)
        outcome = self.send(position, None, queued=False)
        if not outcome.ok:
            self.pending, self.branches = [], ()  # a failed turn ends its conversation
        traffic = RUN.traffic
        assert traffic is not None  # _configure ran
        if outcome.status_code:  # the server answered (an HTTP error too): go on, unless it
            self.backoff_s = 0.0  # asked for a pause (429/503 with Retry-After)
            longest_s = traffic.retry_after_max_s
            asked_s = min(outcome.retry_after_s or 0.0, longest_s or 0.0)
            wait_s = traffic.arrival.think_time_s
            if self.branches and position == self.fork_at:  # its sub-agents, then the join
                joined = self.run_branches(self.branches)
                self.branches = ()
                if not joined:  # a failed sub-agent ends its session
                    self.pending = []
                elif self.pending:
                    wait_s = 0.0  # the join is sent as soon as the last sub-agent ends
            elif RUN.agent is not None and self.pending:  # the session's next turn: its tool
                wait_s = RUN.agent.tool_latency_s(self.pending[0])
            self.pause(asked_s + wait_s)
            return
        # no response at all (refused, reset, timed out): the server may be gone; back off
        # instead of re-sending in a tight loop (seen: 16 users, 1,664 refused requests in 18 s)
        self.backoff_s = min(BACKOFF_MAX_S, max(BACKOFF_FIRST_S, 2 * self.backoff_s))
        self.pause(self.backoff_s * random.uniform(0.5, 1.0) + traffic.arrival.think_time_s)

    def run_branches(self, branches: tuple[tuple[int, ...], ...]) -> bool:
        """Run an agent session's sub-agents concurrently, one greenlet and connection each,
        and wait for all of them: True when every one completed its turns. Should this user
        be killed meanwhile (Locust's stop timeout), its sub-agents go too (a request in
        flight is recorded as cancelled, as the user's own)."""
        while len(self.branch_clients) < len(branches):
            self.branch_clients.append(self.new_client())
        greenlets = [gevent.spawn(self._run_branch, positions, client)
                     for positions, client in zip(branches, self.branch_clients, strict=False)]
        try:
            gevent.joinall(greenlets)
        finally:
            gevent.killall([greenlet for greenlet in greenlets if not greenlet.dead])
        self.pause(0)  # Locust asked this user to stop meanwhile: leave now
        return all(greenlet.value is True for greenlet in greenlets)

    def _run_branch(self, positions: tuple[int, ...], client: HttpStreamClient) -> bool:
        """One sub-agent: its turns in order with its tool's latency between them; False when
        a turn failed or Locust asked the user to stop."""
        assert RUN.agent is not None
        for k, position in enumerate(positions):
            if k:
                self.stopping.wait(RUN.agent.tool_latency_s(position))
                if self._state == LOCUST_STATE_STOPPING:
                    return False
            if not self.send(position, None, queued=False, client=client).ok:
                return False
        return True


class OpenLoopUser(_StreamingUser):
    """An in-flight slot: claims the next scheduled arrival and sends it on time."""

    wait_time = constant(0)

    @task
    def next_arrival(self) -> None:
        claimed = RUN.claim_arrival()
        if claimed is None:
            raise StopUser()
        position, offset_s = claimed
        assert RUN.start_perf_s is not None  # set by RUN.start() in on_start
        intended_perf_s = RUN.start_perf_s + offset_s
        now = time.perf_counter()
        queued = now > intended_perf_s + LATE_CLAIM_S
        self.pause(intended_perf_s - now)
        self.send(position, intended_perf_s, queued)
