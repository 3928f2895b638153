"""The Locust side of vllm-slo: users that stream OpenAI-compatible requests and record one
row per request. Run by the suite as

    locust -f loadtests/locustfile.py --headless --host URL -u N -r R -t T \
        --vllm-slo-run-dir runs/<id>

and usable by hand the same way (it reads `<run-dir>/locust_config.json`, written by the
suite). Locust's own statistics are fed for its live UI only; every reported number comes from
the rows written to `<run-dir>/samples/`.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import gevent
from locust import User, constant, events, task
from locust.runners import MasterRunner

from loadtests.http_stream import HttpStreamClient
from loadtests.openai_stream import request_body, send_streamed
from loadtests.prompts import ChatSource, flatten_for_completions
from reports.samples import SAMPLES_DIR, SampleWriter
from scenarios.model import TrafficSpec
from scenarios.run_files import LOCUST_CONFIG_FILE

FLUSH_INTERVAL_S = 1.0


class _Recorder:
    """Per-process state: the traffic spec, the prompt source and the sample writer."""

    traffic: TrafficSpec | None = None
    model_id = ""
    api_key: str | None = None
    run_dir: Path | None = None
    source: ChatSource | None = None
    writer: SampleWriter | None = None
    start_unix_s: float | None = None
    next_user_id = 0
    flusher: gevent.Greenlet | None = None

    def ensure_writer(self) -> SampleWriter:
        if self.writer is None:
            assert self.run_dir is not None
            name = f"samples-{socket.gethostname()}-{os.getpid()}.arrows"
            self.writer = SampleWriter(self.run_dir / SAMPLES_DIR / name)
            self.flusher = gevent.spawn(self._flush_forever)
        return self.writer

    def _flush_forever(self) -> None:
        while True:
            gevent.sleep(FLUSH_INTERVAL_S)
            if self.writer is not None:
                self.writer.flush()

    def phase(self, intended_unix_s: float) -> str:
        assert self.traffic is not None
        start = self.start_unix_s if self.start_unix_s is not None else intended_unix_s
        elapsed = intended_unix_s - start
        if elapsed < self.traffic.warmup_s:
            return "warmup"
        if elapsed < self.traffic.warmup_s + self.traffic.duration_s:
            return "measure"
        return "cooldown"

    def close(self) -> None:
        if self.flusher is not None:
            self.flusher.kill(block=False)
            self.flusher = None
        if self.writer is not None:
            self.writer.close()
            self.writer = None


RECORDER = _Recorder()


@events.init_command_line_parser.add_listener
def _add_arguments(parser) -> None:
    parser.add_argument("--vllm-slo-run-dir", type=str, default="",
                        help="vllm-slo run folder (holds locust_config.json; rows go there)")


@events.init.add_listener
def _configure(environment, **_kwargs) -> None:
    options = environment.parsed_options
    run_dir = getattr(options, "vllm_slo_run_dir", "") if options else ""
    if not run_dir:
        raise SystemExit("--vllm-slo-run-dir is required (a folder with locust_config.json)")
    RECORDER.run_dir = Path(run_dir)
    config = json.loads((RECORDER.run_dir / LOCUST_CONFIG_FILE).read_text())
    traffic = TrafficSpec.model_validate(config["traffic"])
    RECORDER.traffic = traffic
    RECORDER.model_id = config["model_id"]
    key_env = config.get("api_key_env")
    RECORDER.api_key = os.environ.get(key_env) if key_env else None
    ChatUser.wait_time = constant(traffic.arrival.think_time_s)
    runner = environment.runner
    index = getattr(runner, "worker_index", 0) or 0
    count = max(1, int(config.get("process_count", 1)))
    RECORDER.source = ChatSource(traffic.chat, traffic.seed, index % count, count)


@events.test_start.add_listener
def _started(environment, **_kwargs) -> None:
    if RECORDER.start_unix_s is None:
        RECORDER.start_unix_s = time.time()


@events.quitting.add_listener
def _quitting(environment, **_kwargs) -> None:
    if not isinstance(environment.runner, MasterRunner):
        RECORDER.close()


class ChatUser(User):
    """Closed loop: one conversation at a time; a new one starts when the last turn is done."""

    def on_start(self) -> None:
        assert RECORDER.traffic is not None
        self.user_id = RECORDER.next_user_id
        RECORDER.next_user_id += 1
        self.client = HttpStreamClient(self.host, RECORDER.traffic.request_timeout_s,
                                       RECORDER.api_key)
        self.conversation = RECORDER.source.new_conversation()

    def on_stop(self) -> None:
        self.client.close()

    @task
    def chat_turn(self) -> None:
        traffic = RECORDER.traffic
        spec = traffic.chat
        if self.conversation.finished:
            self.conversation = RECORDER.source.new_conversation()
        turn = self.conversation.next_request()
        prompt = (list(turn.messages) if spec.endpoint == "chat"
                  else flatten_for_completions(turn.messages))
        body = request_body(spec.endpoint, RECORDER.model_id, prompt, turn.max_tokens,
                            spec.ignore_eos, spec.temperature)
        send_unix_s = time.time()
        outcome = send_streamed(self.client, spec.endpoint, body)
        if outcome.ok:
            self.conversation.record_answer(outcome.text)
        else:  # a failed turn ends the conversation; the next task starts a fresh one
            self.conversation.next_turn = spec.turns
        intended = outcome.send_perf_s  # closed loop: intended == actual send
        writer = RECORDER.ensure_writer()
        writer.append({
            "request_id": f"{os.getpid()}-{self.user_id}-{turn.conversation_id}-{turn.turn}",
            "process_id": os.getpid(),
            "user_id": self.user_id,
            "conversation_id": turn.conversation_id,
            "turn": turn.turn,
            "phase": RECORDER.phase(send_unix_s),
            "endpoint": spec.endpoint,
            "intended_send_unix_s": send_unix_s,
            "send_unix_s": send_unix_s,
            "send_lag_s": outcome.send_perf_s - intended,
            "ttft_s": (outcome.content_chunk_perf_s[0] - intended
                       if outcome.content_chunk_perf_s else None),
            "e2e_s": outcome.end_perf_s - intended,
            "chunk_offsets_s": [t - intended for t in outcome.content_chunk_perf_s],
            "output_tokens": outcome.output_tokens,
            "prompt_tokens": outcome.prompt_tokens,
            "max_tokens": turn.max_tokens,
            "status_code": outcome.status_code,
            "ok": outcome.ok,
            "error": outcome.error,
            "finish_reason": outcome.finish_reason,
        })
        self.environment.events.request.fire(
            request_type="POST", name=spec.endpoint,
            response_time=(outcome.end_perf_s - outcome.send_perf_s) * 1000.0,
            response_length=len(outcome.text),
            exception=None if outcome.ok else RuntimeError(outcome.error), context={})
