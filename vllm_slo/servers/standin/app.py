"""The asyncio server: connections, routing, and each completion request's way from receipt
through the fault decision and validation to the engine (or to a fault's answer instead)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from vllm_slo.servers.standin import prometheus
from vllm_slo.servers.standin.config import HOST, RequestRecord, StandinConfig, Trace
from vllm_slo.servers.standin.engine import Engine
from vllm_slo.servers.standin.faults import BUSY_MESSAGE, FaultPicker, UnknownFaultError
from vllm_slo.servers.standin.http import (
    HEAD_LIMIT,
    LAST_CHUNK,
    HttpError,
    Request,
    dumps,
    head,
    read_request,
    send_body,
    send_json,
    wait_for_disconnect,
    write,
)
from vllm_slo.servers.standin.openai import (
    SSE_HEADERS,
    ApiError,
    models_list,
    parse_completion,
    sse,
    tokenize,
)


class StandinApp:
    """The asyncio server. One per event loop; see server.StandinServer for a threaded wrapper.

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
        self._engine = Engine(self.config)
        self._faults = FaultPicker(self.config.fault_kind, self.config.fault_rate, self.config.seed)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self, port: int = 0, reuse_port: bool = False) -> int:
        """Listen on 127.0.0.1:port (0: any free port); returns the bound port. With
        `reuse_port`, several stand-in processes share one port (SO_REUSEPORT: the kernel
        spreads connections over them), for more streams than one event loop can write."""
        self._server = await asyncio.start_server(
            self._handle_connection, host=HOST, port=port, limit=HEAD_LIMIT,
            reuse_port=reuse_port or None,
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

    def metrics_text(self) -> str:
        """Prometheus exposition text with the vLLM series the stand-in can honestly fill."""
        return prometheus.metrics_text(self._engine)

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
                    request = await read_request(reader, writer)
                except HttpError as exc:
                    await send_json(writer, exc.status, {"detail": exc.message}, keep_alive=False)
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
        self, req: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        keep = req.keep_alive
        path = req.path
        if path in ("/v1/chat/completions", "/v1/completions"):
            if req.method != "POST":
                await send_json(writer, 405, {"detail": "Method Not Allowed"}, keep_alive=keep)
                return keep
            return await self._completion(req, reader, writer, chat=path == "/v1/chat/completions")
        if path == "/tokenize" and req.method == "POST":
            return await tokenize(req, writer, self.config)
        if path in ("/health", "/ping", "/v1/models", "/version", "/metrics"):
            if req.method not in ("GET", "HEAD"):
                await send_json(writer, 405, {"detail": "Method Not Allowed"}, keep_alive=keep)
                return keep
            head_only = req.method == "HEAD"
            if path in ("/health", "/ping"):
                await send_body(writer, 200, b"", "text/plain", keep_alive=keep)
            elif path == "/metrics":
                body = self.metrics_text().encode()
                content_type = "text/plain; version=0.0.4; charset=utf-8"
                await send_body(
                    writer, 200, body, content_type, keep_alive=keep, head_only=head_only
                )
            else:
                obj = models_list(self.config) if path == "/v1/models" else {"version": "standin"}
                await send_body(
                    writer,
                    200,
                    dumps(obj).encode(),
                    "application/json",
                    keep_alive=keep,
                    head_only=head_only,
                )
            return keep
        await send_json(writer, 404, {"detail": "Not Found"}, keep_alive=keep)
        return keep

    # -- completions ---------------------------------------------------------------------------

    async def _completion(
        self,
        req: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        chat: bool,
    ) -> bool:
        prefix = "chatcmpl" if chat else "cmpl"
        # as vLLM: the client's X-Request-Id, when sent, becomes the request's id
        base_id = req.headers.get("x-request-id") or uuid.uuid4().hex
        trace = Trace(f"{prefix}-{base_id}", req.path, time.monotonic())
        try:
            return await self._serve(req, reader, writer, chat, trace)
        except OSError:  # ConnectionResetError, BrokenPipeError: the client went away
            trace.client_disconnected = True
            return False
        finally:
            if trace.client_disconnected:
                self._engine.counters.finished["abort"] += 1
            if self._on_record is not None:
                self._on_record(trace.freeze())

    def _decide_fault(self, req: Request) -> str | None:
        try:
            return self._faults.decide(req.headers)
        except UnknownFaultError as exc:
            raise ApiError(400, "BadRequestError", str(exc)) from None

    async def _serve(
        self,
        req: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        chat: bool,
        trace: Trace,
    ) -> bool:
        keep = req.keep_alive
        try:
            fault = self._decide_fault(req)
            params = parse_completion(req, chat, self.config)
        except ApiError as exc:
            trace.status = exc.status
            trace.last_chunk_s = await send_json(writer, exc.status, exc.body(), keep_alive=keep)
            return keep
        trace.fault = fault
        trace.stream = params.stream
        trace.prompt_tokens = params.prompt_tokens

        if fault in ("http_500", "http_503", "http_429") or (
                fault == "sse_error" and not params.stream):
            error = {
                "http_500": ApiError(500, "InternalServerError", "standin injected fault http_500"),
                "http_429": ApiError(429, "TooManyRequests", "standin injected fault http_429"),
            }.get(fault or "", ApiError(503, "Service Unavailable", BUSY_MESSAGE))
            trace.status = error.status
            trace.last_chunk_s = await send_json(
                writer, error.status, error.body(), keep_alive=keep,
                extra_headers=[("retry-after", self.config.retry_after)]
                if fault in ("http_429", "http_503") and self.config.retry_after else (),
            )
            return keep
        if fault == "not_sse" and params.stream:  # a whole JSON answer where SSE was asked for
            trace.status = 200
            body = {"id": trace.request_id, "object": "text_completion", "choices": [
                {"index": 0, "text": "not a stream", "finish_reason": "length"}]}
            trace.last_chunk_s = await send_json(writer, 200, body, keep_alive=keep)
            return keep
        if params.stream:  # vLLM sends the headers before the engine produces anything
            trace.status = 200
            await write(writer, head(200, SSE_HEADERS, keep_alive=keep))
        if fault == "sse_error":
            await write(writer, sse(ApiError(503, "Service Unavailable", BUSY_MESSAGE).body()))
            await write(writer, sse("[DONE]"))
            trace.last_chunk_s = await write(writer, LAST_CHUNK)
            return keep
        if fault == "hang":
            await wait_for_disconnect(reader)
            trace.client_disconnected = True
            return False
        return await self._engine.generate(writer, chat, params, fault, trace, keep)
