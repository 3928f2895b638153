"""A minimal HTTP/1.1 client that timestamps every socket read of a streamed response.

Why not requests/httpx: the measurement must be taken at the socket. Each `recv` returns as soon
as any bytes arrive (never a fixed-size read that waits for n bytes), its arrival time is taken
with `perf_counter` right after it returns, chunked framing and SSE lines are split in the same
pass (with fast paths for one whole chunk / one whole event per read, how vLLM writes), and JSON
is never parsed here: the caller gets each payload right after its stamp. Keep-alive is kept
per client.

Reading is split in two: `ResponseParser` is the whole response state machine (status line,
headers, content-length / chunked / read-to-close bodies, SSE events, keep-alive), fed one
read's bytes with the stamp taken right after that read; a *reader* only calls `recv` and feeds
it. The plain blocking reader here serves everything outside Locust (readiness, /metrics, the
prefix-cache reset, tests) and works on gevent's cooperative sockets too. Inside Locust the
users hand their sockets to one reader per process instead (`reader=`: loadtests/reader_pump.py,
which reads every ready socket of the process in one pass); both feed the same parser.

HTTP as RFC 9110 / 9112 say (issue 40): interim `1xx` responses (`100 Continue`, `103 Early
Hints`) are skipped before the final response (a `101` was never asked for: an error); a
connection reset, broken pipe or close before any byte of the response on a *reused*
keep-alive connection is retried once on a fresh connection (the server closed it while idle:
the request never reached it; counted in `READ_COUNTERS.keepalive_retries`), never on a new
one; a body that is not SSE is kept whole up to `MAX_BODY_BYTES` and one SSE event up to
`sse.MAX_EVENT_BYTES`: above, the request fails (`ResponseTooLarge`, a `bad_response` row).
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from vllm_slo.transport.sse import ResponseTooLarge, SSEDecoder

RECV_BYTES = 65536
_MAX_HEAD_BYTES = 1 << 16
_MAX_LINE_BYTES = 1 << 16  # a chunk-size or trailer line; far above any real one
# a body that is not SSE (an error's JSON, a non-streamed answer) is kilobytes; 16 MiB is far
# above any real one and bounds what a broken server can make the client buffer
MAX_BODY_BYTES = 16 << 20
_MAX_INTERIM = 16  # interim (1xx) responses before the final one; more is a broken server


@dataclass(slots=True)
class ReadCounters:
    """Per-process totals of streamed-body reads, for the load generator's self-monitoring:
    `sse_events / socket_reads` far above 1 means events waited in the socket buffer for a
    late read (the client fell behind the server)."""

    socket_reads: int = 0  # recv calls that returned body bytes of an SSE response
    sse_events: int = 0  # SSE events those reads completed
    keepalive_retries: int = 0  # requests re-sent: their reused connection had been closed


READ_COUNTERS = ReadCounters()


@dataclass(slots=True)
class StreamedResponse:
    """What came back; `events` pairs each SSE payload with the perf_counter of its arrival."""

    status: int = 0
    reason: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    events: list[tuple[float, bytes]] = field(default_factory=list)
    body: bytes = b""  # non-SSE bodies (errors, JSON)
    sse_bytes: int = 0  # bytes of an SSE body (events or not: lines without data count too)
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
                if len(buffer) - position > _MAX_LINE_BYTES:
                    raise ValueError("chunk size or trailer line over 64 KiB")
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


class ResponseParser:
    """One HTTP/1.1 response, fed as it is read: `feed(data, arrived_at_s)` for every read that
    returned bytes (`arrived_at_s`: perf_counter right after that read returned), `closed(...)`
    when a read returned b'' (the peer closed). No I/O: whoever reads the socket drives it.

    SSE payloads go to `on_event(arrived_at_s, payload)` as their read completes them (or into
    `response.events` without one); other bodies are kept whole in `response.body`. Malformed
    framing raises ValueError (`ResponseTooLarge` over the size limits); a connection closed
    before any byte raises `_NothingReceived` (the client retries a stale keep-alive
    connection once). Interim 1xx responses are read and dropped; `response` is the final
    one."""

    __slots__ = ("_body_bytes", "_body_parts", "_decoder", "_head", "_in_body", "_interim",
                 "_no_body", "_remaining", "_sse", "done", "keep_alive", "on_event",
                 "received", "response")

    def __init__(self, on_event: Callable[[float, bytes], None] | None = None) -> None:
        self.response = StreamedResponse()
        self.on_event = on_event
        self.done = False  # the response ended (complete, closed or aborted)
        self.keep_alive = False  # the connection may carry the next request
        self._head = b""  # response bytes before the end of the headers
        self._in_body = False
        self._no_body = False  # 1xx / 204 / 304: the response ends with its headers
        self._decoder: _ChunkedDecoder | None = None
        self._sse: SSEDecoder | None = None
        self._remaining: int | None = None  # content-length bytes still to come
        self._body_parts: list[bytes] = []
        self._body_bytes = 0
        self._interim = 0  # interim (1xx) responses skipped
        self.received = False  # any byte of a response arrived (a retry is unsafe after)

    def feed(self, data: bytes, arrived_at_s: float) -> bool:
        """One read's bytes (non-empty); True once the response has ended (bytes after its end
        in the same read are ignored: requests are never pipelined)."""
        self.received = True
        if not self._in_body:
            rest = self._head_bytes(data, arrived_at_s)
            if rest is None:
                return False
            data = rest
        if data:
            decoder = self._decoder
            piece = decoder.feed(data) if decoder is not None else data
            if self._remaining is not None:
                self._remaining -= len(data)
            sse = self._sse
            if sse is not None:
                completed = sse.feed(piece)
                self.response.sse_bytes += len(piece)
                counters = READ_COUNTERS
                counters.socket_reads += 1
                counters.sse_events += len(completed)
                on_event = self.on_event
                if on_event is None:
                    self.response.events += [(arrived_at_s, payload) for payload in completed]
                else:
                    for payload in completed:
                        on_event(arrived_at_s, payload)
            else:
                self._body_bytes += len(piece)
                if self._body_bytes > MAX_BODY_BYTES:
                    self._body_parts = []
                    raise ResponseTooLarge(f"a non-streamed body over "
                                           f"{MAX_BODY_BYTES >> 20} MiB (HTTP "
                                           f"{self.response.status}): not kept")
                self._body_parts.append(piece)
        if ((self._decoder is not None and self._decoder.done)
                or (self._remaining is not None and self._remaining <= 0) or self._no_body):
            self._end(arrived_at_s)
            return True
        return False

    def _head_bytes(self, data: bytes, arrived_at_s: float) -> bytes | None:
        """Collect header bytes; once they are complete, parse them and return the rest of the
        read (the first body bytes); None while the headers are incomplete."""
        buffer = self._head + data
        while True:
            header_end = buffer.find(b"\r\n\r\n")
            if header_end == -1:
                if len(buffer) > _MAX_HEAD_BYTES:
                    raise ValueError("response headers larger than 64 KiB")
                self._head = buffer
                return None
            status_line, *header_lines = buffer[:header_end].decode("latin-1").split("\r\n")
            version, status, reason = _status_line(status_line)
            if status >= 200:
                break
            # interim (RFC 9110 §15.2): its headers are dropped, the final response follows
            if status == 101:
                raise ValueError("101 Switching Protocols, never asked for")
            self._interim += 1
            if self._interim > _MAX_INTERIM:
                raise ValueError(f"more than {_MAX_INTERIM} interim (1xx) responses")
            buffer = buffer[header_end + 4 :]
        self._head = b""
        self._in_body = True
        response = self.response
        response.headers_at_s = arrived_at_s
        response.status, response.reason = status, reason
        headers = response.headers
        for line in header_lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length_text = headers.get("content-length")
        self._remaining = None
        if length_text is not None and not chunked:
            if not (length_text.isascii() and length_text.isdigit()):
                raise ValueError(f"bad Content-Length {length_text[:40]!r}")
            self._remaining = int(length_text)
        self.keep_alive = version == "HTTP/1.1" and (
            headers.get("connection", "").lower() != "close")
        self._decoder = _ChunkedDecoder() if chunked else None
        if headers.get("content-type", "").startswith("text/event-stream"):
            self._sse = SSEDecoder()
        elif self._remaining is not None and self._remaining > MAX_BODY_BYTES:
            raise ResponseTooLarge(f"a non-streamed body over {MAX_BODY_BYTES >> 20} MiB "
                                   f"(HTTP {status}, Content-Length: {self._remaining}): "
                                   f"not read")
        self._no_body = status in (204, 304)
        return buffer[header_end + 4 :]

    def closed(self, arrived_at_s: float) -> None:
        """The peer closed the connection (a read returned b'')."""
        if not self._in_body:
            if not self.received:
                raise _NothingReceived("connection closed before a response")
            raise ValueError("connection closed inside the response headers")
        self.keep_alive = False
        if self._decoder is not None or self._remaining is not None:
            self.response.transport_error = "connection closed before the response ended"
        self._end(arrived_at_s)

    def abort(self, error: str, at_s: float) -> StreamedResponse:
        """The read failed (socket error, bad framing, the request's watchdog): the response so
        far, status and the events already handed over included, carrying the error."""
        self.keep_alive = False
        self._end(at_s)
        self.response.transport_error = error
        return self.response

    def _end(self, at_s: float) -> None:
        self.done = True
        self.response.ended_at_s = at_s
        self.response.body = b"".join(self._body_parts)


def _status_line(line: str) -> tuple[str, int, str]:
    """`HTTP/1.1 200 OK` -> ("HTTP/1.1", 200, "OK"); ValueError unless the status is three
    digits, 100-599 (RFC 9110 §15)."""
    version, _, rest = line.partition(" ")
    status_text, _, reason = rest.partition(" ")
    if (not version.startswith("HTTP/") or len(status_text) != 3 or not status_text.isascii()
            or not status_text.isdigit() or not "100" <= status_text <= "599"):
        raise ValueError(f"bad status line {line[:80]!r}")
    return version, int(status_text), reason


Reader = Callable[[socket.socket, ResponseParser], None]


def read_blocking(sock: socket.socket, parser: ResponseParser,
                  timeout_s: float | None = None) -> None:
    """Drive `parser` to the end of its response with `sock.recv` (blocking, or cooperative on
    gevent's sockets); `timeout_s` bounds the body's reading as a whole."""
    perf_counter = time.perf_counter
    recv = sock.recv
    feed = parser.feed
    deadline = perf_counter() + timeout_s if timeout_s is not None else None
    while True:
        data = recv(RECV_BYTES)
        arrived_at_s = perf_counter()
        if not data:
            parser.closed(arrived_at_s)
            return
        if feed(data, arrived_at_s):
            return
        if deadline is not None and arrived_at_s > deadline:
            raise TimeoutError(f"response not finished after {timeout_s:.0f}s")


class HttpStreamClient:
    """One keep-alive connection to one server. Not thread-safe: one per user (greenlet)."""

    def __init__(self, base_url: str, timeout_s: float = 300.0, api_key: str | None = None,
                 read_timeouts: bool = True, reader: Reader | None = None):
        """`timeout_s` bounds connecting and, with `read_timeouts`, every read (a stalled
        server raises TimeoutError). Without `read_timeouts` reads wait as long as it takes:
        the caller bounds the whole request instead (inside Locust, one gevent.Timeout per
        request is far cheaper than gevent's timer per socket wait). `reader(sock, parser)`
        replaces the blocking reader for plain-HTTP responses: it must drive the parser to
        `done` and raise what the blocking one would (OSError, ValueError, or what the parser
        raised)."""
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
        # TLS keeps decrypted bytes of its own that a readiness poll cannot see: blocking reads
        self._reader = reader if not self.tls else None
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
        request id, so server logs and the stand-in's send log join the client's rows).
        A failure after the headers keeps what arrived (status, events) with the error."""
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
            parser = ResponseParser(on_event)
            try:
                if self._sock is None:
                    self._sock = self._connect()
                self._sock.sendall(payload)
                if self._reader is not None:
                    self._reader(self._sock, parser)
                else:
                    self._read_blocking(self._sock, parser)
            except ConnectionError as exc:  # reset, broken pipe, aborted, closed (not timeouts)
                self.close()
                if reused and attempt == 1 and not parser.received:
                    # the server closed the idle connection before it read the request
                    # (uvicorn: after 5 s): once more on a fresh one
                    READ_COUNTERS.keepalive_retries += 1
                    continue
                if isinstance(exc, _NothingReceived):
                    return StreamedResponse(transport_error=str(exc),
                                            ended_at_s=time.perf_counter())
                return parser.abort(f"{type(exc).__name__}: {exc}", time.perf_counter())
            except (OSError, ValueError) as exc:
                self.close()
                return parser.abort(f"{type(exc).__name__}: {exc}", time.perf_counter())
            except BaseException:  # e.g. the user's greenlet killed mid-response
                self.close()
                raise
            if not parser.keep_alive:
                self.close()
            return parser.response
        raise AssertionError("unreachable")

    def _read_blocking(self, sock: socket.socket, parser: ResponseParser) -> None:
        read_blocking(sock, parser, self.timeout_s)

    def _read_response(self, sock: socket.socket,
                       on_event: Callable[[float, bytes], None] | None = None
                       ) -> StreamedResponse:
        """The blocking reader on its own (tests feed it fake sockets)."""
        parser = ResponseParser(on_event)
        self._read_blocking(sock, parser)
        if not parser.keep_alive:
            self.close()
        return parser.response
