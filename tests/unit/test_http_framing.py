"""HTTP as RFC 9110 / 9112 say (issue 40, items 4, 8, 9): interim 1xx responses are skipped
before the final one; a reset before any response byte on a reused keep-alive connection is
retried once on a fresh connection (counted), never on a new connection; a body that is not SSE
is capped, and so is one SSE event. Fake sockets for the client's decisions, and one real
socket server that sends `103 Early Hints` on a keep-alive connection."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.test_http_stream import ScriptedSocket
from vllm_slo.loadtests.openai_stream import interpret
from vllm_slo.transport import http_stream, sse
from vllm_slo.transport.http_stream import (
    MAX_BODY_BYTES,
    READ_COUNTERS,
    HttpStreamClient,
    ResponseParser,
)

DATA = Path(__file__).parent / "data"
EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def _json_response(body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(body)).encode() + b"\r\n" + extra + b"\r\n" + body)


def _feed_split(raw: bytes, at: int) -> ResponseParser:
    parser = ResponseParser()
    done = parser.feed(raw[:at], 1.0) if at else False
    if not done and raw[at:]:
        parser.feed(raw[at:], 2.0)
    return parser


def test_interim_responses_are_skipped_at_every_split_point() -> None:
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    whole = _feed_split(raw, 0).response
    hinted = CONTINUE + EARLY_HINTS + raw
    for at in range(len(hinted)):
        parser = _feed_split(hinted, at)
        assert parser.done, at
        got = parser.response
        assert (got.status, got.reason, got.headers) == (whole.status, whole.reason,
                                                         whole.headers), at
        assert [e for _, e in got.events] == [e for _, e in whole.events], at
        assert "link" not in got.headers  # the interim response's headers are not the final's


def test_an_interim_response_does_not_desync_a_keep_alive_connection() -> None:
    """Two requests on one connection, the first answered `103` then `200`: each gets its own
    body (the 103 taken as final made the second read the first's answer)."""
    first, second = _json_response(b'{"n":1}'), _json_response(b'{"n":2}')
    client = HttpStreamClient("http://127.0.0.1:1")
    client._sock = ScriptedSocket([EARLY_HINTS + first, second])
    assert client.request("POST", "/x", b"{}").body == b'{"n":1}'
    assert client.request("POST", "/x", b"{}").body == b'{"n":2}'


def test_101_and_endless_interim_responses_are_errors() -> None:
    with pytest.raises(ValueError, match="101"):
        ResponseParser().feed(b"HTTP/1.1 101 Switching Protocols\r\n\r\n", 1.0)
    with pytest.raises(ValueError, match="interim"):
        ResponseParser().feed(EARLY_HINTS * 17 + _json_response(b"{}"), 1.0)
    # an interim answer then a close is no "nothing received": never retried
    parser = ResponseParser()
    parser.feed(EARLY_HINTS, 1.0)
    with pytest.raises(ValueError, match="inside the response headers"):
        parser.closed(2.0)


@pytest.mark.parametrize("line", [b"HTTP/1.1 2000 OK", b"HTTP/1.1 abc OK", b"HTTP/1.1 099 X",
                                  b"HTTP/1.1 600 X", "HTTP/1.1 ²00 X".encode(), b"garbage",
                                  b"HTTP/1.1 +20 X"])
def test_a_bad_status_line_is_a_transport_error_row(line: bytes) -> None:
    client = HttpStreamClient("http://127.0.0.1:1")
    client._sock = ScriptedSocket([line + b"\r\nContent-Length: 0\r\n\r\n"])
    response = client.request("POST", "/v1/completions", b"{}")
    assert response.transport_error is not None
    assert response.transport_error.startswith("ValueError: bad status line")
    assert interpret(response, "completions", 0.0).status == "transport_error"


@pytest.mark.parametrize("failure", [ConnectionResetError(104, "Connection reset by peer"),
                                     ConnectionAbortedError(103, "aborted"), b""])
def test_a_reset_before_any_byte_on_a_reused_connection_is_retried_once(
        failure: Exception | bytes) -> None:
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    client = HttpStreamClient("http://127.0.0.1:1")
    stale = ScriptedSocket([failure])
    fresh = ScriptedSocket([raw])
    connects: list[ScriptedSocket] = []

    def connect() -> ScriptedSocket:
        connects.append(fresh)
        return fresh
    client._sock = stale
    client._connect = connect
    before = READ_COUNTERS.keepalive_retries
    response = client.request("POST", "/v1/chat/completions", b"{}", request_id="r-1")
    assert response.status == 200 and response.transport_error is None
    assert response.events[-1][1] == b"[DONE]"
    assert stale.closed and connects == [fresh] and b"X-Request-Id: r-1" in fresh.sent
    assert READ_COUNTERS.keepalive_retries == before + 1


def test_a_broken_pipe_while_sending_on_a_reused_connection_is_retried_once() -> None:
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    client = HttpStreamClient("http://127.0.0.1:1")
    client._sock = ScriptedSocket([], send_error=BrokenPipeError(32, "Broken pipe"))
    fresh = ScriptedSocket([raw])
    client._connect = lambda: fresh
    response = client.request("POST", "/v1/chat/completions", b"{}")
    assert response.status == 200 and response.transport_error is None


def test_no_retry_on_a_new_connection_nor_after_a_byte_nor_twice() -> None:
    # a new connection reset: the server may have had the request: a failed row
    client = HttpStreamClient("http://127.0.0.1:1")
    connects = []

    def reset_connection() -> ScriptedSocket:
        connects.append(1)
        return ScriptedSocket([ConnectionResetError(104, "Connection reset by peer")])
    client._connect = reset_connection
    before = READ_COUNTERS.keepalive_retries
    response = client.request("POST", "/x", b"{}")
    assert response.transport_error == "ConnectionResetError: [Errno 104] Connection reset by peer"
    assert len(connects) == 1
    # a reused connection reset after the status line arrived: the server had it
    client._sock = ScriptedSocket([b"HTTP/1.1 200 OK\r\n", ConnectionResetError(104, "reset")])
    response = client.request("POST", "/x", b"{}")
    assert response.transport_error == "ConnectionResetError: [Errno 104] reset"
    assert len(connects) == 1
    # a reused connection reset, then the fresh one reset as well: one retry only
    client._sock = ScriptedSocket([ConnectionResetError(104, "reset")])
    response = client.request("POST", "/x", b"{}")
    assert response.transport_error is not None and len(connects) == 2
    assert interpret(response, "chat", 0.0).status == "transport_error"
    # a timeout is never retried (the server may be working on it)
    client._sock = ScriptedSocket([TimeoutError("timed out")])
    response = client.request("POST", "/x", b"{}")
    assert response.transport_error == "TimeoutError: timed out" and len(connects) == 2
    assert READ_COUNTERS.keepalive_retries == before + 1


def test_a_non_streamed_body_over_the_cap_is_a_named_failure_row() -> None:
    client = HttpStreamClient("http://127.0.0.1:1")
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
            + str(MAX_BODY_BYTES + 1).encode() + b"\r\n\r\n")
    client._sock = ScriptedSocket([head + b"{" * 1000])
    response = client.request("POST", "/v1/completions", b"{}")
    assert response.transport_error is not None
    assert response.transport_error.startswith("ResponseTooLarge: a non-streamed body over "
                                               "16 MiB")
    outcome = interpret(response, "completions", 0.0)
    assert (outcome.ok, outcome.status) == (False, "bad_response")
    assert client._sock is None  # the rest of that body is never read


def test_a_chunked_body_is_cut_at_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_stream, "MAX_BODY_BYTES", 4096)
    chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"
    head = b"HTTP/1.1 500 Oops\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    parser = ResponseParser()
    parser.feed(head, 1.0)
    for _ in range(4):
        assert not parser.feed(chunk, 1.0)
    with pytest.raises(http_stream.ResponseTooLarge, match="non-streamed body over"):
        parser.feed(chunk, 1.0)
    error = parser.abort("ResponseTooLarge: x", 2.0)
    assert error.body == b""  # what was read is let go of


def test_one_sse_event_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", 4096)
    decoder = sse.SSEDecoder()
    assert decoder.feed(b"data: " + b"a" * 1000 + b"\n\n") == [b"a" * 1000]
    decoder.feed(b"data: " + b"a" * 3000)
    with pytest.raises(sse.ResponseTooLarge):
        decoder.feed(b"a" * 2000)
    lines = sse.SSEDecoder()  # many data lines of one event, each short
    with pytest.raises(sse.ResponseTooLarge):
        for _ in range(100):
            lines.feed(b"data: " + b"b" * 100 + b"\n")


def test_a_chunk_size_line_without_end_is_refused() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 1.0)
    with pytest.raises(ValueError, match="chunk size or trailer line"):
        parser.feed(b"1" * 70_000, 1.0)


# --- a real socket server -------------------------------------------------------------------


@contextlib.contextmanager
def raw_server(handle: object) -> Iterator[tuple[str, list[int]]]:
    """A one-thread TCP server on a free port; `handle(conn, index)` serves each connection.
    Yields the base URL and the list of connection indices accepted."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(len(accepted))
            threading.Thread(target=handle, args=(conn, accepted[-1]), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        listener.close()


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return b""
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += conn.recv(65536)
    return head


def test_early_hints_and_an_idle_reset_on_a_real_server() -> None:
    """Connection 0 answers its first request with 103 then 200 (keep-alive), then resets
    (RST) instead of answering the second; connection 1 answers. Each request's answer is its
    own; the second was sent twice, once on each connection."""
    served: list[tuple[int, bytes]] = []

    def handle(conn: socket.socket, index: int) -> None:
        with conn:
            for n in range(10):
                head = _read_request(conn)
                if not head:
                    return
                served.append((index, head.split(b"\r\n")[0]))
                if index == 0 and n == 1:  # an abortive close: RST, before any byte
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
                    return
                body = b'{"conn":%d,"n":%d}' % (index, n)
                conn.sendall((EARLY_HINTS if n == 0 else b"") + _json_response(body))

    with raw_server(handle) as (url, accepted):
        client = HttpStreamClient(url, timeout_s=5.0)
        before = READ_COUNTERS.keepalive_retries
        first = client.request("POST", "/a", b"{}")
        second = client.request("POST", "/b", b"{}")
        third = client.request("POST", "/c", b"{}")
        client.close()
    assert (first.status, first.body) == (200, b'{"conn":0,"n":0}')
    assert (second.status, second.body, second.transport_error) == (
        200, b'{"conn":1,"n":0}', None)
    assert (third.status, third.body) == (200, b'{"conn":1,"n":1}')
    assert READ_COUNTERS.keepalive_retries == before + 1
    assert accepted == [0, 1]
    assert [line for _, line in served] == [b"POST /a HTTP/1.1", b"POST /b HTTP/1.1",
                                            b"POST /b HTTP/1.1", b"POST /c HTTP/1.1"]
