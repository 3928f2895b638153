"""LoRA mixes (issue 27.3): `server.lora` loads adapters, `traffic.lora` splits conversations
across the base model and the adapters by weight, each row carries its name, and summaries,
SLOs and goodput are per adapter as `slo.by_profile` is per part of a mix."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pytest
import yaml

from tests.support.synthetic import write_experiment_from_rows
from vllm_slo.analysis.run_metrics import (
    measured_adapters,
    run_parts,
    run_series,
    series_by_adapter,
    summarize,
)
from vllm_slo.analysis.verdicts import evaluate_slos, goodput
from vllm_slo.loadtests.lora_split import LoraSplit, request_model, unserved_names
from vllm_slo.loadtests.plan import PlannedRequest, build_plan
from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA, SampleWriter
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.profile_specs import ChatSpec
from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.servers.tiny_lora import adapter_config, module_shapes, name_seed
from vllm_slo.servers.vllm_server import lora_engine_args, plan_launch

REPO = Path(__file__).resolve().parents[2]
LORA = ['server.lora={adapters: {sql: tiny, chat: tiny}}',
        'traffic.lora={base: 2, sql: 1, chat: 1}']


# ----------------------------------------------------------------------------- the split
def _requests(profiles: list[str], turns: int = 2) -> list[PlannedRequest]:
    """A plan's requests, conversation-major: conversation c of part profiles[c]."""
    return [PlannedRequest(c * turns + t, c, t, (), 10, 4, part)
            for c, part in enumerate(profiles) for t in range(turns)]


def test_the_split_deals_each_conversation_by_weight_and_keeps_it() -> None:
    weights = {"base": 2, "sql": 1, "chat": 1}
    requests = _requests(["chat"] * 8000)
    split = LoraSplit(weights, requests)
    names = [split.name_for(c) for c in range(8000)]
    # dealt: every leading part of the plan within one conversation of the weights
    counts = Counter[str]()
    for n, name in enumerate(names, start=1):
        counts[name] += 1
        for key, weight in weights.items():
            assert abs(counts[key] - n * weight / 4) < 1, (n, key)
    assert counts == {"base": 4000, "sql": 2000, "chat": 2000}
    # deterministic, from the plan alone: a second split (another process) agrees; a plan
    # that cycles or repeats a conversation keeps its name
    again = LoraSplit(weights, [*requests, *requests[:10]])
    assert [again.name_for(c) for c in reversed(range(8000))] == names[::-1]
    # each part of a mix dealt on its own: alternating parts do not go in step with a 1:1 split
    mixed = LoraSplit({"base": 1, "sql": 1}, _requests(["chat", "long-doc"] * 100))
    for parity in (0, 1):
        assert Counter(mixed.name_for(c) for c in range(parity, 200, 2)) == {"base": 50,
                                                                             "sql": 50}


def test_the_shipped_chat_scenario_splits_52_conversations_2_to_1(tiny_counter) -> None:
    """Issue 42's measurement: `scenario=chat` with traffic.lora={base: 2, sql: 1} sent 26
    conversations to each name (a draw); dealt, 52 conversations are 35 : 17 or 34 : 18, and
    the split leaves the plan (and its sha256) as it was."""
    split_overrides = ["server.lora={adapters: {sql: tiny}}", "traffic.lora={base: 2, sql: 1}"]
    scenario, _ = load_scenario("chat", split_overrides)
    plain, _ = load_scenario("chat", [])
    turns = scenario.traffic.settings(ChatSpec).turns
    plan = build_plan(scenario.traffic, tiny_counter, 2048, 52 * turns)
    assert build_plan(plain.traffic, tiny_counter, 2048, 52 * turns).sha256 == plan.sha256
    conversations = list(dict.fromkeys(r.conversation_id for r in plan.requests))
    assert len(conversations) == 52
    split = LoraSplit(scenario.traffic.lora, plan.requests)
    for n in range(1, 53):
        base = sum(split.name_for(c) == "base" for c in conversations[:n])
        assert abs(base - 2 * n / 3) < 1, n
    assert Counter(split.name_for(c) for c in conversations) in (
        {"base": 35, "sql": 17}, {"base": 34, "sql": 18})
    # every turn of a conversation names one model
    assert len({(r.conversation_id, split.name_for(r.conversation_id))
                for r in plan.requests}) == 52


def test_only_positive_weights_and_the_model_field() -> None:
    with pytest.raises(ValueError):
        LoraSplit({"base": 1, "sql": 0}, _requests(["chat"]))
    one = LoraSplit({"sql": 1}, _requests(["chat"] * 50))
    assert {one.name_for(c) for c in range(50)} == {"sql"}
    assert request_model("base", "tiny") == "tiny"
    assert request_model(None, "tiny") == "tiny"
    assert request_model("sql", "tiny") == "sql"
    # attach mode: names the server does not list are refused before any traffic
    assert unserved_names({"base": 1, "sql": 1, "code": 1}, ("tiny", "sql")) == ["code"]
    assert unserved_names({"base": 1}, ("tiny",)) == []


# ---------------------------------------------------------------------------- the model
def test_the_scenario_ties_traffic_and_slos_to_the_loaded_adapters() -> None:
    scenario, _ = load_scenario("chat", [*LORA, 'slo={by_adapter: {sql: {ttft: ["p95 < 1s"]}}}'])
    assert scenario.server.lora is not None and scenario.server.lora.batch_loras == 2
    assert [rule.label for rule in scenario.slo.rules()] == ["adapter:sql: ttft p95 < 1s"]
    assert scenario.slo.rules()[0].cell == "adapter:sql:ttft.p95"
    document = scenario.to_yaml_dict()
    assert document["traffic"]["lora"] == {"base": 2, "sql": 1, "chat": 1}
    assert Scenario.model_validate(document) == scenario  # the run folder's copy reads back
    plain = load_scenario("chat", [])[0].to_yaml_dict()  # nothing new without LoRA
    assert "lora" not in plain["server"] and "lora" not in plain["traffic"]
    assert "by_adapter" not in plain["slo"]
    refused = {
        "an adapter not loaded": ['traffic.lora={base: 1, sql: 1}'],
        "base as an adapter name": ['server.lora={adapters: {base: tiny}}'],
        "flags twice": [*LORA, "server.args.max-loras=2"],
        "a rank vLLM refuses": ['server.lora={adapters: {sql: tiny}, max_rank: 4}'],
        "more loras than adapters": ['server.lora={adapters: {sql: tiny}, max_loras: 2}'],
        "an SLO of no adapter": [*LORA, 'slo={by_adapter: {code: {ttft: ["p95 < 1s"]}}}'],
        "everything to base": ['traffic.lora={base: 1}'],
        "loading into an attached server": ['server.url=http://127.0.0.1:9',
                                            'server.lora={adapters: {sql: tiny}}'],
    }
    for why, overrides in refused.items():
        with pytest.raises(ScenarioError):
            load_scenario("chat", overrides)
            pytest.fail(why)
    # attached: the running server's adapters are its own; traffic names them freely
    attached, _ = load_scenario("chat", ["server.url=http://127.0.0.1:9",
                                         "traffic.lora={base: 1, sql: 1}"])
    assert attached.traffic.lora == {"base": 1, "sql": 1}


def test_the_launch_loads_the_adapters_and_records_them() -> None:
    spec = ServerSpec.model_validate({"lora": {"adapters": {"sql": "tiny", "chat": "/a/chat"},
                                               "max_rank": 16, "max_loras": 1}})
    plan = plan_launch(spec, "cpu", "/models/tiny", 8000,
                       lora_paths={"sql": "/cache/sql", "chat": "/a/chat"})
    argv = list(plan.argv)
    at = argv.index("--lora-modules")
    assert argv[at + 1:at + 3] == ["sql=/cache/sql", "chat=/a/chat"]
    assert "--enable-lora" in argv
    assert argv[argv.index("--max-lora-rank") + 1] == "16"
    assert argv[argv.index("--max-loras") + 1] == "1"
    recorded = plan.to_dict()  # provenance.json's launch
    assert recorded["lora_adapters"]["sql"] == {"source": "tiny", "path": "/cache/sql"}
    assert recorded["engine_args"]["lora-modules"] == ["sql=/cache/sql", "chat=/a/chat"]
    assert "lora_adapters" not in plan_launch(ServerSpec(), "cpu", "/m", 8000).to_dict()
    # unresolved (the parser check): the sources as written
    assert lora_engine_args(spec.lora, dict(spec.lora.adapters))["lora-modules"] == [
        "sql=tiny", "chat=/a/chat"] if spec.lora else False


def test_tiny_adapters_fit_the_tiny_model() -> None:
    config = json.loads(json.dumps({"hidden_size": 256, "num_attention_heads": 4,
                                    "num_key_value_heads": 2, "head_dim": 64}))
    assert module_shapes(config) == {"q_proj": (256, 256), "k_proj": (256, 128),
                                     "v_proj": (256, 128), "o_proj": (256, 256)}
    peft = adapter_config(8, "/models/tiny")
    assert peft["r"] == 8 and peft["peft_type"] == "LORA"
    assert set(peft["target_modules"]) == set(module_shapes(config))
    assert name_seed("sql") != name_seed("chat") and name_seed("sql") == name_seed("sql")


# ------------------------------------------------------------------------- the analysis
def _rows(adapter: str | None, ttft_s: float, n: int, start: int, phase: str = "measure",
          every: int = 1) -> list[dict]:
    """n rows from slot `start` on, one each `every` slots of 50 ms."""
    rows = []
    for k in range(n):
        offsets = [ttft_s + 0.01 * j for j in range(8)]
        t = 1000.0 + 0.05 * (start + k * every)
        slot = start + k * every
        rows.append({"request_id": f"{adapter}-{slot}", "process_id": 1, "user_id": k,
                     "plan_index": slot, "conversation_id": slot, "turn": 0,
                     "phase": phase, "endpoint": "chat", "intended_send_unix_s": t,
                     "send_unix_s": t, "send_lag_s": 0.0, "ttft_s": ttft_s,
                     "e2e_s": offsets[-1], "chunk_offsets_s": offsets, "output_tokens": 8,
                     "prompt_tokens": 10, "max_tokens": 8, "status_code": 200, "ok": True,
                     "status": "ok", "profile": "chat", "adapter": adapter})
    return rows


def _lora_rows() -> list[dict]:
    # interleaved in time (slots base, sql, base, chat, ...): base 0.1 s, sql 0.6 s, chat 0.2 s
    return (_rows("base", 0.1, 30, 0, every=4) + _rows("base", 0.1, 30, 2, every=4)
            + _rows("sql", 0.6, 30, 1, every=4) + _rows("chat", 0.2, 30, 3, every=4))


def test_each_adapter_is_summarised_and_judged_on_its_own_requests() -> None:
    table = pa.Table.from_pylist(_lora_rows(), schema=SAMPLE_SCHEMA)
    by_name = {name: summarize(s) for name, s in series_by_adapter(table, 10.0).items()}
    assert {name: s.requests for name, s in by_name.items()} == {
        "base": 60, "sql": 30, "chat": 30}
    assert by_name["sql"].metrics["ttft"].percentiles[50].value == pytest.approx(0.6)
    assert by_name["base"].metrics["ttft"].percentiles[50].value == pytest.approx(0.1)
    parts = {key: (s, summarize(s)) for key, s in run_parts(table, 10.0, is_lora=True).items()}
    assert sorted(parts) == ["adapter:base", "adapter:chat", "adapter:sql"]
    scenario, _ = load_scenario("chat", [*LORA, 'slo={ttft: ["p50 < 500ms"], by_adapter: '
                                         '{sql: {ttft: ["p50 < 500ms"]}, '
                                         'base: {ttft: ["p50 < 500ms"]}}}'])
    series = run_series(table, 10.0)
    results = evaluate_slos(scenario.slo.rules(), series, summarize(series), parts=parts)
    assert [(r.rule.label, r.verdict.value) for r in results] == [
        ("ttft p50 < 500ms", "PASS"),  # the whole run: 90 of 120 below
        ("adapter:sql: ttft p50 < 500ms", "FAIL"),
        ("adapter:base: ttft p50 < 500ms", "PASS")]
    assert results[1].observed.value == pytest.approx(0.6)
    # goodput: sql's rule excludes sql's slow requests only
    everyone, _ = goodput((), series)
    per_adapter, described = goodput(
        load_scenario("chat", [*LORA, 'slo={by_adapter: {sql: {ttft: ["p90 < 500ms"]}}}'])[0]
        .slo.rules(), series, measured_adapter=measured_adapters(table))
    assert per_adapter.value == pytest.approx(everyone.value * 90 / 120)
    assert "adapter:sql ttft < 0.5s" in described
    # one name only in the window, but a declared split: still a part of its own
    base_only = pa.Table.from_pylist(_rows("base", 0.1, 20, 0), schema=SAMPLE_SCHEMA)
    assert list(series_by_adapter(base_only, 10.0, is_lora=True)) == ["base"]
    assert series_by_adapter(base_only, 10.0) == {}
    no_column = base_only.drop_columns(["adapter"])
    assert list(measured_adapters(no_column)) == [""] * 20


def test_a_lora_run_folder_reports_each_adapter(tmp_path: Path) -> None:
    """summary.json (schema-valid, `by_adapter` only for a LoRA mix), report.html's section
    and the terminal lines, from a run folder written as the runner writes one."""
    from vllm_slo.reports.run_report import render_run

    scenario, _ = load_scenario("chat", [*LORA, "traffic.duration=10s", "traffic.warmup=2s",
                                         'slo={by_adapter: {sql: {ttft: ["p50 < 500ms"]}, '
                                         'chat: {ttft: ["p99 < 2x warmup"]}}}'])
    run_dir = tmp_path / "lora-run"
    run_dir.mkdir()
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(scenario.to_yaml_dict()))
    writer = SampleWriter(run_dir / "samples" / "samples-host-1.arrows")
    for row in (_rows("chat", 0.05, 10, -40, "warmup") + _rows("base", 5.0, 10, -20, "warmup")
                + _lora_rows()):
        writer.append(row)
    writer.close()
    rendered = render_run(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    jsonschema.validate(summary, json.loads(
        (REPO / "reports" / "schema" / "summary.schema.json").read_text()))
    assert "by_profile" not in summary
    assert summary["by_adapter"]["sql"]["requests"]["measured"] == 30
    assert set(summary["by_adapter"]) == {"base", "sql", "chat"}
    slos = {slo["adapter"]: slo for slo in summary["slos"]}
    assert slos["sql"]["verdict"] == "FAIL"
    # chat's warm-up rule sized from chat's own warm-up rows (50 ms), not base's 5 s
    assert slos["chat"]["threshold"] == pytest.approx(0.1)
    assert slos["chat"]["verdict"] == "FAIL"  # chat's measured 0.2 s > 2 x 50 ms
    html = (run_dir / "report.html").read_text()
    assert 'id="by-adapter"' in html and "<h3>sql</h3>" in html
    assert "  adapter sql: 30 requests, ttft p50/p99" in rendered.text
    assert "FAIL         adapter:sql: ttft p50 < 500ms" in rendered.text


def test_an_adapters_slo_is_decided_across_trials(tmp_path: Path) -> None:
    """`slo.by_adapter` in an experiment: each trial's value from that adapter's rows only
    (a: sql at 0.3 s, b: sql at 0.7 s; base at 0.1 s in both), decided between trials."""
    from vllm_slo.reports.experiment_report import render_experiment

    scenario, _ = load_scenario("chat", [*LORA, "traffic.duration=10s", "trials=4",
                                         "variants={a: {}, b: {}}",
                                         'slo={by_adapter: {sql: {ttft: ["p50 < 500ms"]}}}'])

    def rows_of_trial(name: str, rng: np.random.Generator) -> list[dict]:
        sql_ttft = (0.3 if name == "a" else 0.7) * rng.lognormal(0, 0.03)
        return _rows("base", 0.1, 60, 0, every=2) + _rows("sql", sql_ttft, 60, 1, every=2)

    root = write_experiment_from_rows(tmp_path / "lora-ab", scenario, rows_of_trial)
    summary = render_experiment(root).summary
    assert summary["invalid_reasons"] == [], summary["invalid_reasons"]
    jsonschema.validate(summary, json.loads(
        (REPO / "reports" / "schema" / "experiment-summary.schema.json").read_text()))
    verdicts = {name: [(e.get("adapter"), e["verdict"]) for e in v["slos"]]
                for name, v in summary["variants"].items()}
    assert verdicts == {"a": [("sql", "PASS")], "b": [("sql", "FAIL")]}
    assert summary["variants"]["b"]["slos"][0]["basis"].startswith(
        "part 'adapter:sql': 4 trials'")
    cell = summary["variants"]["b"]["cells"]["adapter:sql:ttft.p50"]
    assert cell["value"] == pytest.approx(0.7, rel=0.1)


def test_adapter_sources_resolve_without_building(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A local PEFT folder is loaded from its absolute path, a model id as written; `tiny`
    needs a local model folder with a config.json (a model id has none: said, not guessed)."""
    from vllm_slo.scenarios.errors import ServerError
    from vllm_slo.scenarios.lora import LoraSpec
    from vllm_slo.servers.tiny_lora import ensure_tiny_loras
    from vllm_slo.servers.vllm_server import resolve_lora_paths

    (tmp_path / "chat-lora").mkdir()
    monkeypatch.chdir(tmp_path)
    lora = LoraSpec(adapters={"chat": "chat-lora", "hub": "org/some-lora"})
    assert resolve_lora_paths(lora, "/models/tiny") == {
        "chat": str(tmp_path / "chat-lora"), "hub": "org/some-lora"}
    with pytest.raises(ServerError, match=r"config\.json"):
        ensure_tiny_loras(tmp_path / "no-model", ["sql"], 8)
