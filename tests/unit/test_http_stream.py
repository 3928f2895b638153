"""The socket client's response reader, fed recorded vLLM responses through a fake socket in
pieces of every size: events, status, and the chunked framing come out right."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_slo.servers.http_stream import HttpStreamClient, _ChunkedDecoder

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
