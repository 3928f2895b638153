"""`traffic.profile: mix` (chat + long-doc in one run, issue 10's chunked-prefill claim): the
plan deals each conversation to one part by weight and tags every request with it; the rows
carry the tag; summary.json, report.html and the terminal summarise each part on its own."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pytest

from vllm_slo.analysis.run_metrics import (
    measured_profiles,
    run_series,
    series_by_profile,
    summarize,
)
from vllm_slo.loadtests.plan import build_plan, canonical_bytes, read_plan, write_plan
from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.traffic_spec import TrafficSpec

REPO = Path(__file__).resolve().parents[2]
MIX = {"profile": "mix", "seed": 7, "mix": {"chat": 3, "long-doc": 1},
       "chat": {"turns": 2, "output_tokens": 16},
       "long-doc": {"min_doc_tokens": 300, "max_doc_tokens": 600, "output_tokens": 8}}


def test_a_mix_deals_conversations_by_weight_and_tags_each_request(tiny_counter,
                                                                   tmp_path: Path) -> None:
    plan = build_plan(TrafficSpec.model_validate(MIX), tiny_counter, 4096, 400)
    by_conversation: dict[int, set[str]] = {}
    for request in plan.requests:
        by_conversation.setdefault(request.conversation_id, set()).add(request.profile)
    assert all(len(parts) == 1 for parts in by_conversation.values())  # one part each
    # dealt, weight 1 of 4: conversations 0..n-1 hold n/4 long documents within one, every n
    long_docs = 0
    for n, conversation in enumerate(sorted(by_conversation), start=1):
        assert conversation == n - 1  # nothing rejected: the plan's conversations are 0..n-1
        long_docs += "long-doc" in by_conversation[conversation]
        assert abs(long_docs - n / 4) < 1, n
    for request in plan.requests:
        if request.profile == "long-doc":
            assert request.max_tokens == 8 and request.prompt_tokens >= 300
        else:
            assert request.max_tokens == 16 and request.messages[0]["role"] == "system"
    # a chat conversation of the mix is the chat profile's own conversation of that number
    chat_alone = build_plan(TrafficSpec.model_validate(
        {"profile": "chat", "seed": 7, "chat": MIX["chat"]}), tiny_counter, 4096, 800)
    alone = {(r.conversation_id, r.turn): r.messages for r in chat_alone.requests}
    mixed_chat = [r for r in plan.requests if r.profile == "chat"]
    assert mixed_chat and all(alone[(r.conversation_id, r.turn)] == r.messages
                              for r in mixed_chat if (r.conversation_id, r.turn) in alone)
    # prefixes, and the tags survive the plan file; the hash covers what is sent only
    shorter = build_plan(TrafficSpec.model_validate(MIX), tiny_counter, 4096, 100)
    assert shorter.requests == plan.requests[:100]
    write_plan(plan, tmp_path / "plan.parquet")
    assert read_plan(tmp_path / "plan.parquet").requests == plan.requests
    assert b"long-doc" not in b"".join(canonical_bytes(plan.requests))


def test_mix_settings_are_checked() -> None:
    with pytest.raises(ScenarioError, match="profile: mix draws from two or more profiles"):
        load_scenario("chat", ["traffic.profile=mix"])
    with pytest.raises(ScenarioError, match=r"traffic\.mix is for profile: mix"):
        load_scenario("chat", ["traffic.mix={chat: 1, long-doc: 1}"])
    with pytest.raises(ScenarioError, match=r"traffic\.mix"):
        load_scenario("chat", ["traffic.profile=mix", "traffic.mix={chat: 1, sharegpt: 1}"])
    with pytest.raises(ScenarioError, match="greater than 0"):
        load_scenario("chat", ["traffic.profile=mix", "traffic.mix={chat: 1, long-doc: 0}"])


def _rows(profile: str, ttft_s: float, itl_s: float, n: int, start: int) -> list[dict]:
    rows = []
    for k in range(n):
        offsets = [ttft_s + itl_s * j for j in range(8)]
        rows.append({"request_id": f"{profile}-{k}", "process_id": 1, "user_id": k,
                     "plan_index": start + k, "conversation_id": start + k, "turn": 0,
                     "phase": "measure", "endpoint": "chat",
                     "intended_send_unix_s": 1000.0 + 0.05 * k, "send_unix_s": 1000.0 + 0.05 * k,
                     "send_lag_s": 0.0, "ttft_s": ttft_s, "e2e_s": offsets[-1],
                     "chunk_offsets_s": offsets, "output_tokens": 8, "prompt_tokens": 10,
                     "max_tokens": 8, "status_code": 200, "ok": True, "status": "ok",
                     "profile": profile})
    return rows


def test_each_part_is_summarised_on_its_own_requests() -> None:
    rng = np.random.default_rng(3)
    rows = _rows("chat", 0.05, 0.01, 60, 0) + _rows("long-doc", 0.8, 0.02, 20, 100)
    order = rng.permutation(len(rows))
    table = pa.Table.from_pylist([rows[i] for i in order], schema=SAMPLE_SCHEMA)
    assert sorted(measured_profiles(table)) == ["chat", "long-doc"]
    parts = {name: summarize(part) for name, part in series_by_profile(table, 10.0).items()}
    assert parts["chat"].requests == 60 and parts["long-doc"].requests == 20
    assert parts["chat"].metrics["ttft"].percentiles[50].value == pytest.approx(0.05)
    assert parts["long-doc"].metrics["ttft"].percentiles[50].value == pytest.approx(0.8)
    assert parts["long-doc"].metrics["itl"].percentiles[50].value == pytest.approx(0.02)
    whole = summarize(run_series(table, 10.0))
    assert whole.requests == 80
    one_profile = pa.Table.from_pylist(_rows("chat", 0.05, 0.01, 10, 0), schema=SAMPLE_SCHEMA)
    assert series_by_profile(one_profile, 10.0) == {}


def test_a_mix_run_folder_reports_its_parts(tmp_path: Path, tiny_counter) -> None:
    """summary.json (schema-valid, `by_profile` only for a mix), report.html's section and
    the terminal lines, from a run folder written as the runner writes one."""
    import yaml

    from vllm_slo.reports.run_report import render_run
    from vllm_slo.run_folder.samples_format import SampleWriter

    scenario, _ = load_scenario("chat", ["traffic.profile=mix",
                                         "traffic.mix={chat: 3, long-doc: 1}",
                                         "traffic.duration=10s",
                                         'slo={by_profile: {chat: {itl: ["p99 < 15ms"]}}}'])
    run_dir = tmp_path / "mix-run"
    run_dir.mkdir()
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(scenario.to_yaml_dict()))
    writer = SampleWriter(run_dir / "samples" / "samples-host-1.arrows")
    for row in _rows("chat", 0.05, 0.01, 60, 0) + _rows("long-doc", 0.8, 0.02, 20, 100):
        writer.append(row)
    writer.close()
    rendered = render_run(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    jsonschema.validate(summary, json.loads(
        (REPO / "reports" / "schema" / "summary.schema.json").read_text()))
    assert list(summary["by_profile"]) == ["chat", "long-doc"]
    assert summary["by_profile"]["long-doc"]["requests"]["measured"] == 20
    html = (run_dir / "report.html").read_text()
    assert 'id="by-profile"' in html and "<h3>long-doc</h3>" in html
    assert "  long-doc: 20 requests, ttft p50/p99" in rendered.text
    (slo,) = summary["slos"]  # judged on the chat part's 60 requests only
    assert slo["profile"] == "chat" and slo["verdict"] == "PASS", slo
    assert "PASS         chat: itl p99 < 15ms" in rendered.text
    assert "chat: itl p99" in html


def test_a_parts_cell_is_compared_across_trials(tmp_path: Path) -> None:
    """`compare.cells: [chat:ttft.p50, long-doc:ttft.p50]`: each trial's value comes from its
    own part's rows; a change in the chat part only is found there and not in the other."""
    from tests.support.synthetic import write_experiment_from_rows
    from vllm_slo.reports.experiment_report import render_experiment

    scenario, _ = load_scenario("chat", [
        "traffic.profile=mix", "traffic.mix={chat: 3, long-doc: 1}", "traffic.duration=10s",
        'slo={by_profile: {chat: {ttft: ["p50 < 80ms"]}}}', "trials=5",
        "variants={a: {}, b: {}}",
        "compare.cells=[chat:ttft.p50, long-doc:ttft.p50, chat:output_throughput.mean]"])

    def rows_of_trial(name: str, rng: np.random.Generator) -> list[dict]:
        chat_ttft = (0.05 if name == "a" else 0.10) * rng.lognormal(0, 0.03)
        return (_rows("chat", chat_ttft, 0.01, 60, 0)
                + _rows("long-doc", 0.8 * rng.lognormal(0, 0.03), 0.02, 20, 100))

    root = write_experiment_from_rows(tmp_path / "mix-ab", scenario, rows_of_trial)
    summary = render_experiment(root).summary
    assert summary["invalid_reasons"] == [], summary["invalid_reasons"]
    jsonschema.validate(summary, json.loads(
        (REPO / "reports" / "schema" / "experiment-summary.schema.json").read_text()))
    (family,) = summary["comparisons"]
    cells = {cell["cell"]: cell for cell in family["cells"]}
    assert cells["chat:ttft.p50"]["significant"]
    assert cells["chat:ttft.p50"]["ratio"]["value"] == pytest.approx(2.0, rel=0.1)
    assert not cells["long-doc:ttft.p50"]["significant"]
    assert summary["variants"]["a"]["cells"]["chat:output_throughput.mean"]["value"] > 0
    assert "tok/s" in summary["benchstat"]
    # the chat part's SLO, decided between trials on each trial's chat rows (a: 50 ms, b: 100)
    verdicts = {name: [(e["profile"], e["verdict"]) for e in v["slos"]]
                for name, v in summary["variants"].items()}
    assert verdicts == {"a": [("chat", "PASS")], "b": [("chat", "FAIL")]}
    assert summary["variants"]["b"]["slos"][0]["basis"].startswith("part 'chat': 5 trials'")


def _mix_table() -> pa.Table:
    rows = _rows("chat", 0.05, 0.01, 60, 0) + _rows("long-doc", 0.8, 0.02, 20, 100)
    return pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)


def test_a_parts_slos_judge_its_own_requests_only() -> None:
    """`slo.by_profile`: chat's ITL rule is judged on chat's gaps (10 ms) although the whole
    run's gaps include long-doc's 20 ms; long-doc's TTFT rule on long-doc's 0.8 s; a part
    without measured requests leaves its rules INCONCLUSIVE."""
    from vllm_slo.analysis.verdicts import evaluate_slos

    scenario, _ = load_scenario("chat-long-doc-mix", [
        'slo={itl: ["p99 < 15ms"], by_profile: {chat: {itl: ["p99 < 15ms"]}, '
        'long-doc: {ttft: ["p50 < 500ms"]}}}'])
    table = _mix_table()
    series = run_series(table, 10.0)
    parts = {name: (part, summarize(part))
             for name, part in series_by_profile(table, 10.0).items()}
    results = evaluate_slos(scenario.slo.rules(), series, summarize(series), parts=parts)
    assert [(r.rule.label, r.verdict.value) for r in results] == [
        ("itl p99 < 15ms", "FAIL"),  # the whole run: a quarter of its gaps are long-doc's
        ("chat: itl p99 < 15ms", "PASS"),
        ("long-doc: ttft p50 < 500ms", "FAIL")]
    assert results[2].observed.value == pytest.approx(0.8)
    alone = evaluate_slos(scenario.slo.rules(), series, summarize(series), parts={})
    assert [r.verdict.value for r in alone[1:]] == ["INCONCLUSIVE", "INCONCLUSIVE"]
    assert alone[1].basis == "no measured requests of part 'chat'"
    # a mix whose window held chat requests only: chat's rule is still decided
    chat_rows = pa.Table.from_pylist(_rows("chat", 0.05, 0.01, 60, 0), schema=SAMPLE_SCHEMA)
    chat_series = run_series(chat_rows, 10.0)
    only_chat = {name: (part, summarize(part)) for name, part in
                 series_by_profile(chat_rows, 10.0, is_mix=True).items()}
    assert list(only_chat) == ["chat"]
    verdicts = evaluate_slos(scenario.slo.rules(), chat_series, summarize(chat_series),
                             parts=only_chat)
    assert [r.verdict.value for r in verdicts] == ["PASS", "PASS", "INCONCLUSIVE"]


def test_goodput_holds_each_part_to_its_own_rules() -> None:
    """A part's per-request rule (chat's TTFT < 100 ms) excludes that part's slow requests
    only: long-doc's 0.8 s TTFTs still count, unless the rule is the whole run's."""
    from vllm_slo.analysis.verdicts import goodput

    series = run_series(_mix_table(), 10.0)

    def rules(slo: str):
        return load_scenario("chat-long-doc-mix", [f"slo={slo}"])[0].slo.rules()

    everyone, _ = goodput(rules("{}"), series)
    per_part, described = goodput(rules('{by_profile: {chat: {ttft: ["p90 < 100ms"]}, '
                                        'long-doc: {ttft: ["p90 < 500ms"]}}}'), series)
    whole, _ = goodput(rules('{ttft: ["p90 < 100ms"]}'), series)
    assert per_part.value == pytest.approx(everyone.value * 60 / 80)  # long-doc's 20 out
    assert whole.value == pytest.approx(everyone.value * 60 / 80)
    chat_only, _ = goodput(rules('{by_profile: {chat: {ttft: ["p90 < 100ms"]}}}'), series)
    assert chat_only.value == pytest.approx(everyone.value)  # no long-doc request judged
    assert "chat ttft < 0.1s" in described and "long-doc ttft < 0.5s" in described


def test_a_parts_slo_must_name_a_part_of_the_mix() -> None:
    with pytest.raises(ScenarioError, match=r"slo\.by_profile\.chat: 'chat' is not a part"):
        load_scenario("chat", ['slo={by_profile: {chat: {itl: ["p99 < 50ms"]}}}'])
    with pytest.raises(ScenarioError, match=r"slo\.by_profile\.sharegpt"):
        load_scenario("chat-long-doc-mix", ['slo={by_profile: {sharegpt: {ttft: ["p50 < 1s"]}}}'])
    with pytest.raises(ScenarioError, match=r"slo\.by_profile\.chat\.itl"):
        load_scenario("chat-long-doc-mix", ['slo={by_profile: {chat: {itl: ["p99 <"]}}}'])
    with pytest.raises(ScenarioError, match=r"slo\.by_profile\.chat\.by_profile"):
        load_scenario("chat-long-doc-mix", ["slo={by_profile: {chat: {by_profile: {}}}}"])
