"""One streamed OpenAI-compatible request, measured: build the body, send it through the
socket-timestamping client, and turn the timestamped SSE events into a `RequestOutcome`.

Definitions (README "Measurement definitions"): TTFT is the arrival of the first chunk that
carries non-empty content (the empty role chunk never counts); chunk offsets are content-chunk
arrivals; token counts come from the usage chunk, never from chunks. A 200 with an `error`
event, a malformed payload (not JSON, not UTF-8), or no content at all, is a failed request.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from vllm_slo.transport.http_stream import HttpStreamClient, StreamedResponse

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    send_perf_s: float
    status_code: int
    ok: bool
    error: str | None
    content_chunk_perf_s: tuple[float, ...]  # arrival of each content-bearing chunk
    end_perf_s: float
    output_tokens: int | None
    prompt_tokens: int | None
    finish_reason: str | None
    status: str = "ok"  # one of scenarios.samples_format.REQUEST_STATUSES
    retry_after_s: float | None = None  # an HTTP error's Retry-After, in seconds from its end


def retry_after_seconds(value: str | None, now_unix_s: float) -> float | None:
    """Pure: a Retry-After header (delay-seconds or an HTTP-date, RFC 9110 §10.2.3) as seconds
    from `now_unix_s`, at least 0; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT
        return None
    return max(0.0, when.timestamp() - now_unix_s)


def request_body(endpoint: str, model: str, prompt: str | list[dict[str, str]],
                 max_tokens: int, ignore_eos: bool, temperature: float) -> bytes:
    body: dict[str, object] = {
        "model": model, "stream": True, "stream_options": {"include_usage": True},
        "max_tokens": max_tokens, "temperature": temperature,
    }
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM extension: exact output lengths
    if endpoint == "chat":
        body["messages"] = prompt
    else:
        body["prompt"] = prompt
    return json.dumps(body, separators=(",", ":")).encode()


def _error_text(payload: object) -> str:
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            return f"{error.get('code', '')} {error.get('type', '')}: {error.get('message', '')}"
        return str(error)
    return str(payload)


class OutcomeBuilder:
    """Classifies each SSE payload as it arrives (right after its arrival was stamped), so the
    work is spread over the stream instead of landing in one burst at its end — a burst that,
    when many streams end together (closed loop), delayed every other stream's reads by
    milliseconds. Pure: no I/O.

    vLLM's token chunks all look alike; one that carries content, has `finish_reason: null`,
    no usage and no error, is well-formed UTF-8, opens with `{` and ends as vLLM's do (`}]}`,
    the choices list closing: a payload cut short ends otherwise) takes the fast path (a few
    byte searches, no JSON parsing). Everything else — the role chunk, the last
    token chunk, the usage chunk, error events, anything unusual — is parsed with `json`.
    """

    __slots__ = ("_content_key", "_endpoint", "chunk_times", "done", "error", "error_status",
                 "fast_events",
                 "finish_reason", "usage")

    def __init__(self, endpoint: str) -> None:
        self._endpoint = endpoint
        self._content_key = b'"content":"' if endpoint == "chat" else b'"text":"'
        self.chunk_times: list[float] = []
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.error_status = "ok"
        self.done = False
        self.fast_events = 0

    def event(self, arrived_at_s: float, payload: bytes) -> None:
        key = self._content_key
        at = payload.find(key)
        if (at > 0 and payload[at + len(key)] != 34  # 34: '"' — an empty string is no content
                and payload[0] == 123 and payload[-3:] == b"}]}"  # '{' ... choices' end
                and b'"finish_reason":null' in payload and b'"usage"' not in payload
                and b'"error"' not in payload and _is_utf8(payload)):
            self.chunk_times.append(arrived_at_s)
            self.fast_events += 1
            return
        self._parse(arrived_at_s, payload)

    def _parse(self, arrived_at_s: float, payload: bytes) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            parsed = json.loads(payload)
        except ValueError:  # bad JSON, or bytes that are not UTF-8
            self.error, self.error_status = f"malformed SSE payload: {payload[:200]!r}", \
                "malformed_stream"
            return
        if not isinstance(parsed, dict):
            self.error, self.error_status = f"malformed SSE payload: {payload[:200]!r}", \
                "malformed_stream"
            return
        if "error" in parsed:
            self.error, self.error_status = f"error event: {_error_text(parsed)}", \
                "stream_error"
            return
        if parsed.get("usage"):
            self.usage = parsed["usage"]
        for choice in parsed.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            piece = ((choice.get("delta") or {}).get("content") if self._endpoint == "chat"
                     else choice.get("text"))
            if piece:
                self.chunk_times.append(arrived_at_s)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]

    def outcome(self, response: StreamedResponse, send_perf_s: float) -> RequestOutcome:
        end = response.ended_at_s if response.ended_at_s is not None else send_perf_s
        if response.transport_error and not self.chunk_times and not self.done:
            return RequestOutcome(send_perf_s, response.status, False, response.transport_error,
                                  (), end, None, None, None,
                                  _transport_status(response.transport_error))
        if response.status != 200:
            body = response.body.decode("utf-8", "replace")
            try:
                detail = _error_text(json.loads(body))
            except json.JSONDecodeError:
                detail = body[:500]
            header = response.headers.get("retry-after")
            wait_s = retry_after_seconds(header, time.time())
            message = f"HTTP {response.status}: {detail}".strip()
            if header is not None:
                message += f" (Retry-After: {header[:40]})"
            return RequestOutcome(send_perf_s, response.status, False, message, (), end, None,
                                  None, None, "http_error", wait_s)
        if not self.chunk_times and not self.done and self.error is None and response.sse_bytes:
            return RequestOutcome(send_perf_s, 200, False,
                                  f"HTTP 200 SSE stream without a single data: event "
                                  f"({response.sse_bytes} bytes)", (), end, None, None, None,
                                  "malformed_stream")
        if not self.chunk_times and not self.done and self.error is None and response.body:
            kind = response.headers.get("content-type", "no content type")
            return RequestOutcome(send_perf_s, 200, False,
                                  f"HTTP 200 without an SSE stream ({kind}): "
                                  f"{response.body[:200]!r}", (), end, None, None, None,
                                  "malformed_stream")
        error, status = self.error, self.error_status
        if error is None and response.transport_error:
            error, status = response.transport_error, _transport_status(response.transport_error)
        if error is None and not self.done:
            error, status = "stream ended without [DONE]", "incomplete_stream"
        if error is None and not self.chunk_times:
            error, status = "HTTP 200 but no content tokens", "no_tokens"
        usage = self.usage
        return RequestOutcome(
            send_perf_s, response.status, error is None, error, tuple(self.chunk_times), end,
            usage.get("completion_tokens") if usage else None,
            usage.get("prompt_tokens") if usage else None,
            self.finish_reason, status if error is not None else "ok")


def _transport_status(error: str) -> str:
    """A request cut by its watchdog or a socket timeout timed out; anything else in transport
    (refused, reset, closed early) is a transport error."""
    return "timeout" if error.startswith(("TimeoutError", "timeout")) else "transport_error"


def _is_utf8(payload: bytes) -> bool:
    try:
        payload.decode()
    except UnicodeDecodeError:
        return False
    return True


def interpret(response: StreamedResponse, endpoint: str, send_perf_s: float) -> RequestOutcome:
    """Pure: a response whose SSE events were collected (`response.events`) -> outcome."""
    builder = OutcomeBuilder(endpoint)
    for arrived_at_s, payload in response.events:
        builder.event(arrived_at_s, payload)
    return builder.outcome(response, send_perf_s)


def send_streamed(client: HttpStreamClient, endpoint: str, body: bytes,
                  request_id: str | None = None,
                  on_cancel: Callable[[RequestOutcome], None] | None = None) -> RequestOutcome:
    """Send and measure one request. Should the request be cancelled while in flight (the
    caller's greenlet killed: Locust stopping its users), `on_cancel` gets its outcome so far
    (status `cancelled`, the chunks seen) before the cancellation goes on."""
    builder = OutcomeBuilder(endpoint)
    send_perf_s = time.perf_counter()
    try:
        response = client.request("POST", PATHS[endpoint], body, request_id, builder.event)
    except BaseException as exc:
        client.close()
        if on_cancel is not None:
            on_cancel(RequestOutcome(
                send_perf_s, 0, False, f"cancelled ({type(exc).__name__}): the run stopped "
                "while the request was in flight", tuple(builder.chunk_times),
                time.perf_counter(), None, None, None, "cancelled"))
        raise
    return builder.outcome(response, send_perf_s)
