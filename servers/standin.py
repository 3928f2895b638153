"""Known-timing stand-in for vLLM's OpenAI-compatible server. A TEST INSTRUMENT, never a vLLM.

It exists to prove that what the suite measures equals what happened (every chunk is sent at a
scheduled, recorded moment) and to inject faults. It mimics the wire format of real vLLM
(`vllm serve`, see shared/cpu-vllm/README.md "Endpoints checked"): the same endpoints, the same
SSE chunk sequence (chat: a role chunk, one chunk per token, the last with
``finish_reason: "length"``, a ``choices: []`` usage chunk when ``stream_options.include_usage``,
then ``data: [DONE]``), the same error shapes. Standard library only (asyncio), loopback only.

Timing model (all times from a monotonic clock, scheduled as absolute deadlines so nothing drifts):

* ``receipt``: the request has been read. Streaming responses send their HTTP headers now.
* ``start``: the request leaves the FIFO queue (immediately unless ``max_concurrency`` is
  reached). The chat role chunk goes at ``start + min(role_delay_s, ttft_s)``.
* token ``i`` is "generated" at ``start + ttft_s + i * itl_s`` (+ uniform ``[0, jitter_s]``);
  a chunk is sent when its last token is generated. Chunks hold one token, or, with
  ``tokens_per_chunk = k``, the first token alone and then ``k`` tokens each (vLLM
  ``--stream-interval``). Usage chunk, ``[DONE]`` and the terminating HTTP chunk follow the last
  token chunk at once, each as its own write.
* non-streaming responses are sent whole at the time of the last token.

Faults (``StandinConfig.fault_kind`` with ``fault_rate``, or per request with the header
``x-standin-fault: <kind>``; ``none`` forces a normal answer):

* ``http_500`` / ``http_503``: that status at once, with a vLLM-shaped JSON error body.
* ``sse_error``: streaming: HTTP 200, one SSE ``{"error": {..., "code": 503}}`` event, then
  ``[DONE]`` (vLLM under ``--max-num-queued-reqs``); non-streaming: HTTP 503 (as vLLM does).
* ``no_tokens``: HTTP 200, the role chunk (chat), then at ``ttft_s`` the usage chunk (when asked
  for) with ``completion_tokens: 0`` and ``[DONE]``; non-streaming: empty content.
* ``drop_mid_stream``: the socket is closed (FIN, no terminating chunk) at the moment token
  ``max_tokens // 2`` would be sent, i.e. after half the tokens.
* ``hang``: streaming: HTTP 200 headers, then nothing until the client disconnects;
  non-streaming: nothing at all.
* ``xss``: normal timing, but the content tokens carry HTML/JS payloads (report-escaping tests).

Python API: :class:`StandinConfig`, :class:`StandinServer` (background thread, records every
completion request as a :class:`RequestRecord`), :func:`running_standin` (yields the base URL),
:class:`StandinApp` (the asyncio server itself). CLI::

    python -m servers.standin --port 0 --ttft 0.05 --itl 0.01
    # prints "STANDIN READY http://127.0.0.1:PORT" once listening; serves until SIGTERM/SIGINT
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import math
import random
import signal
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from email.utils import formatdate
from typing import Any

FAULT_KINDS: tuple[str, ...] = (
    "http_500",
    "http_503",
    "sse_error",
    "no_tokens",
    "drop_mid_stream",
    "hang",
    "xss",
)
FAULT_HEADER = "x-standin-fault"
NO_FAULT = "none"
READY_PREFIX = "STANDIN READY "
HOST = "127.0.0.1"

BUSY_MESSAGE = "The engine is currently busy, please retry later (standin injected fault)."
XSS_PAYLOADS: tuple[str, ...] = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>')

_WORDS = ("The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".")
_XSS_WORDS = (" " + XSS_PAYLOADS[0], " " + XSS_PAYLOADS[1], " &amp;", " '")
_HEAD_LIMIT = 1 << 20
_MAX_BODY = 64 << 20
_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


# ---------------------------------------------------------------------------------------------
# configuration and records


@dataclasses.dataclass(frozen=True)
class StandinConfig:
    """Every knob of the stand-in. Durations in seconds; validated on construction."""

    model: str = "standin"
    max_model_len: int = 2048
    ttft_s: float = 0.05
    itl_s: float = 0.01
    role_delay_s: float = 0.0
    jitter_s: float = 0.0
    max_concurrency: int | None = None  # None: unlimited; else a FIFO queue before `start`
    tokens_per_chunk: int = 1
    default_max_tokens: int = 16
    fault_kind: str | None = None  # applied to each request with probability fault_rate
    fault_rate: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("ttft_s", "itl_s", "role_delay_s", "jitter_s"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"StandinConfig.{name} must be a finite number >= 0, got {value!r}"
                )
        for name in ("max_model_len", "tokens_per_chunk", "default_max_tokens"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(f"StandinConfig.{name} must be an integer >= 1, got {value!r}")
        if self.max_concurrency is not None and (
            not _is_int(self.max_concurrency) or self.max_concurrency < 1
        ):
            raise ValueError(
                "StandinConfig.max_concurrency must be None (unlimited) or an integer >= 1, "
                f"got {self.max_concurrency!r}"
            )
        if self.fault_kind is not None and self.fault_kind not in FAULT_KINDS:
            raise ValueError(
                f"StandinConfig.fault_kind must be None or one of {', '.join(FAULT_KINDS)}; "
                f"got {self.fault_kind!r}"
            )
        if not _is_number(self.fault_rate) or not 0.0 <= self.fault_rate <= 1.0:
            raise ValueError(f"StandinConfig.fault_rate must be in [0, 1], got {self.fault_rate!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"StandinConfig.model must be a non-empty string, got {self.model!r}")
        if not _is_int(self.seed):
            raise ValueError(f"StandinConfig.seed must be an integer, got {self.seed!r}")


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    """What the stand-in really did for one completion request (times: ``time.monotonic()``)."""

    request_id: str
    path: str
    stream: bool
    fault: str | None
    status: int  # HTTP status sent; 0 when no status line was sent (hang/drop, non-streaming)
    receipt_s: float  # request fully read
    start_s: float | None  # left the FIFO queue (None: never queued, e.g. errors, hang)
    first_content_s: float | None  # first content chunk (or whole non-streaming body) written
    last_chunk_s: float | None  # last body write ([DONE] / terminating chunk / whole body)
    content_chunk_s: tuple[float, ...]  # write time of every content chunk, in order
    prompt_tokens: int
    completion_tokens: int  # tokens actually sent
    client_disconnected: bool  # the client went away before the response was complete

    @property
    def queue_wait_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.receipt_s


@dataclasses.dataclass
class _Trace:
    request_id: str
    path: str
    receipt_s: float
    stream: bool = False
    fault: str | None = None
    status: int = 0
    start_s: float | None = None
    first_content_s: float | None = None
    last_chunk_s: float | None = None
    content_chunk_s: list[float] = dataclasses.field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    client_disconnected: bool = False

    def freeze(self) -> RequestRecord:
        fields = dataclasses.asdict(self)
        fields["content_chunk_s"] = tuple(self.content_chunk_s)
        return RequestRecord(**fields)


# ---------------------------------------------------------------------------------------------
# minimal HTTP/1.1


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _ApiError(Exception):
    """An OpenAI-style error answer, shaped like vLLM's ``ErrorResponse``."""

    def __init__(self, status: int, err_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.err_type = err_type
        self.message = message

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": None,
                "code": self.status,
            }
        }


@dataclasses.dataclass
class _Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    @property
    def keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.0":
            return "keep-alive" in tokens
        return "close" not in tokens


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> _Request | None:
    """One request, or None on a clean EOF between requests."""
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial.strip():
                return None
            raise _HttpError(400, "incomplete request head") from None
        except asyncio.LimitOverrunError:
            raise _HttpError(431, "request head too large") from None
        head = head.lstrip(b"\r\n")
        if head:
            break
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise _HttpError(400, f"bad request line {lines[0]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _HttpError(400, f"bad header line {line!r}")
        key = name.lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()

    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    transfer_encoding = headers.get("transfer-encoding", "").lower()
    if transfer_encoding:
        if transfer_encoding != "chunked":
            raise _HttpError(501, f"unsupported transfer-encoding {transfer_encoding!r}")
        body = await _read_chunked_body(reader)
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise _HttpError(400, "bad content-length") from None
        if length < 0:
            raise _HttpError(400, "bad content-length")
        if length > _MAX_BODY:
            raise _HttpError(413, "request body too large")
        body = await reader.readexactly(length) if length else b""
    return _Request(method, target, version, headers, body)


async def _read_chunked_body(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise _HttpError(400, "bad chunk size") from None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return bytes(body)
        if len(body) + size > _MAX_BODY:
            raise _HttpError(413, "request body too large")
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise _HttpError(400, "bad chunk terminator")


def _head(status: int, headers: Sequence[tuple[str, str]], *, keep_alive: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
        f"date: {formatdate(usegmt=True)}",
        "server: vllm-slo-standin",
    ]
    lines += [f"{name}: {value}" for name, value in headers]
    if not keep_alive:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _sse(obj: Any) -> bytes:
    data = obj if isinstance(obj, str) else _dumps(obj)
    return _http_chunk(f"data: {data}\n\n".encode())


_LAST_CHUNK = b"0\r\n\r\n"
_SSE_HEADERS = (
    ("content-type", "text/event-stream; charset=utf-8"),
    ("transfer-encoding", "chunked"),
)


async def _write(writer: asyncio.StreamWriter, data: bytes) -> float:
    """Write and drain one piece as its own TCP write; returns the monotonic send time."""
    sent = time.monotonic()
    writer.write(data)
    await writer.drain()
    return sent


async def _send_body(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    content_type: str,
    *,
    keep_alive: bool,
    head_only: bool = False,
) -> float:
    headers = [("content-type", content_type), ("content-length", str(len(body)))]
    return await _write(
        writer, _head(status, headers, keep_alive=keep_alive) + (b"" if head_only else body)
    )


async def _send_json(
    writer: asyncio.StreamWriter, status: int, obj: Any, *, keep_alive: bool
) -> float:
    return await _send_body(
        writer, status, _dumps(obj).encode(), "application/json", keep_alive=keep_alive
    )


async def _sleep_until(deadline: float) -> None:
    """Sleep until a monotonic deadline (the loop's clock is ``time.monotonic``)."""
    loop = asyncio.get_running_loop()
    if deadline <= loop.time():
        return
    waiter = loop.create_future()
    handle = loop.call_at(deadline, _resolve, waiter)
    try:
        await waiter
    finally:
        handle.cancel()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _wait_for_disconnect(reader: asyncio.StreamReader) -> None:
    while await reader.read(65536):
        pass


# ---------------------------------------------------------------------------------------------
# the server


class _FifoLimiter:
    """Strictly first-in-first-out concurrency limit (None: unlimited)."""

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def acquire(self) -> None:
        if self._limit is None or (self.running < self._limit and not self._waiters):
            self.running += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # the releasing request hands its slot over; `running` is unchanged
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.running -= 1


@dataclasses.dataclass(frozen=True)
class _Params:
    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool


def _count_words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):  # content parts [{"type": "text", "text": ...}]
        return sum(_count_words(p.get("text", "")) for p in value if isinstance(p, dict))
    return 0


class StandinApp:
    """The asyncio server. One per event loop; see StandinServer for a threaded wrapper.

    It keeps no per-request history itself (a long CLI run must not grow): pass `on_record`
    to receive a RequestRecord for every completion request as it ends.
    """

    def __init__(
        self,
        config: StandinConfig | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        self.config = config or StandinConfig()
        self._on_record = on_record  # called once per completion request, when it ends
        self._limiter = _FifoLimiter(self.config.max_concurrency)
        self._fault_rng = random.Random(f"fault:{self.config.seed}")
        self._jitter_rng = random.Random(f"jitter:{self.config.seed}")
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._prompt_tokens_total = 0
        self._generation_tokens_total = 0
        self._finished: dict[str, int] = {"length": 0, "stop": 0, "abort": 0}

    async def start(self, port: int = 0) -> int:
        """Listen on 127.0.0.1:port (0: any free port); returns the bound port."""
        self._server = await asyncio.start_server(
            self._handle_connection, host=HOST, port=port, limit=_HEAD_LIMIT
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def aclose(self) -> None:
        """Stop listening, cut every open connection (hanging ones included), wait for them."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        await asyncio.sleep(0)  # let the transports' connection_lost callbacks run

    # -- connections ---------------------------------------------------------------------------

    async def _handle_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                try:
                    request = await _read_request(reader, writer)
                except _HttpError as exc:
                    await _send_json(writer, exc.status, {"detail": exc.message}, keep_alive=False)
                    break
                if request is None or not await self._dispatch(request, reader, writer):
                    break
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the peer went away
        except asyncio.CancelledError:
            writer.transport.abort()
            raise
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _dispatch(
        self, req: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        keep = req.keep_alive
        path = req.path
        if path in ("/v1/chat/completions", "/v1/completions"):
            if req.method != "POST":
                await _send_json(writer, 405, {"detail": "Method Not Allowed"}, keep_alive=keep)
                return keep
            return await self._completion(req, reader, writer, chat=path == "/v1/chat/completions")
        if path == "/tokenize" and req.method == "POST":
            return await self._tokenize(req, writer)
        if path in ("/health", "/ping", "/v1/models", "/version", "/metrics"):
            if req.method not in ("GET", "HEAD"):
                await _send_json(writer, 405, {"detail": "Method Not Allowed"}, keep_alive=keep)
                return keep
            head_only = req.method == "HEAD"
            if path in ("/health", "/ping"):
                await _send_body(writer, 200, b"", "text/plain", keep_alive=keep)
            elif path == "/metrics":
                body = self.metrics_text().encode()
                content_type = "text/plain; version=0.0.4; charset=utf-8"
                await _send_body(
                    writer, 200, body, content_type, keep_alive=keep, head_only=head_only
                )
            else:
                obj = self._models() if path == "/v1/models" else {"version": "standin"}
                await _send_body(
                    writer,
                    200,
                    _dumps(obj).encode(),
                    "application/json",
                    keep_alive=keep,
                    head_only=head_only,
                )
            return keep
        await _send_json(writer, 404, {"detail": "Not Found"}, keep_alive=keep)
        return keep

    async def _tokenize(self, req: _Request, writer: asyncio.StreamWriter) -> bool:
        """vLLM's POST /tokenize, counted the stand-in's way (whitespace-separated words)."""
        try:
            payload = json.loads(req.body or b"{}")
            text = payload["prompt"]
        except (ValueError, KeyError, TypeError):
            await _send_json(writer, 400, {"error": {"message": "expected {\"prompt\": ...}",
                                                     "type": "BadRequestError", "code": 400}},
                             keep_alive=req.keep_alive)
            return req.keep_alive
        count = _count_words(text)
        await _send_json(writer, 200, {"count": count, "max_model_len":
                                       self.config.max_model_len, "tokens": list(range(count))},
                         keep_alive=req.keep_alive)
        return req.keep_alive

    def _models(self) -> dict[str, Any]:
        model = self.config.model
        return {
            "object": "list",
            "data": [
                {
                    "id": model,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vllm",
                    "root": model,
                    "parent": None,
                    "max_model_len": self.config.max_model_len,
                }
            ],
        }

    def metrics_text(self) -> str:
        """Prometheus exposition text with the vLLM series the stand-in can honestly fill."""
        escaped = self.config.model.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        labels = f'engine="0",model_name="{escaped}"'
        out: list[str] = []

        def family(name: str, kind: str, doc: str, samples: list[tuple[str, float]]) -> None:
            out.append(f"# HELP {name} {doc}")
            out.append(f"# TYPE {name} {kind}")
            suffix = "_total" if kind == "counter" else ""
            out.extend(f"{name}{suffix}{{{labels}{extra}}} {float(v)!r}" for extra, v in samples)

        family(
            "vllm:num_requests_running",
            "gauge",
            "Number of requests in model execution batches.",
            [("", self._limiter.running)],
        )
        family(
            "vllm:num_requests_waiting",
            "gauge",
            "Number of requests waiting to be processed.",
            [("", self._limiter.waiting)],
        )
        family(
            "vllm:prompt_tokens",
            "counter",
            "Number of prefill tokens processed.",
            [("", self._prompt_tokens_total)],
        )
        family(
            "vllm:generation_tokens",
            "counter",
            "Number of generation tokens processed.",
            [("", self._generation_tokens_total)],
        )
        family(
            "vllm:request_success",
            "counter",
            "Count of successfully processed requests.",
            [(f',finished_reason="{k}"', v) for k, v in self._finished.items()],
        )
        family(
            "vllm:prefix_cache_queries",
            "counter",
            "Prefix cache queries, in terms of number of queried tokens.",
            [("", 0)],
        )
        family(
            "vllm:prefix_cache_hits",
            "counter",
            "Prefix cache hits, in terms of number of cached tokens.",
            [("", 0)],
        )
        return "\n".join(out) + "\n"

    # -- completions ---------------------------------------------------------------------------

    async def _completion(
        self,
        req: _Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        chat: bool,
    ) -> bool:
        prefix = "chatcmpl" if chat else "cmpl"
        trace = _Trace(f"{prefix}-{uuid.uuid4().hex}", req.path, time.monotonic())
        try:
            return await self._serve(req, reader, writer, chat, trace)
        except OSError:  # ConnectionResetError, BrokenPipeError: the client went away
            trace.client_disconnected = True
            return False
        finally:
            if trace.client_disconnected:
                self._finished["abort"] += 1
            if self._on_record is not None:
                self._on_record(trace.freeze())

    def _decide_fault(self, req: _Request) -> str | None:
        requested = req.headers.get(FAULT_HEADER)
        if requested is not None:
            requested = requested.strip().lower()
            if requested == NO_FAULT:
                return None
            if requested not in FAULT_KINDS:
                raise _ApiError(
                    400,
                    "BadRequestError",
                    f"{FAULT_HEADER}: unknown fault {requested!r}; "
                    f"allowed: {NO_FAULT}, {', '.join(FAULT_KINDS)}",
                )
            return requested
        kind = self.config.fault_kind
        if kind is None:
            return None
        return kind if self._fault_rng.random() < self.config.fault_rate else None

    def _parse(self, req: _Request, chat: bool) -> _Params:
        try:
            body = json.loads(req.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _ApiError(400, "BadRequestError", f"Invalid JSON body: {exc}") from None
        if not isinstance(body, dict):
            raise _ApiError(400, "BadRequestError", "The request body must be a JSON object.")
        model = body.get("model")
        if model is not None and model != self.config.model:
            raise _ApiError(404, "NotFoundError", f"The model `{model}` does not exist.")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _ApiError(400, "BadRequestError", "messages: a non-empty list is required")
            prompt_tokens = sum(
                _count_words(m.get("content")) for m in messages if isinstance(m, dict)
            )
            what = "messages"
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, str):
                prompt_tokens = _count_words(prompt)
            elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
                prompt_tokens = len(prompt)
            elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt_tokens = _count_words(prompt[0])
            else:
                raise _ApiError(
                    400,
                    "BadRequestError",
                    "prompt: a string, a list of one string or a list of token ids is required",
                )
            what = "prompt"
        max_tokens = body.get("max_completion_tokens") if chat else None
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        if max_tokens is None:
            max_tokens = self.config.default_max_tokens
        if not _is_int(max_tokens) or max_tokens < 1:
            raise _ApiError(
                400, "BadRequestError", f"max_tokens must be at least 1, got {max_tokens}"
            )
        if body.get("n", 1) != 1:
            raise _ApiError(400, "BadRequestError", "the stand-in serves n=1 only")
        if prompt_tokens + max_tokens > self.config.max_model_len:
            raise _ApiError(
                400,
                "BadRequestError",
                f"This model's maximum context length is {self.config.max_model_len} tokens. "
                f"However, you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} "
                f"in the {what}, {max_tokens} in the completion). Please reduce the length of "
                f"the {what} or completion.",
            )
        stream = body.get("stream") is True
        options = body.get("stream_options")
        if options is not None and not stream:
            raise _ApiError(
                400, "BadRequestError", "Stream options can only be defined when `stream=True`."
            )
        include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
        return _Params(prompt_tokens, max_tokens, stream, include_usage)

    def _token_offsets(self, n: int) -> list[float]:
        cfg = self.config
        offsets: list[float] = []
        previous = 0.0
        for i in range(n):
            offset = cfg.ttft_s + i * cfg.itl_s
            if cfg.jitter_s:
                offset += self._jitter_rng.uniform(0.0, cfg.jitter_s)
            previous = max(previous, offset)
            offsets.append(previous)
        return offsets

    def _chunk_ranges(self, n: int) -> list[tuple[int, int]]:
        if n == 0:
            return []
        ranges = [(0, 1)]
        while ranges[-1][1] < n:
            start = ranges[-1][1]
            ranges.append((start, min(start + self.config.tokens_per_chunk, n)))
        return ranges

    async def _serve(
        self,
        req: _Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        chat: bool,
        trace: _Trace,
    ) -> bool:
        keep = req.keep_alive
        try:
            fault = self._decide_fault(req)
            params = self._parse(req, chat)
        except _ApiError as exc:
            trace.status = exc.status
            trace.last_chunk_s = await _send_json(writer, exc.status, exc.body(), keep_alive=keep)
            return keep
        trace.fault = fault
        trace.stream = params.stream
        trace.prompt_tokens = params.prompt_tokens

        if fault in ("http_500", "http_503") or (fault == "sse_error" and not params.stream):
            error = (
                _ApiError(500, "InternalServerError", "standin injected fault http_500")
                if fault == "http_500"
                else _ApiError(503, "Service Unavailable", BUSY_MESSAGE)
            )
            trace.status = error.status
            trace.last_chunk_s = await _send_json(
                writer, error.status, error.body(), keep_alive=keep
            )
            return keep
        if params.stream:  # vLLM sends the headers before the engine produces anything
            trace.status = 200
            await _write(writer, _head(200, _SSE_HEADERS, keep_alive=keep))
        if fault == "sse_error":
            await _write(writer, _sse(_ApiError(503, "Service Unavailable", BUSY_MESSAGE).body()))
            await _write(writer, _sse("[DONE]"))
            trace.last_chunk_s = await _write(writer, _LAST_CHUNK)
            return keep
        if fault == "hang":
            await _wait_for_disconnect(reader)
            trace.client_disconnected = True
            return False

        await self._limiter.acquire()
        try:
            trace.start_s = time.monotonic()
            self._prompt_tokens_total += params.prompt_tokens
            if params.stream:
                return await self._stream(writer, chat, params, fault, trace, keep)
            return await self._whole(writer, chat, params, fault, trace, keep)
        finally:
            self._limiter.release()

    def _texts(self, ranges: list[tuple[int, int]], fault: str | None) -> list[str]:
        words = _XSS_WORDS if fault == "xss" else _WORDS
        return ["".join(words[i % len(words)] for i in range(a, b)) for a, b in ranges]

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        chat: bool,
        params: _Params,
        fault: str | None,
        trace: _Trace,
        keep: bool,
    ) -> bool:
        start = trace.start_s
        assert start is not None
        n = 0 if fault == "no_tokens" else params.max_tokens
        offsets = self._token_offsets(n)
        ranges = self._chunk_ranges(n)
        texts = self._texts(ranges, fault)
        drop_at = params.max_tokens // 2 if fault == "drop_mid_stream" else None
        created = int(time.time())
        base = {
            "id": trace.request_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": self.config.model,
        }
        first_offset = offsets[0] if offsets else self.config.ttft_s
        if chat:
            await _sleep_until(start + min(self.config.role_delay_s, first_offset))
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
            role.update(logprobs=None, finish_reason=None)
            trace.last_chunk_s = await _write(writer, _sse({**base, "choices": [role]}))
        for (a, b), text in zip(ranges, texts, strict=True):
            if drop_at is not None and b > drop_at:
                await _sleep_until(start + offsets[b - 1])
                writer.close()
                self._finished["abort"] += 1
                return False
            await _sleep_until(start + offsets[b - 1])
            finish = "length" if b == n else None
            if chat:
                choice = {"index": 0, "delta": {"content": text}, "logprobs": None}
            else:
                choice = {"index": 0, "text": text, "logprobs": None}
            choice.update(finish_reason=finish, stop_reason=None)
            sent = await _write(writer, _sse({**base, "choices": [choice]}))
            trace.content_chunk_s.append(sent)
            if trace.first_content_s is None:
                trace.first_content_s = sent
            trace.last_chunk_s = sent
            trace.completion_tokens += b - a
            self._generation_tokens_total += b - a
        if n == 0:
            await _sleep_until(start + self.config.ttft_s)
        if params.include_usage:
            usage = {
                "prompt_tokens": params.prompt_tokens,
                "total_tokens": params.prompt_tokens + n,
                "completion_tokens": n,
            }
            await _write(writer, _sse({**base, "choices": [], "usage": usage}))
        await _write(writer, _sse("[DONE]"))
        trace.last_chunk_s = await _write(writer, _LAST_CHUNK)
        self._finished["stop" if n == 0 else "length"] += 1
        return keep

    async def _whole(
        self,
        writer: asyncio.StreamWriter,
        chat: bool,
        params: _Params,
        fault: str | None,
        trace: _Trace,
        keep: bool,
    ) -> bool:
        start = trace.start_s
        assert start is not None
        n = 0 if fault == "no_tokens" else params.max_tokens
        offsets = self._token_offsets(n)
        if fault == "drop_mid_stream":
            await _sleep_until(start + offsets[n // 2])
            writer.close()
            self._finished["abort"] += 1
            return False
        await _sleep_until(start + (offsets[-1] if offsets else self.config.ttft_s))
        text = "".join(self._texts([(0, n)], fault)) if n else ""
        finish = "length" if n else "stop"
        usage = {
            "prompt_tokens": params.prompt_tokens,
            "total_tokens": params.prompt_tokens + n,
            "completion_tokens": n,
            "prompt_tokens_details": None,
        }
        if chat:
            message = {"role": "assistant", "content": text, "tool_calls": []}
            choice = {"index": 0, "message": message, "logprobs": None}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
            kind = "text_completion"
        choice.update(finish_reason=finish, stop_reason=None)
        body = {
            "id": trace.request_id,
            "object": kind,
            "created": int(time.time()),
            "model": self.config.model,
            "choices": [choice],
            "usage": usage,
        }
        trace.status = 200
        sent = await _send_json(writer, 200, body, keep_alive=keep)
        trace.first_content_s = trace.last_chunk_s = sent
        if n:
            trace.content_chunk_s.append(sent)
        trace.completion_tokens = n
        self._generation_tokens_total += n
        self._finished["length" if n else "stop"] += 1
        return keep


# ---------------------------------------------------------------------------------------------
# threaded wrapper for tests


class StandinServer:
    """The stand-in on 127.0.0.1 (a free port) in a background thread with its own event loop.

    ``with StandinServer(config) as server: ... server.url ... server.records``
    """

    def __init__(self, config: StandinConfig | None = None) -> None:
        self.config = config or StandinConfig()
        self._records: list[RequestRecord] = []
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("the stand-in is not running; call start() first")
        return self._url

    @property
    def records(self) -> list[RequestRecord]:
        """A snapshot of the completion requests finished so far, in finishing order."""
        with self._cond:
            return list(self._records)

    def wait_for_records(self, count: int, timeout_s: float = 5.0) -> list[RequestRecord]:
        """Block until at least `count` requests have finished; TimeoutError otherwise."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._records) >= count, timeout_s):
                raise TimeoutError(
                    f"{len(self._records)} of {count} stand-in requests finished in {timeout_s}s"
                )
            return list(self._records)

    def _add_record(self, record: RequestRecord) -> None:
        with self._cond:
            self._records.append(record)
            self._cond.notify_all()

    def start(self, timeout_s: float = 10.0) -> str:
        if self._thread is not None:
            raise RuntimeError("the stand-in was already started")
        ready = threading.Event()

        def run() -> None:
            try:
                asyncio.run(self._main(ready))
            except BaseException as exc:  # handed to start()/stop() in the calling thread
                self._error = exc
                ready.set()

        self._thread = threading.Thread(target=run, name="standin", daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s) or self._error is not None:
            error = self._error
            with contextlib.suppress(RuntimeError):
                self.stop()
            raise RuntimeError("the stand-in did not start") from error
        return self.url

    async def _main(self, ready: threading.Event) -> None:
        app = StandinApp(self.config, on_record=self._add_record)
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        port = await app.start(0)
        self._url = f"http://{HOST}:{port}"
        ready.set()
        try:
            await self._stop.wait()
        finally:
            await app.aclose()

    def stop(self, timeout_s: float = 10.0) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                self._loop.call_soon_threadsafe(self._stop.set)
        thread.join(timeout_s)
        if thread.is_alive():
            raise RuntimeError(f"the stand-in did not stop within {timeout_s}s")
        if self._error is not None:
            raise RuntimeError("the stand-in failed") from self._error

    def __enter__(self) -> StandinServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


@contextlib.contextmanager
def running_standin(config: StandinConfig | None = None) -> Iterator[str]:
    """Run the stand-in in a background thread; yields its base URL ``http://127.0.0.1:PORT``."""
    with StandinServer(config) as server:
        yield server.url


# ---------------------------------------------------------------------------------------------
# CLI


def build_parser() -> argparse.ArgumentParser:
    d = StandinConfig()
    p = argparse.ArgumentParser(
        prog="python -m servers.standin",
        description="Known-timing stand-in for vLLM's OpenAI server (a test instrument). "
        f"Listens on {HOST} only; prints '{READY_PREFIX}URL' when ready; stops on SIGTERM/SIGINT.",
    )
    p.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one (default)")
    p.add_argument("--model", default=d.model, help=f"served model name (default {d.model})")
    p.add_argument("--max-model-len", type=int, default=d.max_model_len)
    p.add_argument("--ttft", type=float, default=d.ttft_s, help="seconds to first content chunk")
    p.add_argument("--itl", type=float, default=d.itl_s, help="seconds between tokens")
    p.add_argument(
        "--role-delay", type=float, default=d.role_delay_s, help="seconds to the chat role chunk"
    )
    p.add_argument("--jitter", type=float, default=d.jitter_s, help="uniform [0, J] s per token")
    p.add_argument(
        "--max-concurrency", type=int, default=0, help="requests served at once; 0: unlimited"
    )
    p.add_argument("--tokens-per-chunk", type=int, default=d.tokens_per_chunk)
    p.add_argument("--default-max-tokens", type=int, default=d.default_max_tokens)
    p.add_argument("--fault", choices=FAULT_KINDS, default=None, help="inject this fault")
    p.add_argument(
        "--fault-rate", type=float, default=d.fault_rate, help="share of requests with --fault"
    )
    p.add_argument("--seed", type=int, default=d.seed, help="seed for faults and jitter")
    return p


def config_from_args(args: argparse.Namespace) -> StandinConfig:
    return StandinConfig(
        model=args.model,
        max_model_len=args.max_model_len,
        ttft_s=args.ttft,
        itl_s=args.itl,
        role_delay_s=args.role_delay,
        jitter_s=args.jitter,
        max_concurrency=args.max_concurrency or None,
        tokens_per_chunk=args.tokens_per_chunk,
        default_max_tokens=args.default_max_tokens,
        fault_kind=args.fault,
        fault_rate=args.fault_rate,
        seed=args.seed,
    )


async def _serve_forever(config: StandinConfig, port: int) -> int:
    app = StandinApp(config)
    try:
        bound = await app.start(port)
    except OSError as exc:
        print(f"standin: error: cannot listen on {HOST}:{port}: {exc}", file=sys.stderr)
        return 1
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"{READY_PREFIX}http://{HOST}:{bound}", flush=True)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await app.aclose()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.print_usage(sys.stderr)
        print(f"standin: error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_serve_forever(config, args.port))


if __name__ == "__main__":
    sys.exit(main())
