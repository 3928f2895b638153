"""One streamed OpenAI-compatible request, measured: build the body, send it through the
socket-timestamping client, and turn the timestamped SSE events into a `RequestOutcome`.

Definitions (docs/measurement.md): TTFT is the arrival of the first chunk that
carries non-empty output of any kind, reasoning (`delta.reasoning` / `delta.reasoning_content`)
or answer (`delta.content`, `text`); the empty role chunk never counts. Chunk offsets are the
arrivals of those token chunks; the first answer chunk is kept apart (`first_answer_perf_s`).
A request's token count comes from the final usage chunk; the tokens each chunk carried from
per-chunk usage (`continuous_usage_stats`): the rise of `completion_tokens` since the previous
token chunk (tokens on chunks that carry no output, such as a swallowed `</think>`, count with
the next token chunk). A server that sends no per-chunk usage leaves them unknown (None),
never guessed. A 200 with an `error` event, a malformed payload (not JSON, not UTF-8), or no
output at all, is a failed request; reasoning without an answer is not (see
`RequestOutcome.first_answer_perf_s`).

Every value read from a reply is checked where it is read (issue 40): a field of the wrong type
or range (`finish_reason: 7`, `completion_tokens: "16"`, `-5`, `2^40`, `NaN`, a per-chunk count
that falls, `"usage": [1, 2]`, `"delta": "hello"`) makes the request a failed `bad_response`
row naming the field and the value; the outcome handed on holds only values its row columns
can store, so one odd reply can never stop the sample writer.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from vllm_slo.transport.http_stream import HttpStreamClient, StreamedResponse

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
MAX_COUNT = 2**31 - 1  # token counts land in int32 columns; anything above is no real count
MAX_FINISH_REASON_CHARS = 100  # vLLM's are words (stop, length, abort, tool_calls)
MAX_ERROR_CHARS = 1000  # a row's error text quotes at most this much of the server's words


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
    status: str = "ok"  # one of run_folder.samples_format.REQUEST_STATUSES
    retry_after_s: float | None = None  # an HTTP error's Retry-After, in seconds from its end
    # tokens each chunk of content_chunk_perf_s carried (per-chunk usage); None: not sent
    chunk_tokens: tuple[int, ...] | None = None
    # the first chunk with answer content (None: no answer, e.g. reasoning cut by max_tokens)
    first_answer_perf_s: float | None = None
    reasoning_chunks: int = 0  # chunks that carried reasoning and no answer content
    reasoning_tokens: int | None = None  # the server's count, else the reasoning chunks' sum


def retry_after_seconds(value: str | None, now_unix_s: float) -> float | None:
    """Pure: a Retry-After header (delay-seconds or an HTTP-date, RFC 9110 §10.2.3) as seconds
    from `now_unix_s`, at least 0; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT
        return None
    return max(0.0, when.timestamp() - now_unix_s)


STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}


def request_body(endpoint: str, model: str, prompt: str | list[dict[str, str]],
                 max_tokens: int, ignore_eos: bool, temperature: float,
                 reasoning: bool = False, extra_body: Mapping[str, Any] | None = None
                 ) -> bytes:
    """The streamed request: usage on every chunk (`continuous_usage_stats`, vLLM's and the
    stand-in's: the tokens each chunk carried) and at the end. `reasoning`: ask a reasoning
    model to think (`chat_template_kwargs.enable_thinking`, the Qwen3 / DeepSeek templates'
    switch). `extra_body`: more top-level fields, as the OpenAI client's `extra_body` (vLLM's
    sampling extensions: `logit_bias`, `top_k`, `chat_template_kwargs` ...), merged last."""
    body: dict[str, object] = {
        "model": model, "stream": True, "stream_options": dict(STREAM_OPTIONS),
        "max_tokens": max_tokens, "temperature": temperature,
    }
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM extension: exact output lengths
    if endpoint == "chat":
        body["messages"] = prompt
        if reasoning:
            body["chat_template_kwargs"] = {"enable_thinking": True}
    else:
        body["prompt"] = prompt
    body.update(extra_body or {})
    return json.dumps(body, separators=(",", ":")).encode()


def _error_text(payload: object) -> str:
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            text = f"{error.get('code', '')} {error.get('type', '')}: {error.get('message', '')}"
        else:
            text = str(error)
    else:
        text = str(payload)
    return _clip(text)


def _clip(text: str) -> str:
    """A server's words for a row's error text: at most MAX_ERROR_CHARS, valid Unicode (a
    lone surrogate, JSON "\\ud800", written as its escape)."""
    text = text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…"
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode()
    return text


class _BadValue(ValueError):
    """A field of a reply with the wrong type or range (the message names field and value)."""


def _show(value: object) -> str:
    """A reply's value as the reply wrote it (JSON), at most 60 characters."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _count(name: str, value: object) -> int | None:
    """A token count as read from `usage`: None (absent) or an int in 0..MAX_COUNT."""
    if value is None:
        return None
    if type(value) is not int:  # bool, float (NaN too), str, list, ... are no count
        raise _BadValue(f"{name} is {_show(value)}, not an integer")
    if not 0 <= value <= MAX_COUNT:
        raise _BadValue(f"{name} is {value}, not a count in 0..{MAX_COUNT}")
    return value


def _text(name: str, value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise _BadValue(f"{name} is {_show(value)}, not a string")


def _object(name: str, value: object) -> dict[str, Any]:
    """An optional JSON object of a reply ({} when absent or null)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _BadValue(f"{name} is {_show(value)}, not an object")
    return value


_REASONING_KEYS = (b'"reasoning":"', b'"reasoning_content":"')  # vLLM 0.32 sends the first
_USAGE_TOKENS = b'"completion_tokens":'


def _nonempty_string_at(payload: bytes, key: bytes) -> bool:
    at = payload.find(key) + len(key)
    return len(key) < at < len(payload) and payload[at] != 34  # 34: '"': an empty string


def _usage_tokens(payload: bytes) -> int | None:
    """`usage.completion_tokens` of a well-formed vLLM chunk, read without parsing (None: not
    an integer there). Bare `"` never occurs inside a JSON string, so the key is the key."""
    usage = payload.find(b'"usage":{')
    if usage < 0:
        return None
    at = payload.find(_USAGE_TOKENS, usage)
    if at < 0:
        return None
    start = at + len(_USAGE_TOKENS)
    end = start
    while end < len(payload) and 48 <= payload[end] <= 57:  # digits
        end += 1
    # a count is digits then `,` or `}`: `16.5`, `1e3`, 20 digits ... take the checked path
    if end == start or end - start > 10 or payload[end : end + 1] not in (b",", b"}"):
        return None
    return int(payload[start:end])


class OutcomeBuilder:
    """Classifies each SSE payload as it arrives (right after its arrival was stamped), so the
    work is spread over the stream instead of landing in one burst at its end — a burst that,
    when many streams end together (closed loop), delayed every other stream's reads by
    milliseconds. Pure: no I/O, and never raises on what a server sent.

    vLLM's token chunks all look alike; one that carries content (or, chat, reasoning), has
    `finish_reason: null`, no error, is well-formed UTF-8, opens with `{` and ends as vLLM's
    do (`}]}`, the choices list closing; or, with per-chunk usage, `}}` with balanced braces
    and a plain integer `completion_tokens` no lower than the last one: a payload cut short
    ends otherwise) takes the fast path (a few byte searches, no JSON parsing). Everything
    else — the role chunk, the last token chunk, the usage chunk, error events, anything
    unusual — is parsed with `json` and every field read is checked (`_read_chunk`).
    """

    __slots__ = ("_content_key", "_endpoint", "_tokens_high", "_tokens_seen", "chunk_times",
                 "chunk_tokens", "done", "error", "error_status", "fast_events",
                 "finish_reason", "first_answer_s", "output_tokens", "prompt_tokens",
                 "reasoning_chunks", "reasoning_reported", "reasoning_sum", "tokens_known")

    def __init__(self, endpoint: str) -> None:
        self._endpoint = endpoint
        self._content_key = b'"content":"' if endpoint == "chat" else b'"text":"'
        self.chunk_times: list[float] = []
        self.chunk_tokens: list[int] = []
        self.tokens_known = True  # every token chunk so far carried usage
        self._tokens_seen = 0  # completion_tokens at the previous token chunk
        self._tokens_high = 0  # the highest completion_tokens of any usage so far
        self.first_answer_s: float | None = None
        self.reasoning_chunks = 0
        self.reasoning_sum = 0
        # the last non-empty usage's counts (checked: None or 0..MAX_COUNT)
        self.output_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.reasoning_reported: int | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.error_status = "ok"
        self.done = False
        self.fast_events = 0

    def _fail(self, error: str, status: str) -> None:
        """The request failed; the first reason found is the one its row names."""
        if self.error is None:
            self.error, self.error_status = error, status

    def _token_chunk(self, arrived_at_s: float, answer: bool, completion_tokens: int | None
                     ) -> None:
        self.chunk_times.append(arrived_at_s)
        if completion_tokens is not None:
            carried = completion_tokens - self._tokens_seen
            self._tokens_seen = self._tokens_high = completion_tokens
        else:
            carried, self.tokens_known = 0, False
        self.chunk_tokens.append(carried)
        if answer:
            if self.first_answer_s is None:
                self.first_answer_s = arrived_at_s
        else:
            self.reasoning_chunks += 1
            self.reasoning_sum += carried

    def event(self, arrived_at_s: float, payload: bytes) -> None:
        answer = _nonempty_string_at(payload, self._content_key)
        thought = not answer and self._endpoint == "chat" and (
            _nonempty_string_at(payload, _REASONING_KEYS[0])
            or _nonempty_string_at(payload, _REASONING_KEYS[1]))
        if ((answer or thought) and payload[0] == 123  # '{'
                and b'"finish_reason":null' in payload and b'"error"' not in payload):
            if payload[-3:] == b"}]}" and b'"usage"' not in payload and _is_utf8(payload):
                self._token_chunk(arrived_at_s, answer, None)
                self.fast_events += 1
                return
            if payload[-2:] == b"}}" and payload.count(b"{") == payload.count(b"}"):
                tokens = _usage_tokens(payload)
                if (tokens is not None and self._tokens_high <= tokens <= MAX_COUNT
                        and _is_utf8(payload)):
                    self._token_chunk(arrived_at_s, answer, tokens)
                    self.fast_events += 1
                    return
        try:
            self._parse(arrived_at_s, payload)
        except Exception as exc:  # whatever a reply does ends in its own row
            self._fail(f"bad_response: unreadable event ({type(exc).__name__}: {exc}): "
                       f"{payload[:200]!r}", "bad_response")

    def _parse(self, arrived_at_s: float, payload: bytes) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            parsed = json.loads(payload)
        except (ValueError, RecursionError):  # bad JSON, bytes that are not UTF-8, too deep
            self._fail(f"malformed SSE payload: {payload[:200]!r}", "malformed_stream")
            return
        if not isinstance(parsed, dict):
            self._fail(f"malformed SSE payload: {payload[:200]!r}", "malformed_stream")
            return
        if "error" in parsed:
            self._fail(f"error event: {_error_text(parsed)}", "stream_error")
            return
        try:
            self._read_chunk(arrived_at_s, parsed)
        except _BadValue as exc:
            self._fail(f"bad_response: {exc}", "bad_response")

    def _read_chunk(self, arrived_at_s: float, parsed: dict[str, Any]) -> None:
        """One parsed chunk: every field read is checked before anything is kept."""
        usage = _object("usage", parsed.get("usage"))
        completion_tokens = _count("completion_tokens", usage.get("completion_tokens"))
        if completion_tokens is not None and completion_tokens < self._tokens_high:
            raise _BadValue(f"completion_tokens fell from {self._tokens_high} to "
                            f"{completion_tokens} between chunks")
        choices = parsed.get("choices")
        if choices is not None and not isinstance(choices, list):
            raise _BadValue(f"choices is {_show(choices)}, not a list")
        read: list[tuple[str | None, str | None, str | None]] = []
        for choice in choices or ():
            if not isinstance(choice, dict):
                raise _BadValue(f"a choice is {_show(choice)}, not an object")
            if self._endpoint == "chat":
                delta = _object("delta", choice.get("delta"))
                piece = _text("content", delta.get("content"))
                thought = (_text("reasoning", delta.get("reasoning"))
                           or _text("reasoning_content", delta.get("reasoning_content")))
            else:
                piece, thought = _text("text", choice.get("text")), None
            finish = _text("finish_reason", choice.get("finish_reason"))
            if finish is not None and (len(finish) > MAX_FINISH_REASON_CHARS
                                       or not _is_unicode(finish)):
                raise _BadValue(f"finish_reason is {_show(finish)}: not a word of at most "
                                f"{MAX_FINISH_REASON_CHARS} valid characters")
            read.append((piece, thought, finish))
        if usage:
            prompt_tokens = _count("prompt_tokens", usage.get("prompt_tokens"))
            details = _object("completion_tokens_details",
                              usage.get("completion_tokens_details"))
            reasoning = _count("completion_tokens_details.reasoning_tokens",
                               details.get("reasoning_tokens"))
            self.output_tokens, self.prompt_tokens = completion_tokens, prompt_tokens
            self.reasoning_reported = reasoning
            if completion_tokens is not None:
                self._tokens_high = completion_tokens
        for piece, thought, finish in read:
            if piece or thought:
                self._token_chunk(arrived_at_s, bool(piece), completion_tokens)
            if finish:
                self.finish_reason = finish

    def per_chunk_tokens(self) -> tuple[int, ...] | None:
        """The tokens each token chunk carried, when every one of them came with usage."""
        return tuple(self.chunk_tokens) if self.tokens_known and self.chunk_times else None

    def reasoning_tokens(self) -> int | None:
        """The server's reasoning count (`usage.completion_tokens_details.reasoning_tokens`,
        vLLM with a reasoning parser), else the reasoning chunks' per-chunk sum; None when
        neither is known, 0 for a request without reasoning."""
        if self.reasoning_reported is not None:
            return self.reasoning_reported
        if not self.reasoning_chunks:
            return 0
        return self.reasoning_sum if self.tokens_known else None

    def outcome(self, response: StreamedResponse, send_perf_s: float) -> RequestOutcome:
        end = response.ended_at_s if response.ended_at_s is not None else send_perf_s
        if response.transport_error and not self.chunk_times and not self.done:
            return RequestOutcome(send_perf_s, response.status, False,
                                  _clip(response.transport_error), (), end, None, None, None,
                                  _transport_status(response.transport_error))
        if response.status != 200:
            body = response.body.decode("utf-8", "replace")
            try:
                detail = _error_text(json.loads(body))
            except (ValueError, RecursionError):
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
                                  f"HTTP 200 without an SSE stream ({kind[:100]}): "
                                  f"{response.body[:200]!r}", (), end, None, None, None,
                                  "malformed_stream")
        error, status = self.error, self.error_status
        if error is None and response.transport_error:
            error = _clip(response.transport_error)
            status = _transport_status(response.transport_error)
        if error is None and not self.done:
            error, status = "stream ended without [DONE]", "incomplete_stream"
        if error is None and not self.chunk_times:
            error, status = "HTTP 200 but no content tokens", "no_tokens"
        return RequestOutcome(
            send_perf_s, response.status, error is None, error, tuple(self.chunk_times), end,
            self.output_tokens, self.prompt_tokens,
            self.finish_reason, status if error is not None else "ok",
            chunk_tokens=self.per_chunk_tokens(), first_answer_perf_s=self.first_answer_s,
            reasoning_chunks=self.reasoning_chunks, reasoning_tokens=self.reasoning_tokens())


def _transport_status(error: str) -> str:
    """A request cut by its watchdog or a socket timeout timed out; a response over the
    client's size limit is a bad response; anything else in transport (refused, reset, closed
    early) is a transport error."""
    if error.startswith(("TimeoutError", "timeout")):
        return "timeout"
    if error.startswith("ResponseTooLarge"):
        return "bad_response"
    return "transport_error"


def _is_unicode(text: str) -> bool:
    """No lone surrogate (JSON allows "\\ud800"; UTF-8, and so the row's column, does not)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


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
                time.perf_counter(), None, None, None, "cancelled",
                chunk_tokens=builder.per_chunk_tokens(),
                first_answer_perf_s=builder.first_answer_s,
                reasoning_chunks=builder.reasoning_chunks))
        raise
    return builder.outcome(response, send_perf_s)
