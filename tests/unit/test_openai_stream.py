"""Turning timestamped SSE events into a request outcome: the definitions of TTFT, failures."""

from __future__ import annotations

import json

from vllm_slo.loadtests.openai_stream import interpret, request_body, retry_after_seconds
from vllm_slo.transport.http_stream import StreamedResponse


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
    return StreamedResponse(status=status, events=[(t, e.encode()) for t, e in events],
                            ended_at_s=events[-1][0] + 0.001)


def test_role_chunk_never_counts_as_first_token() -> None:
    events = [(10.0, chat_chunk("", role="assistant")), (10.5, chat_chunk("a")),
              (10.6, chat_chunk("b")), (10.7, chat_chunk("c", finish="length")),
              (10.7, USAGE), (10.7, "[DONE]")]
    outcome = interpret(response(events), "chat", send_perf_s=9.9)
    assert outcome.ok
    assert outcome.content_chunk_perf_s == (10.5, 10.6, 10.7)
    assert outcome.output_tokens == 3
    assert outcome.prompt_tokens == 17
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
    assert outcome.ok
    assert outcome.content_chunk_perf_s == (1.0, 1.2)


def test_request_body_asks_for_usage_and_streaming() -> None:
    body = json.loads(request_body("chat", "tiny", [{"role": "user", "content": "x"}], 8,
                                   True, 0.0))
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["ignore_eos"] is True and body["max_tokens"] == 8
    completions = json.loads(request_body("completions", "tiny", "p", 8, False, 0.0))
    assert completions["prompt"] == "p" and "ignore_eos" not in completions


VLLM_TOKEN = ('{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":'
              '[{"index":0,"text":"%s","logprobs":null,"finish_reason":null,"stop_reason":null}]}')


def test_fast_path_and_json_path_agree_on_vllm_chunks() -> None:
    """Token chunks shaped like vLLM's skip JSON parsing; the outcome must equal the one the
    JSON path gives (checked by feeding the same chunks re-serialised with spaces, which the
    shortcut does not recognise)."""
    texts = ["a", "\\\"q", " word", "\\u00e9"]
    events = [(1.0 + k / 10, VLLM_TOKEN % text) for k, text in enumerate(texts)]
    events += [(1.5, VLLM_TOKEN.replace('"finish_reason":null', '"finish_reason":"length"')
                % "z"), (1.5, USAGE), (1.5, "[DONE]")]
    spaced = [(t, json.dumps(json.loads(e)) if e != "[DONE]" else e) for t, e in events]
    fast, slow = (interpret(response(e), "completions", 0.5) for e in (events, spaced))
    assert fast == slow and fast.ok
    assert fast.content_chunk_perf_s == (1.0, 1.1, 1.2, 1.3, 1.5)
    assert fast.finish_reason == "length" and fast.output_tokens == 3


def test_empty_text_is_not_content_and_bad_bytes_are_malformed() -> None:
    empty = [(1.0, VLLM_TOKEN % ""), (1.1, VLLM_TOKEN % "x"), (1.2, USAGE), (1.2, "[DONE]")]
    outcome = interpret(response(empty), "completions", 0.5)
    assert outcome.ok and outcome.content_chunk_perf_s == (1.1,)
    cut = (VLLM_TOKEN % "X").encode().replace(b"X", "é".encode()[:1])  # half of a character
    events = [(1.0, cut), (1.1, (VLLM_TOKEN % "x").encode()), (1.2, USAGE.encode()),
              (1.2, b"[DONE]")]
    broken = interpret(StreamedResponse(status=200, events=events, ended_at_s=1.3),
                       "completions", 0.5)
    assert not broken.ok and broken.error.startswith("malformed SSE payload")
    truncated = interpret(response([(1.0, (VLLM_TOKEN % "x")[:-3]), (1.1, USAGE),
                                    (1.2, "[DONE]")]), "completions", 0.5)
    assert not truncated.ok and truncated.error.startswith("malformed SSE payload")


def test_every_way_to_fail_has_its_status_word() -> None:
    from vllm_slo.run_folder.samples_format import REQUEST_STATUSES

    error = json.dumps({"error": {"message": "busy", "type": "x", "code": 503}})
    token = VLLM_TOKEN % "x"
    cases = {
        "ok": response([(1.0, token), (1.1, USAGE), (1.1, "[DONE]")]),
        "http_error": StreamedResponse(status=429, body=b"{}", ended_at_s=1.0),
        "transport_error": StreamedResponse(transport_error="ConnectionRefusedError: x",
                                            ended_at_s=1.0),
        "timeout": StreamedResponse(status=200, transport_error="TimeoutError: response not "
                                    "finished after 1s", events=[(1.0, token.encode())],
                                    ended_at_s=2.0),
        "malformed_stream": response([(1.0, token[:-2]), (1.1, "[DONE]")]),
        "stream_error": response([(1.0, error), (1.0, "[DONE]")]),
        "incomplete_stream": response([(1.0, token), (1.1, USAGE)]),
        "no_tokens": response([(1.0, USAGE), (1.0, "[DONE]")]),
        "bad_response": response([(1.0, token), (1.1, USAGE.replace("3", '"3"')),
                                  (1.1, "[DONE]")]),
    }
    cases["malformed_stream"] = StreamedResponse(status=200, sse_bytes=300, ended_at_s=1.0)
    assert set(cases) == set(REQUEST_STATUSES) - {"cancelled"}  # (tested in integration)
    for status, got in cases.items():
        outcome = interpret(got, "completions", 0.5)
        assert outcome.status == status, (status, outcome)
        assert outcome.ok == (status == "ok")


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    now = 1_800_000_000.0  # 2027-01-15 08:00:00 GMT
    assert retry_after_seconds("3", now) == 3.0
    assert retry_after_seconds(" 120 ", now) == 120.0
    assert retry_after_seconds("Fri, 15 Jan 2027 08:00:30 GMT", now) == 30.0
    assert retry_after_seconds("Fri, 15 Jan 2027 07:59:00 GMT", now) == 0.0  # already past
    for unreadable in (None, "", "soon", "-1", "1.5", "Fri, 15 Jan 2027 08:00:30"):
        assert retry_after_seconds(unreadable, now) is None, unreadable


def test_an_http_errors_retry_after_reaches_the_outcome() -> None:
    body = b'{"error": {"message": "slow down", "type": "TooManyRequests", "code": 429}}'
    limited = StreamedResponse(status=429, body=body, ended_at_s=1.0,
                               headers={"retry-after": "2"})
    outcome = interpret(limited, "chat", 0.9)
    assert (outcome.status, outcome.retry_after_s) == ("http_error", 2.0)
    assert outcome.error.endswith("(Retry-After: 2)") and "slow down" in outcome.error
    plain = interpret(StreamedResponse(status=503, body=body, ended_at_s=1.0), "chat", 0.9)
    assert plain.retry_after_s is None and "Retry-After" not in plain.error


def test_reasoning_and_extra_body_reach_the_request() -> None:
    """`traffic.reasoning` asks the chat template to think; `traffic.extra_body` adds (and may
    override) top-level fields, as the OpenAI client's extra_body does."""
    from vllm_slo.scenarios.loader import load_scenario
    scenario = load_scenario("chat", ["traffic.reasoning=true",
                                      'traffic.extra_body={logit_bias: {"7": 5}}'])
    traffic = scenario[0].traffic
    body = json.loads(request_body("chat", "m", [{"role": "user", "content": "x"}], 8, False,
                                   0.0, traffic.reasoning, traffic.extra_body))
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert body["logit_bias"] == {"7": 5}
    assert "chat_template_kwargs" not in json.loads(request_body("completions", "m", "p", 8,
                                                                 False, 0.0, True))


def test_per_chunk_usage_counts_tokens_on_both_paths() -> None:
    """vLLM's continuous usage: the tokens a chunk carried are the rise of completion_tokens
    since the previous token chunk; a chunk skipped by the server (a swallowed `</think>`)
    counts with the next one. The fast path (bytes) and the JSON path agree; reasoning chunks
    are counted apart and the first answer chunk is kept."""
    def chunk(key: str, text: str, tokens: int, spaced: bool) -> str:
        doc = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": {key: text}, "logprobs": None,
                            "finish_reason": None}],
               "usage": {"prompt_tokens": 3, "total_tokens": 3 + tokens,
                         "completion_tokens": tokens}}
        return json.dumps(doc) if spaced else json.dumps(doc, separators=(",", ":"))

    final = json.dumps({"choices": [], "usage": {
        "prompt_tokens": 3, "completion_tokens": 9,
        "completion_tokens_details": {"reasoning_tokens": 4}}})
    outcomes = []
    for spaced in (False, True):
        events = [(1.0, chunk("reasoning", "a", 1, spaced)),
                  (1.1, chunk("reasoning", "b c", 3, spaced)),
                  (1.3, chunk("content", "d", 5, spaced)),  # 2: with the skipped end tag
                  (1.4, chunk("content", "e f g", 8, spaced)),
                  (1.5, chunk("content", "h", 9, spaced)), (1.5, final), (1.5, "[DONE]")]
        outcomes.append(interpret(response(events), "chat", 0.5))
    fast, parsed = outcomes
    assert fast == parsed
    assert fast.ok and fast.chunk_tokens == (1, 2, 2, 3, 1) and fast.output_tokens == 9
    assert fast.reasoning_chunks == 2 and fast.first_answer_perf_s == 1.3
    assert fast.reasoning_tokens == 4  # the server's count wins over the chunks' 3
