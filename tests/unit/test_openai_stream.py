"""Turning timestamped SSE events into a request outcome: the definitions of TTFT, failures."""

from __future__ import annotations

import json

from vllm_slo.loadtests.openai_stream import interpret, request_body
from vllm_slo.servers.http_stream import StreamedResponse


def chat_chunk(content: str | None = None, role: str | None = None,
               finish: str | None = None) -> str:
    delta = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


USAGE = json.dumps({"choices": [], "usage": {"prompt_tokens": 17, "completion_tokens": 3,
                                             "total_tokens": 20}})


def response(events: list[tuple[float, str]], status: int = 200) -> StreamedResponse:
    return StreamedResponse(status=status, events=events, ended_at_s=events[-1][0] + 0.001)


def test_role_chunk_never_counts_as_first_token() -> None:
    events = [(10.0, chat_chunk("", role="assistant")), (10.5, chat_chunk("a")),
              (10.6, chat_chunk("b")), (10.7, chat_chunk("c", finish="length")),
              (10.7, USAGE), (10.7, "[DONE]")]
    outcome = interpret(response(events), "chat", send_perf_s=9.9)
    assert outcome.ok
    assert outcome.content_chunk_perf_s == (10.5, 10.6, 10.7)
    assert outcome.output_tokens == 3
    assert outcome.prompt_tokens == 17
    assert outcome.text == "abc"
    assert outcome.finish_reason == "length"


def test_sse_error_event_with_status_200_is_a_failure() -> None:
    error = json.dumps({"error": {"message": "The engine is currently busy", "type":
                                  "Service Unavailable", "code": 503}})
    outcome = interpret(response([(1.0, error), (1.0, "[DONE]")]), "chat", 0.9)
    assert not outcome.ok
    assert outcome.status_code == 200
    assert "503" in outcome.error and "busy" in outcome.error


def test_200_without_tokens_is_a_failure() -> None:
    events = [(1.0, chat_chunk("", role="assistant")), (1.1, USAGE), (1.1, "[DONE]")]
    outcome = interpret(response(events), "chat", 0.9)
    assert not outcome.ok
    assert outcome.error == "HTTP 200 but no content tokens"


def test_missing_done_is_a_failure() -> None:
    events = [(1.0, chat_chunk("x")), (1.1, USAGE)]
    outcome = interpret(response(events), "chat", 0.9)
    assert not outcome.ok
    assert "[DONE]" in outcome.error


def test_http_error_keeps_the_server_message() -> None:
    body = json.dumps({"error": {"message": "maximum context length is 2048 tokens",
                                 "type": "BadRequestError", "code": 400}}).encode()
    outcome = interpret(StreamedResponse(status=400, body=body, ended_at_s=2.0), "chat", 1.0)
    assert not outcome.ok
    assert outcome.error.startswith("HTTP 400:")
    assert "maximum context length" in outcome.error


def test_transport_error_is_a_row_not_an_exception() -> None:
    outcome = interpret(StreamedResponse(transport_error="ConnectionRefusedError: [Errno 111]",
                                         ended_at_s=1.0), "chat", 1.0)
    assert not outcome.ok
    assert outcome.status_code == 0
    assert "Refused" in outcome.error


def test_completions_text_field() -> None:
    events = [(1.0, json.dumps({"choices": [{"text": "hi", "finish_reason": None}]})),
              (1.2, json.dumps({"choices": [{"text": " there", "finish_reason": "length"}]})),
              (1.2, USAGE), (1.2, "[DONE]")]
    outcome = interpret(response(events), "completions", 0.5)
    assert outcome.ok and outcome.text == "hi there"
    assert outcome.content_chunk_perf_s == (1.0, 1.2)


def test_request_body_asks_for_usage_and_streaming() -> None:
    body = json.loads(request_body("chat", "tiny", [{"role": "user", "content": "x"}], 8,
                                   True, 0.0))
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["max_tokens"] == 8
    completions = json.loads(request_body("completions", "tiny", "p", 8, False, 0.0))
    assert completions["prompt"] == "p" and "ignore_eos" not in completions
