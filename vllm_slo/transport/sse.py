"""Incremental Server-Sent Events decoder (the subset OpenAI-compatible servers use).

Fed raw body bytes as they arrive, in pieces of any size; returns the `data` payload of each
event completed by that piece. Follows the SSE spec for what matters here: lines end in LF,
CRLF or CR; `data:` fields of one event join with LF; comment lines (`:`) and other fields are
ignored; an event ends at a blank line. Pure, no I/O, no JSON parsing, no decoding: payloads
are bytes. An event (or a line) over `MAX_EVENT_BYTES` raises `ResponseTooLarge`: the client
must not buffer without bound what a server sends.
"""

from __future__ import annotations

# one SSE event of an OpenAI-compatible stream is a few hundred bytes (a token chunk) up to
# kilobytes (logprobs); 16 MiB is far above any real one and bounds a broken server's cost
MAX_EVENT_BYTES = 16 << 20


class ResponseTooLarge(ValueError):
    """A response body or one SSE event over the client's size limit (a failed request,
    status `bad_response`, never a client out of memory)."""


class SSEDecoder:
    __slots__ = ("_data", "_data_bytes", "_has_data", "_pending", "_skip_lf")

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[bytes] = []
        self._data_bytes = 0  # bytes of the event's data fields so far
        self._has_data = False
        self._skip_lf = False  # a CR ended the previous piece; a leading LF belongs to it

    def feed(self, piece: bytes) -> list[bytes]:
        """Decode a piece of body; return payloads of the events it completed, in order.
        Payloads are bytes (UTF-8 is checked by whoever reads them)."""
        if (not self._pending and not self._has_data and not self._skip_lf
                and piece[:6] == b"data: " and piece[-2:] == b"\n\n"):
            # the common case: one whole `data: ...` event per piece (how vLLM writes)
            payload = piece[6:-2]
            if b"\n" not in payload and b"\r" not in payload:
                return [payload]
        if self._skip_lf and piece[:1] == b"\n":
            piece = piece[1:]
        self._skip_lf = False
        buffer = self._pending + piece
        events: list[bytes] = []
        start = 0
        length = len(buffer)
        while start < length:
            cr = buffer.find(b"\r", start)
            lf = buffer.find(b"\n", start)
            if cr == -1 and lf == -1:
                break
            if cr == -1 or (lf != -1 and lf < cr):
                end, next_start = lf, lf + 1
            else:
                end = cr
                if cr + 1 < length:
                    next_start = cr + 2 if buffer[cr + 1 : cr + 2] == b"\n" else cr + 1
                else:
                    next_start = cr + 1
                    self._skip_lf = True
            self._line(buffer[start:end], events)
            start = next_start
        self._pending = buffer[start:]
        if len(self._pending) + self._data_bytes > MAX_EVENT_BYTES:
            raise ResponseTooLarge(f"an SSE event over {MAX_EVENT_BYTES >> 20} MiB")
        return events

    def _line(self, line: bytes, events: list[bytes]) -> None:
        if not line:
            if self._has_data:
                events.append(b"\n".join(self._data))
            self._data = []
            self._data_bytes = 0
            self._has_data = False
            return
        if line[:1] == b":":
            return
        field, sep, value = line.partition(b":")
        if field != b"data":
            return
        if sep and value[:1] == b" ":
            value = value[1:]
        self._data.append(value)
        self._data_bytes += len(value) + 1
        self._has_data = True
