"""One streamed OpenAI-compatible request, measured: build the body, send it through the
socket-timestamping client, and turn the timestamped SSE events into a `RequestOutcome`.

Definitions (README "Measurement definitions"): TTFT is the arrival of the first chunk that
carries non-empty content (the empty role chunk never counts); chunk offsets are content-chunk
arrivals; token counts come from the usage chunk, never from chunks. A 200 with an `error`
event, or with no content at all, is a failed request.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from vllm_slo.servers.http_stream import HttpStreamClient, StreamedResponse

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    send_perf_s: float
    status_code: int
    ok: bool
    error: str | None
    content_chunk_perf_s: tuple[float, ...]  # arrival of each content-bearing chunk
    end_perf_s: float
    text: str
    output_tokens: int | None
    prompt_tokens: int | None
    finish_reason: str | None


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


def interpret(response: StreamedResponse, endpoint: str, send_perf_s: float) -> RequestOutcome:
    """Pure: timestamped events -> outcome (runs after the stream ended, off the hot path)."""
    end = response.ended_at_s if response.ended_at_s is not None else send_perf_s
    if response.transport_error and not response.events:
        return RequestOutcome(send_perf_s, response.status, False, response.transport_error, (),
                              end, "", None, None, None)
    if response.status != 200:
        body = response.body.decode("utf-8", "replace")
        try:
            detail = _error_text(json.loads(body))
        except json.JSONDecodeError:
            detail = body[:500]
        return RequestOutcome(send_perf_s, response.status, False,
                              f"HTTP {response.status}: {detail}".strip(), (), end, "", None,
                              None, None)
    chunk_times: list[float] = []
    pieces: list[str] = []
    usage: dict | None = None
    finish_reason = None
    error = None
    done = False
    for arrived_at_s, data in response.events:
        if data == "[DONE]":
            done = True
            continue
        try:
            payload = json.loads(data)
        except json.JSONDecodeError:
            error = f"malformed SSE payload: {data[:200]!r}"
            continue
        if "error" in payload:
            error = f"error event: {_error_text(payload)}"
            continue
        if payload.get("usage"):
            usage = payload["usage"]
        for choice in payload.get("choices") or ():
            piece = (choice.get("delta") or {}).get("content") if endpoint == "chat" \
                else choice.get("text")
            if piece:
                chunk_times.append(arrived_at_s)
                pieces.append(piece)
            if choice.get("finish_reason"):
                finish_reason = choice["finish_reason"]
    if error is None and response.transport_error:
        error = response.transport_error
    if error is None and not done:
        error = "stream ended without [DONE]"
    if error is None and not chunk_times:
        error = "HTTP 200 but no content tokens"
    return RequestOutcome(
        send_perf_s, response.status, error is None, error, tuple(chunk_times), end,
        "".join(pieces),
        usage.get("completion_tokens") if usage else None,
        usage.get("prompt_tokens") if usage else None,
        finish_reason)


def send_streamed(client: HttpStreamClient, endpoint: str, body: bytes,
                  request_id: str | None = None) -> RequestOutcome:
    send_perf_s = time.perf_counter()
    response = client.request("POST", PATHS[endpoint], body, request_id)
    return interpret(response, endpoint, send_perf_s)
