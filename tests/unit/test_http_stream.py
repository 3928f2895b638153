"""The socket client's response reader, fed recorded vLLM responses through a fake socket in
pieces of every size: events, status, and the chunked framing come out right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_slo.transport.http_stream import (
    READ_COUNTERS,
    HttpStreamClient,
    ResponseParser,
    _ChunkedDecoder,
    _NothingReceived,
    read_blocking,
)

DATA = Path(__file__).parent / "data"


class PiecewiseSocket:
    """Returns the recorded bytes in fixed-size pieces, then b'' (closed)."""

    def __init__(self, data: bytes, piece_bytes: int):
        self.pieces = [data[i : i + piece_bytes] for i in range(0, len(data), piece_bytes)]

    def recv(self, _limit: int) -> bytes:
        return self.pieces.pop(0) if self.pieces else b""

    def close(self) -> None:
        pass


@pytest.mark.parametrize("piece_bytes", [1, 2, 7, 64, 1000, 1 << 20])
def test_recorded_chat_stream_in_pieces(piece_bytes: int) -> None:
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    client = HttpStreamClient("http://127.0.0.1:1")
    response = client._read_response(PiecewiseSocket(raw, piece_bytes), None)
    assert response.status == 200
    assert response.transport_error is None
    payloads = [data for _, data in response.events]
    assert payloads[-1] == b"[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["usage"]["completion_tokens"] == 12
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) == 12  # one chunk per token at stream-interval 1
    times = [t for t, _ in response.events]
    assert times == sorted(times)


def test_error_status_body_is_kept() -> None:
    raw = (DATA / "vllm_too_long_400.bin").read_bytes()
    response = HttpStreamClient("http://127.0.0.1:1")._read_response(PiecewiseSocket(raw, 5), None)
    assert response.status == 400
    assert b"maximum context length" in response.body
    assert response.events == []


def test_chunked_decoder_handles_extensions_and_trailers() -> None:
    decoder = _ChunkedDecoder()
    framed = b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Trailer: 1\r\n\r\n"
    out = b"".join(decoder.feed(framed[i : i + 1]) for i in range(len(framed)))
    assert out == b"Wikipedia"
    assert decoder.done


def test_chunked_decoder_whole_chunk_per_read_agrees_with_the_general_path() -> None:
    """One whole chunk per read (how vLLM's writes arrive) takes a shortcut; it must give the
    same bytes, and chunks split or joined across reads must still decode."""
    chunks = [b"data: {}\n\n", b"x" * 300, b"\r\n"]
    framed = [b"%x\r\n%s\r\n" % (len(c), c) for c in chunks]
    one_per_read = _ChunkedDecoder()
    assert [one_per_read.feed(f) for f in framed] == chunks
    joined = _ChunkedDecoder()
    assert joined.feed(b"".join(framed) + b"0\r\n\r\n") == b"".join(chunks) and joined.done
    split = _ChunkedDecoder()
    assert b"".join(split.feed(f[:3]) + split.feed(f[3:]) for f in framed) == b"".join(chunks)


def test_chunked_decoder_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="chunk size"):
        _ChunkedDecoder().feed(b"zz\r\n")


def test_connection_closed_mid_stream_is_a_transport_error() -> None:
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    truncated = raw[: len(raw) // 2]
    response = HttpStreamClient("http://127.0.0.1:1")._read_response(
        PiecewiseSocket(truncated, 50))
    assert response.status == 200
    assert response.transport_error == "connection closed before the response ended"


def test_base_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="http"):
        HttpStreamClient("ftp://example")


# -- the shared response parser (both readers feed it: the blocking one here, the pump) ------

RECORDINGS = ["vllm_chat_stream.bin", "vllm_completions_stream.bin", "vllm_too_long_400.bin"]


def parse(pieces: list[tuple[bytes, float]], close_at_s: float | None = None) -> ResponseParser:
    parser = ResponseParser()
    for data, at in pieces:
        if parser.feed(data, at):
            break
    else:
        if close_at_s is not None:
            parser.closed(close_at_s)
    return parser


def outcome_of(parser: ResponseParser) -> tuple:
    r = parser.response
    return (r.status, r.reason, r.headers, [p for _, p in r.events], r.body,
            r.transport_error, parser.done, parser.keep_alive)


@pytest.mark.parametrize("recording", RECORDINGS)
def test_parser_fed_in_two_pieces_at_every_split_point(recording: str) -> None:
    """Every split point of a recorded response gives the same response; an event is stamped
    with the read that completed it (those the first piece completes on their own: its stamp)."""
    raw = (DATA / recording).read_bytes()
    whole = parse([(raw, 1.0)], close_at_s=1.0)
    assert whole.done and whole.response.status in (200, 400)
    reference = outcome_of(whole)
    for cut in range(1, len(raw)):
        split = parse([(raw[:cut], 1.0), (raw[cut:], 2.0)], close_at_s=2.0)
        assert outcome_of(split) == reference, cut
        first_alone = len(parse([(raw[:cut], 1.0)]).response.events)
        stamps = [t for t, _ in split.response.events]
        assert stamps == [1.0] * first_alone + [2.0] * (len(stamps) - first_alone), cut
        headers_complete = b"\r\n\r\n" in raw[:cut]
        assert split.response.headers_at_s == (1.0 if headers_complete else 2.0)
        assert split.response.ended_at_s == 2.0


@pytest.mark.parametrize("recording", RECORDINGS)
@pytest.mark.parametrize("piece_bytes", [1, 3, 17, 250])
def test_parser_fed_in_many_pieces_agrees_with_one_read(recording: str, piece_bytes: int
                                                        ) -> None:
    raw = (DATA / recording).read_bytes()
    pieces = [(raw[i : i + piece_bytes], float(i)) for i in range(0, len(raw), piece_bytes)]
    split = parse(pieces, close_at_s=float(len(raw)))
    assert outcome_of(split) == outcome_of(parse([(raw, 0.0)], close_at_s=0.0))
    stamps = [t for t, _ in split.response.events]
    assert stamps == sorted(stamps)


def test_parser_content_length_keep_alive_and_close() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
    parser = parse([(head + b"{\"a\":", 1.0), (b"12345}", 2.0)])
    assert parser.done and parser.keep_alive and parser.response.body == b"{\"a\":12345}"
    assert parser.response.ended_at_s == 2.0 and parser.response.events == []
    closing = parse([(head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
                      + b"{\"a\":12345}", 1.0)])
    assert closing.done and not closing.keep_alive
    http10 = parse([(b"HTTP/1.0 200 OK\r\n\r\nto the end", 1.0)], close_at_s=3.0)
    assert http10.done and not http10.keep_alive and http10.response.body == b"to the end"
    assert http10.response.transport_error is None and http10.response.ended_at_s == 3.0
    empty = parse([(b"HTTP/1.1 204 No Content\r\n\r\n", 1.0)])
    assert empty.done and empty.response.status == 204


def test_parser_on_a_connection_that_closes_early() -> None:
    with pytest.raises(_NothingReceived):
        ResponseParser().closed(1.0)
    in_head = ResponseParser()
    assert not in_head.feed(b"HTTP/1.1 200 OK\r\nConte", 1.0)
    with pytest.raises(ValueError, match="inside the response headers"):
        in_head.closed(2.0)
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    cut = parse([(raw[: len(raw) // 2], 1.0)], close_at_s=2.0)
    assert cut.done and not cut.keep_alive and cut.response.events
    assert cut.response.transport_error == "connection closed before the response ended"


def test_parser_counts_reads_and_events_for_the_monitor() -> None:
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    head_end = raw.index(b"\r\n\r\n") + 4
    before = (READ_COUNTERS.socket_reads, READ_COUNTERS.sse_events)
    parser = parse([(raw[:head_end], 1.0), (raw[head_end:], 2.0)])
    assert READ_COUNTERS.socket_reads - before[0] == 1  # the headers' read carried no body
    assert READ_COUNTERS.sse_events - before[1] == len(parser.response.events)


class ScriptedSocket(PiecewiseSocket):
    """A connection the client already holds (keep-alive): `pieces` are what recv returns in
    turn (an exception is raised), then b'' (closed); records what was sent; `send_error` is
    raised by sendall."""

    def __init__(self, pieces: list[bytes | Exception], send_error: Exception | None = None):
        self.pieces = list(pieces)
        self.send_error = send_error
        self.sent = b""
        self.closed = False

    def sendall(self, data: bytes) -> None:
        if self.send_error is not None:
            raise self.send_error
        self.sent += data

    def recv(self, _limit: int) -> bytes:
        piece = self.pieces.pop(0) if self.pieces else b""
        if isinstance(piece, Exception):
            raise piece
        return piece

    def close(self) -> None:
        self.closed = True


def test_a_stale_keep_alive_connection_is_retried_once_on_a_new_one() -> None:
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    client = HttpStreamClient("http://127.0.0.1:1")
    client._sock = ScriptedSocket([])  # closes before a byte: the server dropped it idle
    fresh = ScriptedSocket([raw[:100], raw[100:]])
    client._connect = lambda: fresh
    response = client.request("POST", "/v1/chat/completions", b"{}", request_id="r-1")
    assert response.status == 200 and response.transport_error is None
    assert response.events[-1][1] == b"[DONE]"
    assert b"X-Request-Id: r-1\r\n" in fresh.sent


def test_a_failure_mid_stream_keeps_the_status_and_the_events_so_far() -> None:
    raw = (DATA / "vllm_chat_stream.bin").read_bytes()
    client = HttpStreamClient("http://127.0.0.1:1")
    client._sock = ScriptedSocket([raw[: len(raw) // 2], TimeoutError("watchdog")])
    seen: list[bytes] = []
    response = client.request("POST", "/v1/chat/completions", b"{}",
                              on_event=lambda _t, payload: seen.append(payload))
    assert response.status == 200 and seen
    assert response.transport_error == "TimeoutError: watchdog"
    assert client._sock is None  # closed: the connection was mid-response


def test_a_custom_reader_replaces_the_blocking_one() -> None:
    raw = (DATA / "vllm_completions_stream.bin").read_bytes()
    calls = []

    def reader(sock, parser: ResponseParser) -> None:
        calls.append(sock)
        read_blocking(sock, parser)

    client = HttpStreamClient("http://127.0.0.1:1", reader=reader)
    client._sock = ScriptedSocket([raw])
    response = client.request("POST", "/v1/completions", b"{}")
    assert calls and response.status == 200 and response.events[-1][1] == b"[DONE]"
    assert HttpStreamClient("https://127.0.0.1:1", reader=reader)._reader is None  # TLS
