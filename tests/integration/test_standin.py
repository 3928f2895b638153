"""The stand-in's known answer: what a raw-socket client measures equals what was configured.

Timing tolerance: every measured TTFT, ITL gap and E2E is within TOL_S (10 ms) of its configured
value, and never earlier than configured (the server schedules from the receipt of the request,
which comes after the client's send). The client below timestamps each SSE event when the
`recv` that completes it returns, with no other work on the path.

On a quiet machine the errors are 0.5-2 ms (the event loop's epoll timeout has millisecond
granularity). CPU contention (two busy processes on two cores) delays wakeups by 10-30 ms, and
can only ever delay: so each timing measurement is repeated with a fresh request (five attempts,
`timed` in tests/support/timing.py) and one attempt must meet the tolerance. A wrong schedule
fails every attempt. The file is marked `timing`: `tox -e ci` runs it apart from the parallel step.
"""

from __future__ import annotations

import dataclasses
import http.client
import itertools
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.timing import timed
from vllm_slo.servers.standin.cli import READY_PREFIX
from vllm_slo.servers.standin.config import StandinConfig
from vllm_slo.servers.standin.faults import FAULT_HEADER, FAULT_KINDS, XSS_PAYLOADS
from vllm_slo.servers.standin.server import StandinServer, running_standin

pytestmark = [pytest.mark.integration, pytest.mark.timing]

TOL_S = 0.010
EARLY_S = 1e-4  # causality: nothing may arrive before its scheduled time (minus clock slack)
REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# a minimal timestamping client (raw socket, HTTP/1.1, chunked + SSE)


@dataclasses.dataclass
class Response:
    sent_s: float
    status: int = 0
    headers: dict[str, str] = dataclasses.field(default_factory=dict)
    body: bytes = b""
    events: list[tuple[float, str]] = dataclasses.field(default_factory=list)  # (arrival, data)
    complete: bool = False  # the whole body (terminating chunk / content-length) arrived
    closed: bool = False  # the server closed the connection
    timed_out: bool = False
    end_s: float = 0.0

    def json_events(self) -> list[tuple[float, dict]]:
        return [(t, json.loads(d)) for t, d in self.events if d != "[DONE]"]

    def content_times(self) -> list[float]:
        """Arrival times of chunks with non-empty content (role-only chunks excluded)."""
        times = []
        for t, obj in self.json_events():
            for choice in obj.get("choices", []):
                text = choice.get("delta", {}).get("content") or choice.get("text")
                if text:
                    times.append(t)
        return times

    def content(self) -> str:
        parts = []
        for _, obj in self.json_events():
            for choice in obj.get("choices", []):
                parts.append(choice.get("delta", {}).get("content") or choice.get("text") or "")
        return "".join(parts)


class _Parser:
    def __init__(self, response: Response) -> None:
        self.r = response
        self.buf = b""
        self.sse = b""
        self.in_head = True
        self.chunked = False
        self.length = 0

    def feed(self, data: bytes, now: float) -> None:
        self.buf += data
        if self.in_head:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            lines = self.buf[:end].decode("latin-1").split("\r\n")
            self.buf = self.buf[end + 4 :]
            self.r.status = int(lines[0].split(" ")[1])
            for line in lines[1:]:
                name, _, value = line.partition(":")
                self.r.headers[name.strip().lower()] = value.strip()
            self.in_head = False
            self.chunked = self.r.headers.get("transfer-encoding") == "chunked"
            self.length = int(self.r.headers.get("content-length", "0"))
        if not self.chunked:
            self.r.body += self.buf
            self.buf = b""
            self.r.complete = len(self.r.body) >= self.length
            return
        while True:
            eol = self.buf.find(b"\r\n")
            if eol < 0:
                return
            size = int(self.buf[:eol], 16)
            if len(self.buf) < eol + 2 + size + 2:
                return
            payload = self.buf[eol + 2 : eol + 2 + size]
            self.buf = self.buf[eol + 4 + size :]
            if size == 0:
                self.r.complete = True
                return
            self.r.body += payload
            self.sse += payload
            while b"\n\n" in self.sse:
                event, _, self.sse = self.sse.partition(b"\n\n")
                for line in event.decode("utf-8", "replace").split("\n"):  # bad_utf8
                    if line.startswith("data: "):
                        self.r.events.append((now, line[6:]))


def request(
    url: str,
    path: str,
    body: dict | None = None,
    *,
    headers: dict[str, str] | None = None,
    timeout_s: float = 10.0,
) -> Response:
    parts = urlsplit(url)
    raw = json.dumps(body).encode() if body is not None else b""
    lines = [
        f"{'POST' if body is not None else 'GET'} {path} HTTP/1.1",
        f"host: {parts.netloc}",
        "content-type: application/json",
        f"content-length: {len(raw)}",
        "connection: close",
    ]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    data = ("\r\n".join(lines) + "\r\n\r\n").encode() + raw
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        response = Response(sent_s=time.monotonic())
        sock.sendall(data)
        parser = _Parser(response)
        while not response.complete:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                response.timed_out = True
                break
            now = time.monotonic()
            if not chunk:
                response.closed = True
                break
            parser.feed(chunk, now)
        response.end_s = time.monotonic()
    return response


def chat_body(max_tokens: int = 8, stream: bool = True, words: int = 5) -> dict:
    body: dict = {
        "model": "standin",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": " ".join(["word"] * words)},
        ],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


def completion_body(max_tokens: int = 8, stream: bool = True) -> dict:
    body: dict = {"model": "standin", "prompt": "one two three", "max_tokens": max_tokens}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
    return body


@pytest.fixture
def standin() -> Iterator[StandinServer]:
    with StandinServer(StandinConfig(ttft_s=0.02, itl_s=0.005)) as server:
        yield server


# ---------------------------------------------------------------------------------------------
# endpoints and wire format


def test_plain_endpoints(standin: StandinServer) -> None:
    host, port = urlsplit(standin.url).hostname, urlsplit(standin.url).port
    conn = http.client.HTTPConnection(host, port, timeout=5)
    try:  # one keep-alive connection for everything
        conn.request("GET", "/health")
        r = conn.getresponse()
        assert (r.status, r.read()) == (200, b"")
        conn.request("GET", "/v1/models")
        r = conn.getresponse()
        model = json.loads(r.read())["data"][0]
        assert model["id"] == model["root"] == "standin"
        assert (model["object"], model["owned_by"], model["max_model_len"]) == (
            "model",
            "vllm",
            2048,
        )
        conn.request("GET", "/version")
        assert json.loads(conn.getresponse().read()) == {"version": "standin"}
        conn.request("GET", "/nope")
        r = conn.getresponse()
        assert (r.status, json.loads(r.read())) == (404, {"detail": "Not Found"})
        # a streamed and a whole completion on the same connection
        conn.request("POST", "/v1/chat/completions", json.dumps(chat_body(max_tokens=3)))
        r = conn.getresponse()
        assert r.getheader("transfer-encoding") == "chunked"
        assert r.read().endswith(b"data: [DONE]\n\n")
        conn.request("POST", "/v1/completions", json.dumps(completion_body(3, stream=False)))
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] == 3
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        assert r.getheader("content-type").startswith("text/plain; version=0.0.4")
        metrics = r.read().decode()
    finally:
        conn.close()
    labels = 'engine="0",model_name="standin"'
    expected = {
        f"vllm:num_requests_running{{{labels}}}": 0.0,
        f"vllm:num_requests_waiting{{{labels}}}": 0.0,
        f"vllm:prompt_tokens_total{{{labels}}}": 7.0 + 3.0,
        f"vllm:generation_tokens_total{{{labels}}}": 6.0,
        f'vllm:request_success_total{{{labels},finished_reason="length"}}': 2.0,
        f"vllm:prefix_cache_queries_total{{{labels}}}": 0.0,
        f"vllm:prefix_cache_hits_total{{{labels}}}": 0.0,
    }
    samples = dict(line.rsplit(" ", 1) for line in metrics.splitlines() if line[:1] != "#")
    assert {k: float(samples[k]) for k in expected} == expected
    assert len(standin.records) == 2


def test_chat_stream_sequence(standin: StandinServer) -> None:
    r = request(standin.url, "/v1/chat/completions", chat_body(max_tokens=6, words=5))
    assert r.status == 200 and r.complete
    assert r.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert r.events[-1][1] == "[DONE]"
    chunks = [obj for _, obj in r.json_events()]
    assert len(chunks) == 1 + 6 + 1
    assert len({c["id"] for c in chunks}) == 1 and chunks[0]["id"].startswith("chatcmpl-")
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["model"] for c in chunks} == {"standin"}
    role = chunks[0]["choices"][0]
    assert role["delta"] == {"role": "assistant", "content": ""}
    assert role["finish_reason"] is None
    tokens = [c["choices"][0] for c in chunks[1:7]]
    assert all(t["delta"]["content"] and set(t["delta"]) == {"content"} for t in tokens)
    assert [t["finish_reason"] for t in tokens] == [None] * 5 + ["length"]
    assert chunks[7]["choices"] == []
    assert chunks[7]["usage"] == {"prompt_tokens": 7, "total_tokens": 13, "completion_tokens": 6}


def test_completions_stream_sequence_and_no_usage(standin: StandinServer) -> None:
    r = request(standin.url, "/v1/completions", completion_body(max_tokens=4))
    chunks = [obj for _, obj in r.json_events()]
    assert r.events[-1][1] == "[DONE]"
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert chunks[0]["id"].startswith("cmpl-")
    texts = [c["choices"][0]["text"] for c in chunks[:4]]
    assert all(texts) and len(chunks) == 5  # no role chunk for completions
    assert [c["choices"][0]["finish_reason"] for c in chunks[:4]] == [None] * 3 + ["length"]
    assert chunks[4]["usage"] == {"prompt_tokens": 3, "total_tokens": 7, "completion_tokens": 4}

    body = completion_body(max_tokens=4)
    del body["stream_options"]
    r = request(standin.url, "/v1/completions", body)
    assert [d for _, d in r.events][-1] == "[DONE]" and len(r.events) == 5  # 4 tokens + DONE
    assert all("usage" not in obj for _, obj in r.json_events())


def test_non_streaming_shapes_and_timing() -> None:
    with running_standin(StandinConfig(ttft_s=0.05, itl_s=0.01)) as url:
        r = request(url, "/v1/completions", completion_body(max_tokens=2, stream=False))
        assert json.loads(r.body)["choices"][0]["text"] == "The quick"

        def measure() -> None:
            r = request(url, "/v1/chat/completions", chat_body(max_tokens=5, stream=False))
            obj = json.loads(r.body)
            assert r.status == 200 and obj["object"] == "chat.completion"
            assert obj["choices"][0]["message"]["role"] == "assistant"
            assert obj["choices"][0]["message"]["content"] == "The quick brown fox jumps"
            assert obj["choices"][0]["finish_reason"] == "length"
            assert obj["usage"]["completion_tokens"] == 5
            e2e = r.end_s - r.sent_s
            expected = 0.05 + 4 * 0.01  # the whole body at the time of the last token
            assert expected - EARLY_S <= e2e <= expected + TOL_S

        timed(measure)


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"messages": []}, 400, "messages"),
        ({"model": "other", "messages": [{"role": "user", "content": "x"}]}, 404, "`other`"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4096}, 400, "context"),
        ({"messages": [{"role": "user", "content": "x"}], "stream_options": {}}, 400, "stream"),
    ],
)
def test_bad_requests(standin: StandinServer, body: dict, status: int, needle: str) -> None:
    r = request(standin.url, "/v1/chat/completions", body)
    error = json.loads(r.body)["error"]
    assert (r.status, error["code"]) == (status, status)
    assert needle in error["message"]


def test_invalid_json_and_unknown_fault_header(standin: StandinServer) -> None:
    parts = urlsplit(standin.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        conn.request("POST", "/v1/completions", b"{not json")
        r = conn.getresponse()
        assert r.status == 400 and "Invalid JSON" in json.loads(r.read())["error"]["message"]
    finally:
        conn.close()
    r = request(standin.url, "/v1/completions", completion_body(), headers={FAULT_HEADER: "x"})
    assert r.status == 400


# ---------------------------------------------------------------------------------------------
# timing: the known answer


def test_ttft_and_itl_match_configuration() -> None:
    ttft, itl, n = 0.15, 0.02, 12
    with StandinServer(StandinConfig(ttft_s=ttft, itl_s=itl)) as server:

        def measure() -> None:
            done = len(server.records)
            r = request(server.url, "/v1/chat/completions", chat_body(max_tokens=n))
            record = server.wait_for_records(done + 1)[-1]
            times = r.content_times()
            assert len(times) == n
            measured_ttft = times[0] - r.sent_s
            assert ttft - EARLY_S <= measured_ttft <= ttft + TOL_S, measured_ttft
            gaps = [b - a for a, b in itertools.pairwise(times)]
            assert all(abs(g - itl) <= TOL_S for g in gaps), gaps
            assert abs((times[-1] - times[0]) / (n - 1) - itl) <= 0.002  # no drift
            assert r.events[0][0] - r.sent_s <= TOL_S  # the role chunk goes at once
            # what the server really did, in the same clock
            assert r.sent_s <= record.receipt_s <= record.first_content_s <= times[0]
            assert ttft - EARLY_S <= record.first_content_s - record.receipt_s <= ttft + TOL_S
            sends = record.content_chunk_s
            assert all(0 <= c - s <= TOL_S for c, s in zip(times, sends, strict=True))
            assert (record.fault, record.status, record.completion_tokens) == (None, 200, n)
            assert record.queue_wait_s is not None and record.queue_wait_s < TOL_S

        timed(measure)


def test_role_delay_and_tokens_per_chunk() -> None:
    config = StandinConfig(ttft_s=0.1, itl_s=0.01, role_delay_s=0.05, tokens_per_chunk=4)
    with running_standin(config) as url:

        def measure() -> None:
            r = request(url, "/v1/chat/completions", chat_body(max_tokens=10))
            role_t = r.events[0][0] - r.sent_s
            assert 0.05 - EARLY_S <= role_t <= 0.05 + TOL_S
            chunks = [obj for _, obj in r.json_events()][1:-1]
            sizes = [len(c["choices"][0]["delta"]["content"].split()) for c in chunks]
            assert sizes == [1, 4, 4, 1]  # like vLLM --stream-interval: first token alone
            assert r.json_events()[-1][1]["usage"]["completion_tokens"] == 10
            times = [t - r.sent_s for t in r.content_times()]
            expected = [0.1, 0.1 + 4 * 0.01, 0.1 + 8 * 0.01, 0.1 + 9 * 0.01]  # with last token
            pairs = zip(times, expected, strict=True)
            assert all(e - EARLY_S <= t <= e + TOL_S for t, e in pairs), times

        timed(measure)


def test_jitter_is_bounded_seeded_and_recorded() -> None:
    config = StandinConfig(ttft_s=0.05, itl_s=0.01, jitter_s=0.01, seed=3)
    nominal = [0.05 + i * 0.01 for i in range(10)]

    def measure() -> None:
        runs = []
        for _ in range(2):
            with StandinServer(config) as server:
                request(server.url, "/v1/completions", completion_body(max_tokens=10))
                (record,) = server.wait_for_records(1)
            runs.append([t - record.start_s for t in record.content_chunk_s])
        for offsets in runs:
            pairs = zip(offsets, nominal, strict=True)
            assert all(n - EARLY_S <= t <= n + 0.01 + TOL_S for t, n in pairs), offsets
        gaps = [[b - a for a, b in itertools.pairwise(offsets)] for offsets in runs]
        assert max(abs(g - 0.01) for g in gaps[0]) > 0.001  # jitter is really there
        same_seed = zip(gaps[0], gaps[1], strict=True)
        assert all(abs(a - b) <= 0.004 for a, b in same_seed), gaps

    timed(measure)


def test_max_concurrency_queues_fifo() -> None:
    ttft, itl, n = 0.1, 0.01, 5
    config = StandinConfig(ttft_s=ttft, itl_s=itl, max_concurrency=1)

    def measure() -> None:
        with StandinServer(config) as server:
            results: dict[int, Response] = {}

            def go(i: int) -> None:
                results[i] = request(server.url, "/v1/chat/completions", chat_body(max_tokens=n))

            threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            time.sleep(0.05)
            metrics = request(server.url, "/metrics").body.decode()
            for t in threads:
                t.join(10)
            records = server.wait_for_records(2)
        assert 'vllm:num_requests_running{engine="0",model_name="standin"} 1.0' in metrics
        assert 'vllm:num_requests_waiting{engine="0",model_name="standin"} 1.0' in metrics
        first, second = sorted(results.values(), key=lambda r: r.content_times()[0])
        first_e2e = first.end_s - first.sent_s
        assert abs(first_e2e - (ttft + (n - 1) * itl)) <= TOL_S
        # the second starts its TTFT clock when the first has finished
        second_ttft = second.content_times()[0] - second.sent_s
        expected = (first.sent_s + first_e2e + ttft) - second.sent_s
        assert abs(second_ttft - expected) <= TOL_S, (second_ttft, expected)
        waits = sorted(r.queue_wait_s or 0.0 for r in records)
        assert waits[0] < TOL_S and abs(waits[1] - (ttft + (n - 1) * itl)) <= TOL_S

    timed(measure)


# ---------------------------------------------------------------------------------------------
# faults


def fault_request(url: str, kind: str, *, stream: bool = True, timeout_s: float = 5.0) -> Response:
    body = chat_body(max_tokens=8, stream=stream)
    headers = {FAULT_HEADER: kind}
    return request(url, "/v1/chat/completions", body, headers=headers, timeout_s=timeout_s)


@pytest.mark.parametrize("kind", ["http_500", "http_503"])
def test_fault_http_status(kind: str) -> None:
    status = int(kind[-3:])
    with running_standin(StandinConfig(ttft_s=1.0)) as url:
        for stream in (True, False):
            r = fault_request(url, kind, stream=stream)
            assert r.status == status and json.loads(r.body)["error"]["code"] == status
            assert r.end_s - r.sent_s < 0.5  # at once, not after the 1 s TTFT


def test_fault_sse_error(standin: StandinServer) -> None:
    r = fault_request(standin.url, "sse_error")
    assert (r.status, r.complete) == (200, True)
    assert [d for _, d in r.events][1] == "[DONE]" and len(r.events) == 2
    error = json.loads(r.events[0][1])["error"]
    assert (error["code"], error["type"]) == (503, "Service Unavailable")
    assert "busy" in error["message"]
    r = fault_request(standin.url, "sse_error", stream=False)
    assert r.status == 503  # vLLM answers non-streaming requests with a plain 503


def test_fault_no_tokens(standin: StandinServer) -> None:
    r = fault_request(standin.url, "no_tokens")
    assert (r.status, r.complete) == (200, True)
    chunks = [obj for _, obj in r.json_events()]
    assert len(chunks) == 2 and r.events[-1][1] == "[DONE]"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[1]["usage"]["completion_tokens"] == 0 and chunks[1]["choices"] == []
    assert r.content_times() == []
    r = fault_request(standin.url, "no_tokens", stream=False)
    obj = json.loads(r.body)
    assert obj["usage"]["completion_tokens"] == 0
    assert obj["choices"][0]["message"]["content"] == ""


def test_fault_drop_mid_stream(standin: StandinServer) -> None:
    r = fault_request(standin.url, "drop_mid_stream")
    assert r.status == 200 and r.closed and not r.complete
    assert len(r.content_times()) == 4  # half of max_tokens=8
    assert all(d != "[DONE]" for _, d in r.events)
    r = fault_request(standin.url, "drop_mid_stream", stream=False)
    assert r.closed and r.status == 0  # nothing at all
    records = standin.wait_for_records(2)
    assert [x.completion_tokens for x in records] == [4, 0]


def test_fault_hang(standin: StandinServer) -> None:
    r = fault_request(standin.url, "hang", timeout_s=0.3)
    assert r.timed_out and r.status == 200 and r.events == []
    (record,) = standin.wait_for_records(1)  # ends when the client gives up
    assert (record.fault, record.client_disconnected, record.first_content_s) == (
        "hang",
        True,
        None,
    )
    r = fault_request(standin.url, "hang", stream=False, timeout_s=0.2)
    assert r.timed_out and r.status == 0


def test_stop_cuts_hanging_running_and_queued_clients() -> None:
    server = StandinServer(StandinConfig(ttft_s=30.0, max_concurrency=1))
    parts = urlsplit(server.start())
    body = json.dumps(chat_body()).encode()
    socks = []
    try:
        for fault in ("hang", "none", "none"):  # hanging, running, queued
            head = (
                "POST /v1/chat/completions HTTP/1.1\r\n"
                f"content-length: {len(body)}\r\n{FAULT_HEADER}: {fault}\r\n\r\n"
            )
            socks.append(socket.create_connection((parts.hostname, parts.port)))
            socks[-1].sendall(head.encode() + body)
            time.sleep(0.05)
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2.0
        records = sorted(server.records, key=lambda r: r.receipt_s)
        assert [r.fault for r in records] == ["hang", None, None]
        assert records[1].start_s is not None and records[2].start_s is None
        assert all(r.first_content_s is None for r in records)
    finally:
        for sock in socks:
            sock.close()


def test_fault_xss(standin: StandinServer) -> None:
    r = fault_request(standin.url, "xss")
    text = r.content()
    assert all(payload in text for payload in XSS_PAYLOADS)
    assert r.json_events()[-1][1]["usage"]["completion_tokens"] == 8


def test_fault_from_config_and_none_override() -> None:
    with running_standin(StandinConfig(ttft_s=0.0, itl_s=0.0, fault_kind="http_503")) as url:
        assert request(url, "/v1/completions", completion_body(2)).status == 503
        r = request(url, "/v1/completions", completion_body(2), headers={FAULT_HEADER: "none"})
        assert r.status == 200 and r.complete


def test_random_faults_are_seeded() -> None:
    def statuses(seed: int) -> list[int]:
        config = StandinConfig(
            ttft_s=0.0, itl_s=0.0, fault_kind="http_500", fault_rate=0.5, seed=seed
        )
        with running_standin(config) as url:
            body = completion_body(1, stream=False)
            return [request(url, "/v1/completions", body).status for _ in range(30)]

    a, b = statuses(7), statuses(7)
    assert a == b and set(a) == {200, 500}
    assert statuses(8) != a


def test_fault_http_429_says_when_to_retry() -> None:
    with running_standin() as url:
        r = fault_request(url, "http_429")
        assert r.status == 429 and json.loads(r.body)["error"]["code"] == 429
        assert r.headers["retry-after"] == "1"


@pytest.mark.parametrize("kind", ["bad_json", "bad_utf8"])
def test_fault_spoils_the_middle_token_chunk(standin: StandinServer, kind: str) -> None:
    r = fault_request(standin.url, kind)
    assert (r.status, r.complete) == (200, True)
    payloads = [d for _, d in r.events]
    assert payloads[-1] == "[DONE]" and len(payloads) == 1 + 8 + 1 + 1  # role, 8, usage, DONE
    spoiled = []
    for payload in payloads[1:-1]:
        try:
            json.loads(payload)
        except ValueError:
            spoiled.append(payload)
    if kind == "bad_json":
        assert len(spoiled) == 1  # one payload cut short; the others whole
    else:
        assert r.body.count(b'"content":"\xc3 ') == 1  # a lead byte without its follower
        with pytest.raises(UnicodeDecodeError):
            r.body.decode()


def test_fault_no_done(standin: StandinServer) -> None:
    r = fault_request(standin.url, "no_done")
    assert (r.status, r.complete) == (200, True)  # the chunked body ends properly
    assert len(r.content_times()) == 8 and all(d != "[DONE]" for _, d in r.events)


def test_fault_not_sse(standin: StandinServer) -> None:
    r = fault_request(standin.url, "not_sse")
    assert r.status == 200 and r.headers["content-type"] == "application/json"
    assert r.events == [] and json.loads(r.body)["choices"][0]["text"]


def test_fault_no_data_and_no_usage(standin: StandinServer) -> None:
    bare = fault_request(standin.url, "no_data")
    assert (bare.status, bare.complete) == (200, True) and bare.events == []
    assert b"data:" not in bare.body and bare.body.count(b'"content":') >= 8
    silent = fault_request(standin.url, "no_usage")
    payloads = [d for _, d in silent.events]
    assert payloads[-1] == "[DONE]" and len(silent.content_times()) == 8
    assert all("usage" not in json.loads(d) for d in payloads[:-1])


def test_fault_bad_value_spoils_one_value_per_request_in_turn(standin: StandinServer) -> None:
    from vllm_slo.servers.standin.faults import BAD_VALUES

    spoiled = []
    for _ in BAD_VALUES:
        r = fault_request(standin.url, "bad_value")
        assert (r.status, r.complete) == (200, True) and r.events[-1][1] == "[DONE]"
        docs = [json.loads(d) for _, d in r.events[:-1]]  # framing and JSON stay valid
        spoiled.append(json.dumps(docs))
    assert '"finish_reason": 7' in spoiled[0] and '"completion_tokens": "8"' in spoiled[1]
    assert "NaN" in spoiled[3] and '"usage": [1, 2]' in spoiled[6]
    assert '"delta": "hello"' in spoiled[7]


def test_mixed_faults_take_every_kind_in_turn() -> None:
    from vllm_slo.servers.standin.faults import MIXED_KINDS, FaultPicker

    picker = FaultPicker("mixed", 1.0, seed=0)
    assert [picker.decide({}) for _ in MIXED_KINDS * 2] == list(MIXED_KINDS) * 2
    half = FaultPicker("mixed", 0.5, seed=0)
    picked = [half.decide({}) for _ in range(200)]
    assert 60 < sum(p is not None for p in picked) < 140
    assert "xss" not in picked and "no_usage" not in picked  # successes, not failures


def test_every_fault_kind_is_tested() -> None:
    covered = {"http_500", "http_503", "http_429", "sse_error", "no_tokens", "drop_mid_stream",
               "hang", "bad_json", "bad_utf8", "no_done", "not_sse", "no_data", "no_usage",
               "xss", "bad_value"}
    assert set(FAULT_KINDS) == covered


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ttft_s": -1},
        {"itl_s": float("nan")},
        {"max_concurrency": 0},
        {"tokens_per_chunk": 0},
        {"fault_kind": "boom"},
        {"fault_rate": 1.5},
    ],
)
def test_config_validation(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        StandinConfig(**kwargs)


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_ready_line_serves_and_stops_on_sigterm() -> None:
    cmd = [sys.executable, "-m", "vllm_slo.servers.standin", "--port", "0", "--ttft", "0.03"]
    cmd += ["--itl", "0.005", "--model", "tiny"]
    with subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            line = proc.stdout.readline().strip()
            assert line.startswith(READY_PREFIX), (line, proc.stderr.read())
            url = line[len(READY_PREFIX) :]
            assert url.startswith("http://127.0.0.1:")
            body = chat_body(max_tokens=3) | {"model": "tiny"}
            r = request(url, "/v1/chat/completions", body)
            assert r.complete and len(r.content_times()) == 3
            assert 0.03 - EARLY_S <= r.content_times()[0] - r.sent_s < 0.5
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=5) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_cli_rejects_bad_config() -> None:
    cmd = [sys.executable, "-m", "vllm_slo.servers.standin", "--itl", "-1"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=10)
    assert done.returncode == 2 and "itl_s" in done.stderr
