"""`traffic.profile: trace`: the readers of each format (and each malformed case refused with
file, line and column), the replay's schedule (window, speedup, rate scale, cap), the prompts
(shared hash ids give token-identical blocks, distinct ones differ; a simulated vLLM cache
counts the hit rate the trace implies), the spec's rules and the fidelity check."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from tests.unit.test_prefix_cache_target import simulate_vllm_prefix_cache, templated
from vllm_slo.analysis.prefix_cache import CounterSpan
from vllm_slo.analysis.trace_fidelity import MISMATCH_NAME, UNVERIFIED_NAME, trace_fidelity
from vllm_slo.loadtests.arrivals import arrival_offsets_s, schedule_offsets_s
from vllm_slo.loadtests.plan import build_plan, read_plan, write_plan
from vllm_slo.loadtests.profiles.trace import DEFAULT_TRACE_PATH
from vllm_slo.loadtests.trace_formats import TraceFormatError, TraceRecord, read_trace
from vllm_slo.loadtests.trace_replay import (
    BlockTexts,
    Replayed,
    hit_rate,
    implied_hits,
    select,
    statistics,
)
from vllm_slo.scenarios.traffic_spec import TrafficSpec


class WordCounter:
    """Counts whitespace-separated words (the stand-in's /tokenize)."""

    name = "words"

    def count_many(self, texts):
        return [len(text.split()) for text in texts]


def mooncake(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


ROWS = [{"timestamp": 0, "input_length": 1200, "output_length": 10, "hash_ids": [1, 2, 3]},
        {"timestamp": 500, "input_length": 700, "output_length": 12, "hash_ids": [1, 4]},
        {"timestamp": 1500, "input_length": 1200, "output_length": 8, "hash_ids": [1, 2, 5]}]


# ------------------------------------------------------------------------------- the readers
def test_each_format_reads_its_columns(tmp_path: Path) -> None:
    records = list(read_trace(mooncake(tmp_path / "m.jsonl", ROWS), "mooncake"))
    assert records[1] == TraceRecord(2, 0.5, 700, 12, (1, 4))
    azure = tmp_path / "azure.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     "2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:50.9951690,396,109\n")
    first, second = read_trace(azure, "azure")
    assert (first.input_tokens, first.output_tokens, first.line) == (374, 44, 2)
    assert second.timestamp_s - first.timestamp_s == pytest.approx(4.314579, abs=1e-6)
    burst = tmp_path / "burst.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,ChatGPT,472,18,490,Conversation log\n"
                     "45,GPT-4,1087,0,1087,Conversation log\n")
    records = list(read_trace(burst, "burstgpt"))
    assert [(r.timestamp_s, r.input_tokens, r.output_tokens) for r in records] == [
        (5.0, 472, 18), (45.0, 1087, 0)]
    generic_csv = tmp_path / "g.csv"
    generic_csv.write_text("timestamp_s,input_tokens,output_tokens,session_id,hash_ids\n"
                           "0.5,100,5,s1,7 8\n1.0,50,5,,\n")
    records = list(read_trace(generic_csv, "generic"))
    assert records[0] == TraceRecord(2, 0.5, 100, 5, (7, 8), "s1")
    assert records[1] == TraceRecord(3, 1.0, 50, 5, (), None)
    generic_jsonl = tmp_path / "g.jsonl"
    generic_jsonl.write_text('{"timestamp_s": 2, "input_tokens": 9, "output_tokens": 3, '
                             '"session_id": 4, "hash_ids": ["a", "b"]}\n\n'
                             '{"timestamp_s": 2, "input_tokens": 9, "output_tokens": 3}\n')
    records = list(read_trace(generic_jsonl, "generic"))
    assert records[0] == TraceRecord(1, 2.0, 9, 3, ("a", "b"), "4")
    assert records[1].line == 3 and records[1].hash_ids == ()  # equal timestamps are fine


@pytest.mark.parametrize(("fmt", "name", "text", "message"), [
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n',
     ":1: field 'hash_ids' is missing"),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, '
     '"hash_ids": [1]}\n{"timestamp": 1, "input_length": 5, "hash_ids": [1]}\n',
     ":2: field 'output_length' is missing"),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, '
     '"hash_ids": [1]}\n{"timestamp": 1, "input_length": 5,, "output_length": 1}\n',
     ":2: column 36: not valid JSON"),
    ("mooncake", "m.jsonl", '[1, 2]\n', ":1: a mooncake line is a JSON object"),
    ("mooncake", "m.jsonl", '{"timestamp": 9, "input_length": 5, "output_length": 1, '
     '"hash_ids": [1]}\n{"timestamp": 3, "input_length": 5, "output_length": 1, '
     '"hash_ids": [2]}\n', ":2: 'timestamp' goes back in time (0.003 s, line 1 had 0.009 s)"),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": -5, "output_length": 1, '
     '"hash_ids": [1]}\n', ":1: column 'input_length': a negative length (-5)"),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5.5, "output_length": 1, '
     '"hash_ids": [1]}\n', ":1: column 'input_length': a whole number of tokens, got 5.5"),
    ("mooncake", "m.jsonl", '{"timestamp": "now", "input_length": 5, "output_length": 1, '
     '"hash_ids": [1]}\n', ":1: column 'timestamp': a finite number, got 'now'"),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, '
     '"hash_ids": 7}\n', ":1: field 'hash_ids': a list of block ids, got 7"),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, '
     '"hash_ids": [1, 2.5]}\n', ":1: field 'hash_ids'[1]: a block id is a whole number"),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n",
     ":1: column 'GeneratedTokens' missing from the header"),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n",
     ":2: column 'TIMESTAMP': not a date and time"),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
     "2023-11-16 18:15:46.5,3,4\n2023-11-16 18:15:46.1,3,4\n",
     ":3: 'TIMESTAMP' goes back in time"),
    ("burstgpt", "b.csv", "Timestamp,Model,Request tokens,Response tokens\n1,x,3,-1\n",
     ":2: column 'Response tokens': a negative length (-1)"),
    ("burstgpt", "b.csv", "Timestamp,Model,Request tokens,Response tokens\n1,x,three,1\n",
     ":2: column 'Request tokens': not a number: 'three'"),
    ("burstgpt", "b.csv", "Timestamp,Model,Request tokens,Response tokens\n1,x,3\n",
     ":2: 3 columns, the header has 4"),
    ("burstgpt", "b.csv", "", ": empty: a burstgpt trace starts with a header line"),
    ("generic", "g.csv", "time,input_tokens,output_tokens\n1,2,3\n",
     ":1: column 'timestamp_s' missing from the header"),
    ("generic", "g.jsonl", '{"timestamp_s": 1, "input_tokens": 2, "output_tokens": 3, '
     '"session_id": [1]}\n', ":1: field 'session_id': a string or a whole number"),
])
def test_malformed_traces_are_refused_naming_file_line_and_column(
        tmp_path: Path, fmt: str, name: str, text: str, message: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TraceFormatError) as error:
        list(read_trace(path, fmt))
    assert str(error.value).startswith(str(path)), error.value
    assert message in str(error.value), error.value


def test_a_missing_file_and_an_unknown_format_are_value_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no such trace file"):
        list(read_trace(tmp_path / "absent.jsonl", "mooncake"))
    with pytest.raises(ValueError, match="unknown trace format 'vidur'"):
        list(read_trace(tmp_path / "absent.jsonl", "vidur"))


def test_reading_stops_at_the_cap_and_the_window_without_reading_further(
        tmp_path: Path) -> None:
    # everything after line 3 is garbage: reading it would raise, so none of it is read
    path = mooncake(tmp_path / "m.jsonl", ROWS)
    with path.open("a") as handle:
        handle.write("not json at all\n" * 1000)
    capped = select(read_trace(path, "mooncake"), max_requests=2)
    assert [s.record.line for s in capped.sends] == [1, 2]
    assert capped.records_read == 2 and capped.stopped == "the request cap (2)"
    bad_late = mooncake(tmp_path / "late.jsonl", [*ROWS, {**ROWS[0], "timestamp": 9000}])
    with bad_late.open("a") as handle:
        handle.write("{broken\n")
    windowed = select(read_trace(bad_late, "mooncake"), end_s=5.0)
    assert len(windowed.sends) == 3 and windowed.stopped.startswith("the window's end")
    timed = select(read_trace(bad_late, "mooncake"), total_s=1.0)
    assert len(timed.sends) == 2 and timed.stopped.startswith("the run's traffic time")


def test_a_large_file_is_streamed_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    line = {"timestamp": 0, "input_length": 4096, "output_length": 64,
            "hash_ids": list(range(8))}
    with path.open("w") as handle:
        for i in range(100_000):  # ~9 MB: every record read, none kept
            handle.write(json.dumps({**line, "timestamp": i}) + "\n")
    size = path.stat().st_size
    tracemalloc.start()
    count = sum(1 for _ in read_trace(path, "mooncake"))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert count == 100_000
    assert peak < size / 20, (peak, size)


# ------------------------------------------------------------------------------ the schedule
def records_at(times_s: list[float]) -> list[TraceRecord]:
    return [TraceRecord(i + 1, t, 100, 10, (i,)) for i, t in enumerate(times_s)]


def test_window_and_speedup_place_each_record() -> None:
    records = records_at([100.0, 101.0, 103.0, 106.0, 110.0])
    selection = select(records, start_s=1.0, end_s=10.0, speedup=2.0)
    assert [s.offset_s for s in selection.sends] == [0.0, 1.0, 2.5]  # (t - 100 - 1) / 2
    assert selection.records_read == 5 and selection.stopped.startswith("the window's end")


@pytest.mark.parametrize("scale", [0.3, 0.5, 2 / 3, 1.0, 1.5, 2.0, 3.0])
def test_rate_scale_deals_sends_within_one_of_the_weights(scale: float) -> None:
    records = records_at([float(i) for i in range(60)])
    sends = select(records, rate_scale=scale).sends
    per_record = np.bincount([s.record.line - 1 for s in sends], minlength=60)
    assert np.all(np.abs(np.cumsum(per_record) - scale * np.arange(1, 61)) < 1)
    offsets = [s.offset_s for s in sends]
    assert offsets == sorted(offsets)
    for send in sends:  # copies spread over the gap to the next record, in their own lane
        assert send.record.timestamp_s <= send.offset_s < send.record.timestamp_s + 1
        assert send.blocks() == ((send.lane, send.record.line - 1),)
    if scale > 1:
        assert max(s.lane for s in sends) == int(np.ceil(scale)) - 1


def test_empty_prompts_and_outputs_are_counted_and_skipped() -> None:
    records = [TraceRecord(1, 0, 0, 5), TraceRecord(2, 1, 5, 0), TraceRecord(3, 2, 5, 5)]
    selection = select(records)
    assert [s.record.line for s in selection.sends] == [3]
    assert selection.filtered == {"empty_prompt": 1, "no_output": 1}


# -------------------------------------------------------------------------------- the prompts
def test_shared_hash_ids_give_identical_tokens_and_distinct_ones_differ(
        tiny_counter, tiny_tokenizer_file) -> None:
    from tokenizers import Tokenizer

    from vllm_slo.loadtests.prompts import WordTexts

    tokenizer = Tokenizer.from_file(str(tiny_tokenizer_file))
    texts = BlockTexts(WordTexts(tiny_counter).fillers, 64, seed=3)
    sends = [Replayed(TraceRecord(1, 0, 150, 1, (1, 2, 3)), 0, 0.0),
             Replayed(TraceRecord(2, 0, 170, 1, (1, 2, 9)), 0, 0.0),
             Replayed(TraceRecord(3, 0, 100, 1, (1, 7)), 0, 0.0),
             Replayed(TraceRecord(4, 0, 150, 1, (1, 2, 3)), 1, 0.0)]  # another lane
    ids = [tokenizer.encode(texts.text(send, i), add_special_tokens=False).ids
           for i, send in enumerate(sends)]
    assert [len(x) for x in ids] == [150, 170, 100, 150]  # exact lengths, real tokenizer
    assert ids[0][:128] == ids[1][:128]  # blocks 1, 2 shared
    assert ids[0][128:136] != ids[1][128:136]  # block 3 vs 9
    assert ids[0][:64] == ids[2][:64] and ids[0][64:72] != ids[2][64:72]
    assert ids[3][:8] != ids[0][:8]  # lane 1's block 1 is not lane 0's
    assert texts.text(sends[0], 0).startswith(texts.text(sends[2], 2)[:200])


def test_the_plan_carries_the_times_and_the_trace_implied_hit_rate(
        tiny_counter, tiny_tokenizer_file, tmp_path: Path) -> None:
    """The shipped sample through build_plan: every request's time is the trace's, and a
    simulated vLLM cache (block 128, a 3-token template header) counts the implied rate."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_tokenizer_file))
    traffic = TrafficSpec.model_validate({
        "profile": "trace", "arrival": {"kind": "trace"}, "warmup": "0s", "duration": "60s"})
    plan = build_plan(traffic, tiny_counter, 4096, 10_000)
    records = list(read_trace(DEFAULT_TRACE_PATH, "mooncake"))
    assert len(plan.requests) == len(records)
    assert [r.arrival_s for r in plan.requests] == pytest.approx(
        [r.timestamp_s - records[0].timestamp_s for r in records])
    assert [r.prompt_tokens for r in plan.requests] == [r.input_tokens for r in records]
    assert [r.max_tokens for r in plan.requests] == [r.output_tokens for r in records]
    assert plan.facts is not None and not plan.warnings
    facts = plan.facts["trace"]
    implied = facts["measured_window"]["implied_hit_rate"]
    assert implied == pytest.approx(facts["trace"]["implied_hit_rate"])
    assert 0.4 < implied < 0.8
    prompts = [templated(r.messages, tokenizer) for r in plan.requests]
    hits, queries = simulate_vllm_prefix_cache(prompts, 128)
    assert hits / queries == pytest.approx(implied, abs=0.02)
    write_plan(plan, tmp_path / "requests.parquet")
    back = read_plan(tmp_path / "requests.parquet")
    assert [r.arrival_s for r in back.requests] == [r.arrival_s for r in plan.requests]
    assert back.facts == json.loads(json.dumps(plan.facts))
    offsets = schedule_offsets_s(traffic.arrival, traffic.total_s, 0,
                                 [r.arrival_s for r in back.requests])
    assert offsets.tolist() == [r.arrival_s for r in plan.requests]


def test_overlong_records_are_trimmed_or_rejected_and_blocks_must_fit(tmp_path: Path) -> None:
    path = mooncake(tmp_path / "m.jsonl", ROWS)

    def traffic(**trace):
        return TrafficSpec.model_validate({
            "profile": "trace", "arrival": {"kind": "trace"}, "overlong": trace.pop("o", "trim"),
            "trace": {"path": str(path), **trace}})

    trimmed = build_plan(traffic(), WordCounter(), 1000, 100)
    assert [r.prompt_tokens for r in trimmed.requests] == [990, 700, 992]
    assert trimmed.trimmed == 2
    rejected = build_plan(traffic(o="reject"), WordCounter(), 1000, 100)
    assert len(rejected.requests) == 1 and rejected.rejected == 2
    with pytest.raises(TraceFormatError, match=r"m.jsonl:1: field 'hash_ids': 3 blocks of 2048"):
        build_plan(traffic(block_tokens=512 * 4), WordCounter(), None, 100)


def test_implied_hits_known_values() -> None:
    sends = [(((0, 1), (0, 2), (0, 3)), 1200), (((0, 1), (0, 4)), 700),
             (((0, 1), (0, 2), (0, 5)), 1200), (((0, 1), (0, 2), (0, 3)), 1200),
             (((0, 1), (0, 2), (0, 3)), 1300)]  # a longer last block: shared as far as sent
    assert list(implied_hits(sends, 512)) == [0, 512, 1024, 1199, 1200]
    assert hit_rate([0, 512], [1200, 700]) == pytest.approx(512 / 1900)
    facts = statistics([0.0, 1.0, 3.0], [10, 20, 30], [1, 2, 3], [[1, 2], [1], [3]], [0, 5, 0])
    assert facts["gap_s_mean"] == 1.5 and facts["block_reuse"] == pytest.approx(0.25)
    assert facts["implied_hit_rate"] == pytest.approx(5 / 60)


# ------------------------------------------------------------------------------- the settings
def test_profile_trace_and_arrival_trace_go_together() -> None:
    with pytest.raises(ValidationError, match=r"set traffic\.arrival\.kind: trace"):
        TrafficSpec.model_validate({"profile": "trace"})
    with pytest.raises(ValidationError, match="takes its times from profile: trace"):
        TrafficSpec.model_validate({"profile": "chat", "arrival": {"kind": "trace"}})
    with pytest.raises(ValidationError, match="target_hit_rate would reshape them"):
        TrafficSpec.model_validate({"profile": "trace", "arrival": {"kind": "trace"},
                                    "prefix_cache": {"target_hit_rate": 0.5}})
    with pytest.raises(ValidationError, match="must come after start"):
        TrafficSpec.model_validate({"profile": "trace", "arrival": {"kind": "trace"},
                                    "trace": {"start": "10s", "end": "5s"}})
    with pytest.raises(ValidationError, match="format 'azure' needs a path"):
        TrafficSpec.model_validate({"profile": "trace", "arrival": {"kind": "trace"},
                                    "trace": {"format": "azure"}})
    with pytest.raises(ValidationError, match="only used with the open-loop kinds"):
        TrafficSpec.model_validate({"profile": "trace",
                                    "arrival": {"kind": "trace", "rate": 3}})
    traffic = TrafficSpec.model_validate({"profile": "trace", "arrival": {"kind": "trace"},
                                          "trace": {"start": "2m", "speedup": 4}})
    assert traffic.arrival.open_loop and traffic.arrival.peak_rate() is None
    with pytest.raises(ValueError, match="the request plan carries the times"):
        arrival_offsets_s(traffic.arrival, 10, 0)


# ------------------------------------------------------------------------- the fidelity check
FACTS = {"format": "mooncake", "file": "t.jsonl", "speedup": 2, "rate_scale": 1,
         "hit_rate_tolerance": 0.05,
         "measured_window": {"requests": 3, "rate_per_s": 1.0, "gap_s_mean": 1.0,
                             "implied_hit_rate": 0.5}}


@pytest.mark.parametrize(("hits", "verdict"), [(5400, "met"), (4600, "met"),
                                               (4400, "mismatch"), (6000, "mismatch")])
def test_the_counted_hit_rate_against_the_implied_one(hits: int, verdict: str) -> None:
    fidelity = trace_fidelity(FACTS, [10.0, 11.0, 12.5], [100, 200, 300], [5, 6, 7],
                              CounterSpan(hits, 10_000, 4.0))
    assert fidelity.verdict == verdict
    rows = {row.statistic: (row.trace, row.sent) for row in fidelity.rows}
    assert rows["requests"] == (3, 3) and rows["inter-arrival mean (s)"] == (1.0, 1.25)
    assert rows["prefix-cache hit rate"] == (0.5, hits / 10_000)
    warning = fidelity.warning()
    if verdict == "met":
        assert warning is None
    else:
        assert warning is not None and warning.startswith(f"{MISMATCH_NAME}: ")
        assert ("less reuse" if hits < 5000 else "more reuse") in warning


def test_no_counters_leave_the_reuse_unverified() -> None:
    fidelity = trace_fidelity(FACTS, [1.0], [10], [None], None)
    assert fidelity.verdict == "unverified" and fidelity.achieved_hit_rate is None
    assert str(fidelity.warning()).startswith(UNVERIFIED_NAME)


def test_the_report_shows_the_trace_next_to_what_was_sent() -> None:
    from types import SimpleNamespace

    import jsonschema

    from vllm_slo.analysis.summary import TrafficFacts
    from vllm_slo.reports.render.html import load_rows
    from vllm_slo.reports.render.text import trace_line
    from vllm_slo.serialise import to_json

    fidelity = trace_fidelity(FACTS, [10.0, 11.0, 12.5], [100, 200, 300], [5, 6, 7],
                              CounterSpan(3000, 10_000, 4.0))
    traffic = TrafficFacts(
        profile="trace", endpoint="chat", arrival="trace", intended_rate_per_s=None,
        sent_per_s=1.0, send_lag_p50_s=None, send_lag_p99_s=None, client_send_lag_p99_s=None,
        queued_for_slot=0, reused_prompts=0, plan=None, prefix_cache_reset="reset",
        prefix_cache_hit_rate=0.3, client_cpu=None, trace=fidelity)
    rows = dict(load_rows(traffic, 3))
    assert rows["trace vs sent: inter-arrival mean (s)"] == "1 scheduled, 1.25 sent"
    assert rows["trace prefix reuse (measured window)"].endswith(": MISMATCH")
    assert trace_line(SimpleNamespace(traffic=traffic)) == (  # type: ignore[arg-type]
        "trace: mooncake replay, prefix-cache hit rate 0.300 counted, 0.500 implied ± 0.05: "
        "MISMATCH")
    schema = json.loads((Path(__file__).parents[3] / "reports" / "schema"
                         / "summary.schema.json").read_text())
    document = to_json(traffic)
    jsonschema.Draft202012Validator(schema["properties"]["traffic"]).validate(document)
    assert document["trace"]["verdict"] == "mismatch"


def test_a_bad_trace_is_a_usage_error_before_any_server_starts(tmp_path: Path) -> None:
    from vllm_slo.preflight import check_traffic_inputs
    from vllm_slo.scenarios.errors import ScenarioError

    path = mooncake(tmp_path / "m.jsonl", [*ROWS, {**ROWS[0], "timestamp": 2000},
                                           {**ROWS[0], "timestamp": 2500, "input_length": -3}])
    traffic = TrafficSpec.model_validate({"profile": "trace", "arrival": {"kind": "trace"},
                                          "trace": {"path": str(path)}})
    with pytest.raises(ScenarioError) as error:
        check_traffic_inputs(traffic, "variants.b: ")
    assert str(error.value) == (f"variants.b: traffic.trace: {path}:5: column 'input_length': "
                                "a negative length (-3)")
    # a run whose traffic ends before line 4's time stops there: line 5 is never read
    short = TrafficSpec.model_validate({"profile": "trace", "arrival": {"kind": "trace"},
                                        "warmup": "0s", "duration": "1.9s",
                                        "trace": {"path": str(path)}})
    check_traffic_inputs(short)
    good = mooncake(tmp_path / "good.jsonl", ROWS)
    empty = TrafficSpec.model_validate({"profile": "trace", "arrival": {"kind": "trace"},
                                        "trace": {"path": str(good), "start": "1h"}})
    with pytest.raises(ScenarioError, match="no request to send: 3 records read"):
        check_traffic_inputs(empty)


def test_the_check_and_the_plan_read_the_trace_once(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The check before the server starts and the plan after it replay the same part of the
    file: the plan takes the check's reading; a file changed in between is read again."""
    from vllm_slo.loadtests.profiles import trace as trace_profile
    from vllm_slo.preflight import check_traffic_inputs, planned_request_count

    reads: list[str] = []

    def counted(path, fmt):
        reads.append(str(path))
        return read_trace(path, fmt)

    monkeypatch.setattr(trace_profile, "read_trace", counted)
    trace_profile._read_replay.cache_clear()
    path = mooncake(tmp_path / "m.jsonl", ROWS)
    traffic = TrafficSpec.model_validate({"profile": "trace", "arrival": {"kind": "trace"},
                                          "trace": {"path": str(path)}})
    check_traffic_inputs(traffic)
    plan = build_plan(traffic, WordCounter(), None, planned_request_count(traffic))
    assert reads == [str(path)]
    assert [r.max_tokens for r in plan.requests] == [10, 12, 8]
    mooncake(path, [*ROWS, {**ROWS[0], "timestamp": 2000, "output_length": 5}])
    again = build_plan(traffic, WordCounter(), None, planned_request_count(traffic))
    assert reads == [str(path)] * 2
    assert [r.max_tokens for r in again.requests] == [10, 12, 8, 5]
    other = TrafficSpec.model_validate({"profile": "trace", "arrival": {"kind": "trace"},
                                        "trace": {"path": str(path), "speedup": 2}})
    build_plan(other, WordCounter(), None, planned_request_count(other))
    assert len(reads) == 3  # other settings: another replay


def test_a_session_is_one_conversation_its_turns_in_order(tmp_path: Path) -> None:
    from vllm_slo.loadtests.profiles.trace import conversations

    sends = [Replayed(TraceRecord(i + 1, i, 5, 1, (), session), lane, float(i))
             for i, (session, lane) in enumerate([("a", 0), (None, 0), ("b", 0), ("a", 0),
                                                  ("a", 1), (None, 0), ("b", 0)])]
    assert conversations(sends) == [(0, 0), (1, 0), (2, 0), (0, 1), (3, 0), (4, 0), (2, 1)]
    path = tmp_path / "g.csv"
    path.write_text("timestamp_s,input_tokens,output_tokens,session_id\n"
                    "0,5,2,alice\n0.5,6,2,bob\n1,7,2,alice\n")
    traffic = TrafficSpec.model_validate({"profile": "trace", "arrival": {"kind": "trace"},
                                          "trace": {"format": "generic", "path": str(path)}})
    plan = build_plan(traffic, WordCounter(), None, 100)
    assert [(r.conversation_id, r.turn) for r in plan.requests] == [(0, 0), (1, 0), (0, 1)]
    assert [r.prompt_tokens for r in plan.requests] == [5, 6, 7]


def test_the_shipped_sample_is_what_its_script_generates() -> None:
    from vllm_slo.loadtests.make_trace_sample import records

    assert DEFAULT_TRACE_PATH.read_text() == "".join(json.dumps(r) + "\n" for r in records())
