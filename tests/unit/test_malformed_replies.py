"""Rows are sacred (issue 40, items 1, 5, 15): whatever value a server puts in any field of any
chunk, the request becomes exactly one row, that row is written, and a value of the wrong type
or range in a field the suite reads makes it a failed `bad_response` row naming the field.

The randomised test is seeded (`random.Random(SEED)`), pure and fast: every case is a
well-formed vLLM stream (chat or completions, with or without per-chunk usage, compact JSON as
vLLM writes it so the parser's byte-search fast path is taken, or spaced so it is not) with one
to three fields of its chunks replaced by a wrong type, a huge, negative or NaN value, or
deleted; or a whole chunk replaced. Each goes through the parser, the row builder and the
Arrow sample writer; the file read back holds one row per case.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from vllm_slo.loadtests.openai_stream import MAX_COUNT, interpret
from vllm_slo.loadtests.plan import PlannedRequest
from vllm_slo.loadtests.request_rows import request_row
from vllm_slo.run_folder import samples_format
from vllm_slo.run_folder.samples_format import (
    REQUEST_STATUSES,
    SampleWriter,
    read_stream_tolerant,
)
from vllm_slo.transport.http_stream import StreamedResponse

SEED = 40
CASES = 4000

# what a hostile server can put where a value belongs
WRONG_VALUES: tuple[Any, ...] = (
    "16", "", "hello", "\ud800", True, False, 1.5, 16.0, float("nan"), float("inf"),
    -float("inf"), -5, -1, 2**31, 2**40, 2**63, 10**30, -(2**63), None, [1, 2], [], {},
    {"a": 1}, 7, 0, "x" * 5000,
)
COUNT_KEYS = ("completion_tokens", "prompt_tokens", "reasoning_tokens")
TEXT_KEYS = ("content", "reasoning", "reasoning_content", "text", "finish_reason")
OBJECT_KEYS = ("usage", "delta", "completion_tokens_details")
PLANNED = PlannedRequest(index=3, conversation_id=3, turn=1,
                         messages=({"role": "user", "content": "hi"},), prompt_tokens=5,
                         max_tokens=8)


def _stream(rng: random.Random, endpoint: str) -> list[Any]:
    """A well-formed stream as vLLM sends it: chunks (dicts) and "[DONE]"."""
    per_chunk = rng.random() < 0.7
    reasoning = endpoint == "chat" and rng.random() < 0.3
    n = rng.randint(1, 6)
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def usage(tokens: int) -> dict[str, Any]:
        return {"usage": {"prompt_tokens": 5, "total_tokens": 5 + tokens,
                          "completion_tokens": tokens}} if per_chunk else {}

    chunks: list[Any] = []
    if endpoint == "chat":
        chunks.append({**base, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                  "content": ""},
                                            "logprobs": None, "finish_reason": None}],
                       **usage(0)})
    for k in range(1, n + 1):
        finish = "length" if k == n else None
        if endpoint == "chat":
            key = "reasoning" if reasoning and k <= n // 2 else "content"
            choice = {"index": 0, "delta": {key: f" w{k}"}, "logprobs": None,
                      "finish_reason": finish}
        else:
            choice = {"index": 0, "text": f" w{k}", "logprobs": None, "finish_reason": finish,
                      "stop_reason": None}
        chunks.append({**base, "choices": [choice], **usage(k)})
    final: dict[str, Any] = {"prompt_tokens": 5, "total_tokens": 5 + n, "completion_tokens": n}
    if reasoning:
        final["completion_tokens_details"] = {"reasoning_tokens": n // 2}
    chunks.append({**base, "choices": [], "usage": final})
    chunks.append("[DONE]")
    return chunks


def _slots(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every key path (and list position) inside a chunk."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield (*path, key)
            yield from _slots(inner, (*path, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield (*path, index)
            yield from _slots(inner, (*path, index))


def _set(chunk: Any, path: tuple[Any, ...], value: Any, delete: bool) -> None:
    for step in path[:-1]:
        chunk = chunk[step]
    if delete:
        del chunk[path[-1]]
    else:
        chunk[path[-1]] = value


def _invalid_for(key: Any, value: Any) -> bool:
    """Whether `value` is one no reading of `key` may accept."""
    if key in COUNT_KEYS:
        return value is not None and (type(value) is not int or not 0 <= value <= MAX_COUNT)
    if key in TEXT_KEYS:
        return (value is not None and not isinstance(value, str)) or (
            key == "finish_reason" and value == "\ud800")
    if key in OBJECT_KEYS:
        return value is not None and not isinstance(value, dict)
    if key == "choices":
        return value is not None and not isinstance(value, list)
    return False


def _payload(chunk: Any, compact: bool) -> bytes:
    if chunk == "[DONE]":
        return b"[DONE]"
    separators = (",", ":") if compact else (", ", ": ")
    return json.dumps(chunk, separators=separators).encode("utf-8", "surrogatepass")


def _case(rng: random.Random) -> tuple[str, list[bytes], bool]:
    """One corrupted stream: (endpoint, payloads, whether a field the suite reads got a value
    it must refuse)."""
    endpoint = rng.choice(("chat", "completions"))
    chunks = _stream(rng, endpoint)
    must_fail = False
    corruptions = 1 if rng.random() < 0.7 else rng.randint(2, 3)
    for _ in range(corruptions):
        position = rng.randrange(len(chunks))
        chunk = chunks[position]
        draw = rng.random()
        slots = list(_slots(chunk))
        if draw < 0.08 or not slots:  # the whole chunk replaced
            chunks[position] = copy.deepcopy(
                rng.choice((*WRONG_VALUES, "[" * 5000, '{"choices": 7}')))
            continue
        path = rng.choice(slots)
        delete = draw < 0.15 and isinstance(path[-1], str)
        value = copy.deepcopy(rng.choice(WRONG_VALUES))
        _set(chunk, path, value, delete)
        key = path[-1]
        read_here = (key not in ("prompt_tokens", "reasoning_tokens")
                     or chunk.get("choices") == [])  # counts kept from the final usage
        if not delete and corruptions == 1 and read_here and _invalid_for(key, value):
            must_fail = True
        if (isinstance(key, int) and len(path) > 1 and path[-2] == "choices"
                and not isinstance(value, dict)):
            must_fail = corruptions == 1
    compact = rng.random() < 0.7
    payloads = []
    for chunk in chunks:
        if isinstance(chunk, str) and chunk != "[DONE]":
            payloads.append(chunk.encode("utf-8", "surrogatepass"))  # raw text as a payload
        else:
            payloads.append(_payload(chunk, compact))
    return endpoint, payloads, must_fail


def _row(outcome: Any, k: int, endpoint: str) -> dict[str, Any]:
    return request_row(request_id=f"r{k}", process_id=1, user_id=k % 7, request=PLANNED,
                       endpoint=endpoint, phase="measure", intended_perf_s=0.5,
                       send_unix_s=1.8e9 + k, queued=False, outcome=outcome)


def test_no_reply_loses_its_row_or_stops_the_writer(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    writer = SampleWriter(tmp_path / "samples.arrows")
    statuses: dict[str, int] = {}
    refused = 0
    for k in range(CASES):
        endpoint, payloads, must_fail = _case(rng)
        events = [(1.0 + j / 100, payload) for j, payload in enumerate(payloads)]
        outcome = interpret(StreamedResponse(status=200, events=events, ended_at_s=2.0),
                            endpoint, send_perf_s=0.5)
        assert outcome.status in REQUEST_STATUSES, (k, outcome)
        assert outcome.ok == (outcome.status == "ok"), (k, outcome)
        if must_fail:
            assert outcome.status == "bad_response", (k, payloads, outcome)
            refused += 1
        statuses[outcome.status] = statuses.get(outcome.status, 0) + 1
        writer.append(_row(outcome, k, endpoint))
        if k % 500 == 499:
            writer.flush()
    writer.close()
    # every outcome's values fit their columns as they are: nothing for the writer to mend
    assert (writer.rows_repaired, writer.rows_dropped) == (0, 0)
    table = read_stream_tolerant(tmp_path / "samples.arrows")
    assert table.num_rows == writer.rows_written == CASES
    assert table.column("request_id").to_pylist() == [f"r{k}" for k in range(CASES)]
    assert refused > CASES // 8, statuses  # the generator does reach the fields read
    assert {"ok", "bad_response", "malformed_stream"} <= set(statuses), statuses
    counts = [v for v in table.column("output_tokens").to_pylist() if v is not None]
    assert all(0 <= v <= MAX_COUNT for v in counts)


@pytest.mark.parametrize(("field", "value", "named"), [
    ("completion_tokens", "16", 'completion_tokens is "16", not an integer'),
    ("completion_tokens", -5, "completion_tokens is -5, not a count"),
    ("completion_tokens", 2**40, "completion_tokens is 1099511627776, not a count"),
    ("completion_tokens", float("nan"), "completion_tokens is NaN, not an integer"),
    ("completion_tokens", True, "completion_tokens is true, not an integer"),
    ("prompt_tokens", 1.5, "prompt_tokens is 1.5, not an integer"),
])
def test_a_bad_count_in_the_usage_chunk_is_a_named_failure(field: str, value: Any,
                                                           named: str) -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 2, field: value}
    events = [(1.0, b'{"choices":[{"index":0,"text":"a","finish_reason":null}]}'),
              (1.1, json.dumps({"choices": [], "usage": usage}).encode()), (1.2, b"[DONE]")]
    outcome = interpret(StreamedResponse(status=200, events=events, ended_at_s=1.3),
                        "completions", 0.5)
    assert (outcome.ok, outcome.status) == (False, "bad_response")
    assert outcome.error == f"bad_response: {named}" or outcome.error.startswith(
        f"bad_response: {named}"), outcome.error
    assert outcome.output_tokens is None or isinstance(outcome.output_tokens, int)


def _vllm_chunk(tokens: int, spaced: bool) -> bytes:
    doc = {"id": "c", "choices": [{"index": 0, "delta": {"content": "x"}, "logprobs": None,
                                   "finish_reason": None}],
           "usage": {"prompt_tokens": 3, "total_tokens": 3 + tokens,
                     "completion_tokens": tokens}}
    return json.dumps(doc, separators=(", ", ": ") if spaced else (",", ":")).encode()


@pytest.mark.parametrize("spaced", [False, True])  # the fast path and the parsed one
def test_a_per_chunk_count_that_falls_is_a_bad_response(spaced: bool) -> None:
    events = [(1.0, _vllm_chunk(1, spaced)), (1.1, _vllm_chunk(4, spaced)),
              (1.2, _vllm_chunk(2, spaced)), (1.3, _vllm_chunk(5, spaced)),
              (1.4, b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}'),
              (1.5, b"[DONE]")]
    outcome = interpret(StreamedResponse(status=200, events=events, ended_at_s=1.6),
                        "chat", 0.5)
    assert outcome.status == "bad_response"
    assert outcome.error == "bad_response: completion_tokens fell from 4 to 2 between chunks"
    assert all(k >= 0 for k in outcome.chunk_tokens or ())


@pytest.mark.parametrize(("chunk", "named"), [
    (b'{"choices":[],"usage":[1,2]}', "usage is [1, 2], not an object"),
    (b'{"choices":[{"index":0,"delta":"hello","finish_reason":null}]}',
     'delta is "hello", not an object'),
    (b'{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":7}]}',
     "finish_reason is 7, not a string"),
    (b'{"choices":{"0":{}}}', 'choices is {"0": {}}, not a list'),
    (b'{"choices":[7]}', "a choice is 7, not an object"),
    (b'{"choices":[{"index":0,"delta":{"content":["a"]},"finish_reason":null}]}',
     'content is ["a"], not a string'),
])
def test_a_chunk_of_the_wrong_shape_is_a_named_failure_not_a_lost_row(chunk: bytes,
                                                                      named: str) -> None:
    good = b'{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}'
    events = [(1.0, good), (1.1, chunk), (1.2, b"[DONE]")]
    outcome = interpret(StreamedResponse(status=200, events=events, ended_at_s=1.3),
                        "chat", 0.5)
    assert (outcome.status, outcome.error) == ("bad_response", f"bad_response: {named}")


def test_json_nested_too_deep_is_malformed_not_a_crash() -> None:
    events = [(1.0, b"[" * 100_000), (1.1, b"[DONE]")]
    outcome = interpret(StreamedResponse(status=200, events=events, ended_at_s=1.2), "chat",
                        0.5)
    assert outcome.status == "malformed_stream"
    error = interpret(StreamedResponse(status=500, body=b"[" * 100_000, ended_at_s=1.0),
                      "chat", 0.5)
    assert error.status == "http_error"


def test_an_error_text_with_a_lone_surrogate_still_writes(tmp_path: Path) -> None:
    events = [(1.0, b'{"error": {"message": "\\ud800 busy", "code": 503}}'),
              (1.1, b"[DONE]")]
    outcome = interpret(StreamedResponse(status=200, events=events, ended_at_s=1.2), "chat",
                        0.5)
    assert outcome.status == "stream_error" and "busy" in outcome.error
    writer = SampleWriter(tmp_path / "s.arrows")
    writer.append(_row(outcome, 0, "chat"))
    writer.close()
    assert writer.rows_repaired == 0
    assert read_stream_tolerant(tmp_path / "s.arrows").num_rows == 1


def _garbage_row(rng: random.Random, k: int) -> dict[str, Any]:
    """A row whose every value may be of the wrong type (a bug of the suite's own)."""
    row: dict[str, Any] = {"request_id": f"g{k}", "process_id": 1, "phase": "measure",
                           "endpoint": "chat", "intended_send_unix_s": 1.0,
                           "send_unix_s": 1.0, "send_lag_s": 0.0, "status_code": 200,
                           "ok": True, "status": "ok"}
    for field in samples_format.SAMPLE_SCHEMA:
        if field.name != "request_id" and rng.random() < 0.2:
            row[field.name] = rng.choice((*WRONG_VALUES, [1.0, "a"], [2 ** 40], [float("nan")]))
    return row


def test_the_writer_mends_unfit_values_and_never_stops(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    writer = SampleWriter(tmp_path / "s.arrows")
    for k in range(1000):
        writer.append(_garbage_row(rng, k))
        if k % 100 == 99:
            writer.flush()
    writer.close()
    table = read_stream_tolerant(tmp_path / "s.arrows").to_pydict()
    assert len(table["request_id"]) == writer.rows_written == 1000
    assert writer.rows_dropped == 0 and writer.rows_repaired > 500
    mended = [k for k, e in enumerate(table["error"]) if e and "samples writer" in e]
    assert len(mended) == writer.rows_repaired
    assert not any(table["ok"][k] for k in mended)  # a mended row is never a success


def test_a_batch_that_will_not_build_loses_only_its_bad_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The last line of defence: with the value checks switched off, a batch holding one
    unfit value is written row by row and only that row is left out (counted)."""
    monkeypatch.setattr(samples_format, "_FITTERS",
                        tuple((name, lambda v: v) for name, _ in samples_format._FITTERS))
    writer = SampleWriter(tmp_path / "s.arrows")
    good = _garbage_row(random.Random(0), 0)
    good = {k: v for k, v in good.items() if k in ("request_id", "process_id", "phase",
                                                   "endpoint", "ok", "status_code")}
    for k in range(50):
        row = {**good, "request_id": f"r{k}"}
        if k == 17:
            row["output_tokens"] = "16"
        writer.append(row)
    writer.close()
    table = read_stream_tolerant(tmp_path / "s.arrows")
    assert table.num_rows == writer.rows_written == 49 and writer.rows_dropped == 1
    assert "r17" not in table.column("request_id").to_pylist()


def test_a_negative_count_is_refused_not_counted() -> None:
    """(15) `completion_tokens: -5` is no count: it never reaches a row's output_tokens."""
    events = [(1.0, b'{"choices":[{"index":0,"text":"a","finish_reason":"length"}]}'),
              (1.1, b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":-5}}'),
              (1.2, b"[DONE]")]
    outcome = interpret(StreamedResponse(status=200, events=events, ended_at_s=1.3),
                        "completions", 0.5)
    assert outcome.status == "bad_response" and outcome.output_tokens is None
