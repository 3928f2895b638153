"""Minimal HTTP/1.1 on asyncio streams: reading one request (Content-Length or chunked body,
``Expect: 100-continue``, keep-alive) and writing responses, each piece as its own TCP write
whose send time is returned (the stand-in records when every byte went out)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Sequence
from email.utils import formatdate
from typing import Any

HEAD_LIMIT = 1 << 20  # the StreamReader limit: longest request head (and chunk-size line)
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
LAST_CHUNK = b"0\r\n\r\n"  # ends a chunked body


class HttpError(Exception):
    """A request that cannot be read; answered with `status` and the connection closed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclasses.dataclass
class Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]  # names lower-case; repeated headers joined with ", "
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


async def read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> Request | None:
    """One request, or None on a clean EOF between requests."""
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial.strip():
                return None
            raise HttpError(400, "incomplete request head") from None
        except asyncio.LimitOverrunError:
            raise HttpError(431, "request head too large") from None
        head = head.lstrip(b"\r\n")
        if head:
            break
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(400, f"bad request line {lines[0]!r}")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise HttpError(400, f"bad header line {line!r}")
        key = name.lower()
        headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()

    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    transfer_encoding = headers.get("transfer-encoding", "").lower()
    if transfer_encoding:
        if transfer_encoding != "chunked":
            raise HttpError(501, f"unsupported transfer-encoding {transfer_encoding!r}")
        body = await _read_chunked_body(reader)
    else:
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            raise HttpError(400, "bad content-length") from None
        if length < 0:
            raise HttpError(400, "bad content-length")
        if length > _MAX_BODY:
            raise HttpError(413, "request body too large")
        body = await reader.readexactly(length) if length else b""
    return Request(method, target, version, headers, body)


async def _read_chunked_body(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        line = await reader.readuntil(b"\r\n")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise HttpError(400, "bad chunk size") from None
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
                pass
            return bytes(body)
        if len(body) + size > _MAX_BODY:
            raise HttpError(413, "request body too large")
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise HttpError(400, "bad chunk terminator")


async def wait_for_disconnect(reader: asyncio.StreamReader) -> None:
    """Read and drop whatever the client sends until it closes the connection."""
    while await reader.read(65536):
        pass


def head(status: int, headers: Sequence[tuple[str, str]], *, keep_alive: bool) -> bytes:
    """A response's status line and headers (``date`` and ``server`` added)."""
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}",
        f"date: {formatdate(usegmt=True)}",
        "server: vllm-slo-standin",
    ]
    lines += [f"{name}: {value}" for name, value in headers]
    if not keep_alive:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def dumps(obj: Any) -> str:
    """Compact JSON, non-ASCII kept as is (as vLLM writes it)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def http_chunk(payload: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


async def write(writer: asyncio.StreamWriter, data: bytes) -> float:
    """Write and drain one piece as its own TCP write; returns the monotonic send time."""
    sent = time.monotonic()
    writer.write(data)
    await writer.drain()
    return sent


async def send_body(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    content_type: str,
    *,
    keep_alive: bool,
    head_only: bool = False,
    extra_headers: Sequence[tuple[str, str]] = (),
) -> float:
    """A whole response with a Content-Length body, in one write; returns its send time."""
    headers = [("content-type", content_type), ("content-length", str(len(body))),
               *extra_headers]
    return await write(
        writer, head(status, headers, keep_alive=keep_alive) + (b"" if head_only else body)
    )


async def send_json(
    writer: asyncio.StreamWriter, status: int, obj: Any, *, keep_alive: bool,
    extra_headers: Sequence[tuple[str, str]] = (),
) -> float:
    """A whole JSON response in one write; returns its send time."""
    return await send_body(
        writer, status, dumps(obj).encode(), "application/json", keep_alive=keep_alive,
        extra_headers=extra_headers,
    )
