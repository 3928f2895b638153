"""A minimal HTTP/1.1 client that timestamps every socket read of a streamed response.

Why not requests/httpx: the measurement must be taken at the socket. Each `recv` returns as soon
as any bytes arrive (never a fixed-size read that waits for n bytes), its arrival time is taken
with `perf_counter` right after it returns, chunked framing and SSE lines are split in the same
pass (with fast paths for one whole chunk / one whole event per read, how vLLM writes), and JSON
is never parsed here: the caller gets each payload right after its stamp. Works on plain
sockets and, inside Locust, on gevent's cooperative ones (Locust monkey-patches `socket`).
Keep-alive is kept per client.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from vllm_slo.servers.sse import SSEDecoder

_RECV_BYTES = 65536


@dataclass(slots=True)
class ReadCounters:
    """Per-process totals of streamed-body reads, for the load generator's self-monitoring:
    `sse_events / socket_reads` far above 1 means events waited in the socket buffer for a
    late read (the client fell behind the server)."""

    socket_reads: int = 0  # recv calls that returned body bytes of an SSE response
    sse_events: int = 0  # SSE events those reads completed


READ_COUNTERS = ReadCounters()


@dataclass(slots=True)
class StreamedResponse:
    """What came back; `events` pairs each SSE payload with the perf_counter of its arrival."""

    status: int = 0
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    events: list[tuple[float, bytes]] = field(default_factory=list)
    body: bytes = b""  # non-SSE bodies (errors, JSON)
    headers_at_s: float | None = None
    ended_at_s: float | None = None
    transport_error: str | None = None


class _NothingReceived(ConnectionError):
    """The server closed the connection before sending a byte (e.g. an idle keep-alive)."""


class _ChunkedDecoder:
    """Incremental `Transfer-Encoding: chunked` decoder."""

    __slots__ = ("_buffer", "_remaining", "_state", "done")

    def __init__(self) -> None:
        self._buffer = b""
        self._remaining = 0
        self._state = "size"  # size | data | data_crlf | trailer
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if not self._buffer and self._state == "size":
            # the common case: the piece is exactly one whole chunk (`SIZE\r\nDATA\r\n`)
            line_end = data.find(b"\r\n")
            if 0 < line_end <= 8:
                try:
                    size = int(data[:line_end], 16)
                except ValueError:
                    size = -1
                if size > 0 and len(data) == line_end + size + 4 and data[-2:] == b"\r\n":
                    return data[line_end + 2 : -2]
        buffer = self._buffer + data
        out = []
        position = 0
        while not self.done:
            if self._state == "data":
                take = min(self._remaining, len(buffer) - position)
                if take == 0:
                    break
                out.append(buffer[position : position + take])
                position += take
                self._remaining -= take
                if self._remaining == 0:
                    self._state = "data_crlf"
                continue
            line_end = buffer.find(b"\r\n", position)
            if line_end == -1:
                break
            line = buffer[position:line_end]
            position = line_end + 2
            if self._state == "size":
                size_text = line.split(b";", 1)[0].strip()
                try:
                    self._remaining = int(size_text, 16)
                except ValueError:
                    raise ValueError(f"bad chunk size line {line[:40]!r}") from None
                self._state = "data" if self._remaining else "trailer"
            elif self._state == "data_crlf":
                if line:
                    raise ValueError("chunk data not followed by CRLF")
                self._state = "size"
            elif not line:  # end of trailers
                self.done = True
        self._buffer = buffer[position:]
        return b"".join(out)


class HttpStreamClient:
    """One keep-alive connection to one server. Not thread-safe: one per user (greenlet)."""

    def __init__(self, base_url: str, timeout_s: float = 300.0, api_key: str | None = None,
                 read_timeouts: bool = True):
        """`timeout_s` bounds connecting and, with `read_timeouts`, every read (a stalled
        server raises TimeoutError). Without `read_timeouts` reads wait as long as it takes:
        the caller bounds the whole request instead (inside Locust, one gevent.Timeout per
        request is far cheaper than gevent's timer per socket wait)."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http(s):// base URL, got {base_url!r}")
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.base_path = parts.path.rstrip("/")
        self.timeout_s = timeout_s
        self._host_header = parts.netloc.rsplit("@", 1)[-1]
        self._auth = f"Authorization: Bearer {api_key}\r\n" if api_key else ""
        self._read_timeouts = read_timeouts
        self._sock: socket.socket | None = None

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        if not self._read_timeouts:
            sock.settimeout(None)
        return sock

    def request(self, method: str, path: str, body: bytes | None = None,
                request_id: str | None = None,
                on_event: Callable[[float, bytes], None] | None = None) -> StreamedResponse:
        """Send one request; SSE bodies are split into timestamped events as bytes arrive,
        collected in `events` or, with `on_event`, handed over one by one right after their
        read was stamped. `request_id` travels as `X-Request-Id` (vLLM uses it as its own
        request id, so server logs and the stand-in's send log join the client's rows)."""
        head = (
            f"{method} {self.base_path}{path} HTTP/1.1\r\nHost: {self._host_header}\r\n"
            f"User-Agent: vllm-slo\r\nAccept: */*\r\n{self._auth}"
        )
        if request_id is not None:
            head += f"X-Request-Id: {request_id}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        payload = (head + "\r\n").encode("latin-1") + (body or b"")
        for attempt in (1, 2):
            reused = self._sock is not None
            try:
                if self._sock is None:
                    self._sock = self._connect()
                self._sock.sendall(payload)
                return self._read_response(self._sock, on_event)
            except _NothingReceived as exc:
                self.close()
                if not (reused and attempt == 1):  # a stale keep-alive socket is retried once
                    return StreamedResponse(transport_error=str(exc),
                                            ended_at_s=time.perf_counter())
            except (OSError, ValueError) as exc:
                self.close()
                return StreamedResponse(transport_error=f"{type(exc).__name__}: {exc}",
                                        ended_at_s=time.perf_counter())
        raise AssertionError("unreachable")

    def _read_response(self, sock: socket.socket,
                       on_event: Callable[[float, bytes], None] | None = None
                       ) -> StreamedResponse:
        response = StreamedResponse()
        perf_counter = time.perf_counter
        deadline = perf_counter() + self.timeout_s
        buffer = b""
        while True:
            data = sock.recv(_RECV_BYTES)
            if not data:
                if not buffer:
                    raise _NothingReceived("connection closed before a response")
                raise ValueError("connection closed inside the response headers")
            buffer += data
            header_end = buffer.find(b"\r\n\r\n")
            if header_end != -1:
                break
            if len(buffer) > 1 << 16:
                raise ValueError("response headers larger than 64 KiB")
        response.headers_at_s = perf_counter()
        head, rest = buffer[:header_end], buffer[header_end + 4 :]
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        version, _, status_reason = status_line.partition(" ")
        status_text, _, response.reason = status_reason.partition(" ")
        response.status = int(status_text)
        for line in header_lines:
            name, _, value = line.partition(":")
            response.headers[name.strip().lower()] = value.strip()
        chunked = "chunked" in response.headers.get("transfer-encoding", "").lower()
        length_text = response.headers.get("content-length")
        remaining = int(length_text) if length_text is not None and not chunked else None
        keep_alive = version == "HTTP/1.1" and (
            response.headers.get("connection", "").lower() != "close"
        )
        is_sse = response.headers.get("content-type", "").startswith("text/event-stream")
        decoder = _ChunkedDecoder() if chunked else None
        sse = SSEDecoder() if is_sse else None
        events = response.events
        counters = READ_COUNTERS
        body_parts: list[bytes] = []
        arrived_at_s = response.headers_at_s
        data = rest
        while True:
            if data:
                piece = decoder.feed(data) if decoder is not None else data
                if remaining is not None:
                    remaining -= len(data)
                if sse is not None:
                    completed = sse.feed(piece)
                    counters.socket_reads += 1
                    counters.sse_events += len(completed)
                    for payload in completed:
                        if on_event is None:
                            events.append((arrived_at_s, payload))
                        else:
                            on_event(arrived_at_s, payload)
                else:
                    body_parts.append(piece)
            if (decoder is not None and decoder.done) or (remaining is not None and remaining <= 0):
                break
            if response.status in (204, 304) or (response.status < 200):
                break
            if perf_counter() > deadline:
                raise TimeoutError(f"response not finished after {self.timeout_s:.0f}s")
            data = sock.recv(_RECV_BYTES)
            arrived_at_s = perf_counter()
            if not data:
                keep_alive = False
                if decoder is not None or remaining is not None:
                    response.transport_error = "connection closed before the response ended"
                break
        response.ended_at_s = arrived_at_s
        response.body = b"".join(body_parts)
        if not keep_alive:
            self.close()
        return response
