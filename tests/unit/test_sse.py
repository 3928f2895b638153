"""The SSE decoder: a recorded vLLM stream split at every byte offset decodes identically."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from vllm_slo.transport.http_stream import _ChunkedDecoder
from vllm_slo.transport.sse import SSEDecoder

DATA = Path(__file__).parent / "data"


def _body_of(raw_response: bytes) -> bytes:
    head, _, chunked = raw_response.partition(b"\r\n\r\n")
    assert b"chunked" in head.lower()
    decoder = _ChunkedDecoder()
    body = decoder.feed(chunked)
    assert decoder.done
    return body


def _decode_in_pieces(body: bytes, cuts: list[int]) -> list[bytes]:
    decoder = SSEDecoder()
    events: list[bytes] = []
    bounds = [0, *cuts, len(body)]
    for start, end in itertools.pairwise(bounds):
        events.extend(decoder.feed(body[start:end]))
    return events


@pytest.mark.parametrize("recording", ["vllm_chat_stream.bin", "vllm_completions_stream.bin"])
def test_every_single_split_point_gives_the_same_events(recording: str) -> None:
    body = _body_of((DATA / recording).read_bytes())
    whole = _decode_in_pieces(body, [])
    assert whole[-1] == b"[DONE]"
    assert len(whole) >= 5
    for cut in range(1, len(body)):
        assert _decode_in_pieces(body, [cut]) == whole, f"split at byte {cut}"


def test_byte_by_byte_equals_whole() -> None:
    body = _body_of((DATA / "vllm_chat_stream.bin").read_bytes())
    assert _decode_in_pieces(body, list(range(1, len(body)))) == _decode_in_pieces(body, [])


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_line_endings_comments_multiline_data_and_other_fields(newline: bytes) -> None:
    n = newline
    stream = (b": keep-alive comment" + n + n
              + b"event: message" + n + b"id: 7" + n + b"data: first" + n + b"data:second" + n + n
              + b"retry: 10" + n + n  # an event without data dispatches nothing
              + b"data: {\"x\": 1}" + n + n)
    expected = [b"first\nsecond", b'{"x": 1}']
    assert _decode_in_pieces(stream, []) == expected
    for cut in range(1, len(stream)):
        assert _decode_in_pieces(stream, [cut]) == expected, f"split at {cut}"


def test_incomplete_event_is_held_until_its_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: partial") == []
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\n") == [b"partial"]


def test_one_whole_event_per_piece_takes_the_fast_path_and_agrees() -> None:
    """vLLM writes one event per HTTP chunk; fed exactly so, the decoder's shortcut must give
    what the general path gives, and fall back whenever a piece is anything else."""
    body = _body_of((DATA / "vllm_chat_stream.bin").read_bytes())
    events = body.split(b"\n\n")[:-1]
    decoder = SSEDecoder()
    one_by_one = [payload for event in events for payload in decoder.feed(event + b"\n\n")]
    assert one_by_one == _decode_in_pieces(body, [])
    mixed = SSEDecoder()
    assert mixed.feed(b"data: a\n\ndata: b\n\n") == [b"a", b"b"]  # two events, one piece
    assert mixed.feed(b"data: c\ndata: d\n\n") == [b"c\nd"]  # a multi-line event
    assert mixed.feed(b"data: e") == [] and mixed.feed(b"\n\n") == [b"e"]  # held, then done
