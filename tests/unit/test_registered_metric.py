"""Issue 23: adding a rate SLO is one module. tests/support/send_rate.py registers `send_rate`
(requests sent per second, from data every run already holds) and nothing else is edited: a
scenario's `slo:` takes it, by its grammar, with errors as precise as a built-in's; a run is
judged on it (verdict, exit code, summary.json, report, terminal); trials and comparisons read
its cell; unregistered, the key is refused again."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import jsonschema
import numpy as np
import pyarrow as pa
import pytest

from vllm_slo.analysis.run_metrics import RunSeries, summarize
from vllm_slo.analysis.trials import cell_value
from vllm_slo.analysis.verdicts import Verdict, evaluate_slos
from vllm_slo.analysis.wording import format_cell_value
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.experiment_spec import CompareSpec
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.metrics import METRICS, register_metric, unregister_metric

REPO = Path(__file__).resolve().parents[2]
MODULE = "tests.support.send_rate"
WINDOW_S = 10.0
SENT_PER_S = 4.0  # the synthetic runs below send one request every 1 / SENT_PER_S seconds


@pytest.fixture
def send_rate() -> Iterator[ModuleType]:
    """The module imported afresh (its import registers the metric), unregistered after."""
    sys.modules.pop(MODULE, None)
    module = importlib.import_module(MODULE)
    try:
        yield module
    finally:
        unregister_metric("send_rate")
        sys.modules.pop(MODULE, None)


def _series(sent_per_s: float) -> RunSeries:
    """A 10 s window in which requests are sent at `sent_per_s` and all succeed."""
    sends = 1000.0 + np.arange(0.0, WINDOW_S, 1.0 / sent_per_s)
    n = sends.size
    latencies = np.full(n, 0.2)
    return RunSeries(
        ttft_s=latencies / 4, itl_s=np.full(n, 0.01), tpot_s=np.full(n, 0.01), e2e_s=latencies,
        send_lag_s=np.zeros(n), window_start_unix_s=1000.0, window_s=WINDOW_S, requests=n,
        failed=0, output_tokens_per_bin=np.full(10, 8.0 * sent_per_s),
        completions_per_bin=np.full(10, sent_per_s), measured_ok=np.ones(n, dtype=bool),
        measured_send_unix_s=sends, rate_span_s=WINDOW_S, bin_widths_s=np.ones(10))


def test_a_scenario_takes_the_registered_rate_slo(send_rate: ModuleType) -> None:
    scenario, _ = load_scenario("chat", ['slo={send_rate: ">= 3 req/s", ttft: ["p95 < 2s"]}'])
    rules = {rule.metric: rule for rule in scenario.slo.rules()}
    assert (rules["send_rate"].comparator, rules["send_rate"].threshold) == (">=", 3.0)
    assert rules["send_rate"].cell == "send_rate.mean"
    assert scenario.slo.written("send_rate") == (">= 3 req/s",)
    # a part of a mix may have it too, and compare.cells accepts its cell
    mixed, _ = load_scenario("chat", ["traffic.profile=mix", "traffic.mix={chat: 1, long-doc: 1}",
                                      'slo={by_profile: {chat: {send_rate: "> 1 req/s"}}}'])
    assert [r.cell for r in mixed.slo.rules()] == ["chat:send_rate.mean"]
    assert CompareSpec(cells=["send_rate.mean"]).cells == ["send_rate.mean"]
    # the resolved scenario writes it back as it was written, and reads it again
    document = scenario.to_yaml_dict()
    assert document["slo"]["send_rate"] == ">= 3 req/s"
    assert scenario.model_validate(document) == scenario


@pytest.mark.parametrize(("override", "message"), [
    ('slo={send_rate: "> 3 tok/s"}', "slo.send_rate = '> 3 tok/s': expected '> N req/s'"),
    ('slo={send_rate: ["> 3 req/s"]}',
     "slo.send_rate = ['> 3 req/s']: Input should be a valid string"),  # as error_rate's
    ('slo={by_profile: {chat: {send_rate: "about 3"}}}',
     "slo.by_profile.chat.send_rate = 'about 3': expected '> N req/s'"),
    ("compare.cells=[send_rate.p50]", "send_rate takes mean, got 'p50' (e.g. send_rate.mean)"),
])
def test_its_errors_are_as_precise_as_a_built_ins(send_rate: ModuleType, override: str,
                                                  message: str) -> None:
    overrides = [override]
    if "by_profile" in override:
        overrides += ["traffic.profile=mix", "traffic.mix={chat: 1, long-doc: 1}"]
    with pytest.raises(ScenarioError) as raised:
        load_scenario("chat", overrides)
    assert message in str(raised.value)


def test_unregistered_it_is_an_unknown_key_again(send_rate: ModuleType) -> None:
    unregister_metric("send_rate")
    with pytest.raises(ScenarioError) as raised:
        load_scenario("chat", ['slo={send_rate: ">= 3 req/s"}'])
    assert ("slo.send_rate = '>= 3 req/s': unknown key; allowed keys here: ttft, itl, tpot, "
            "e2e, itl_token, ttft_answer, reasoning_time, error_rate, output_throughput, "
            "request_throughput, session_e2e, by_profile"
            ) in str(raised.value)
    with pytest.raises(ValueError, match="built-in"):
        unregister_metric("ttft")


def test_registration_refuses_a_taken_name_and_a_latency(send_rate: ModuleType) -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_metric(send_rate.SEND_RATE)
    with pytest.raises(ValueError, match="register_metric adds rate metrics"):
        register_metric(METRICS["ttft"].__class__(
            "queue_s", METRICS["ttft"].kind, "Queue", "", True, lambda run: run.ttft_s, "",
            "request"))


def test_the_rate_slo_is_judged_on_a_run(send_rate: ModuleType) -> None:
    scenario, _ = load_scenario("chat", ['slo={send_rate: ">= 3 req/s"}'])
    strict, _ = load_scenario("chat", ['slo={send_rate: ">= 6 req/s"}'])
    series = _series(SENT_PER_S)
    summary = summarize(series)
    (met,) = evaluate_slos(scenario.slo.rules(), series, summary)
    (missed,) = evaluate_slos(strict.slo.rules(), series, summary)
    assert met.observed.value == pytest.approx(SENT_PER_S)
    assert met.verdict is Verdict.PASS and missed.verdict is Verdict.FAIL
    assert met.observed.method == summary.requests_per_s.method  # the built-in rates' CI
    # a trial's cell and its printed value
    assert cell_value(series, "send_rate.mean") == pytest.approx(SENT_PER_S)
    assert cell_value(_series(2 * SENT_PER_S), "send_rate.mean") == pytest.approx(
        2 * SENT_PER_S)
    assert format_cell_value("send_rate.mean", SENT_PER_S) == f"{SENT_PER_S:,.1f} req/s"


def test_a_run_folder_reports_the_rate_slo(send_rate: ModuleType, tmp_path: Path) -> None:
    """summary.json (schema-valid), the terminal and report.html carry its verdict, and the
    exit code follows it, from a run folder written as the runner writes one."""
    from tests.support.synthetic import scenario_document, write_run_folder
    from vllm_slo.reports.run_report import render_run
    from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA

    rows = []
    for k in range(int(WINDOW_S * SENT_PER_S)):
        sent = 1000.0 + k / SENT_PER_S
        offsets = [0.05 + 0.01 * j for j in range(8)]
        rows.append({"request_id": f"r{k}", "process_id": 1, "user_id": k, "plan_index": k,
                     "conversation_id": k, "turn": 0, "phase": "measure", "endpoint": "chat",
                     "intended_send_unix_s": sent, "send_unix_s": sent, "send_lag_s": 0.0,
                     "ttft_s": offsets[0], "e2e_s": offsets[-1], "chunk_offsets_s": offsets,
                     "output_tokens": 8, "prompt_tokens": 10, "max_tokens": 8,
                     "status_code": 200, "ok": True, "status": "ok"})
    run_dir = write_run_folder(
        tmp_path / "run", pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA),
        scenario_document("send-rate", duration_s=WINDOW_S, warmup_s=0.0,
                          slo={"send_rate": ">= 6 req/s"}))
    rendered = render_run(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    jsonschema.validate(summary, json.loads(
        (REPO / "reports" / "schema" / "summary.schema.json").read_text()))
    (slo,) = summary["slos"]
    assert (slo["metric"], slo["statistic"], slo["verdict"]) == ("send_rate", "mean", "FAIL")
    assert slo["observed"]["value"] == pytest.approx(SENT_PER_S)
    assert summary["exit_code"] == 1, summary.get("invalid_reasons")  # an SLO failed
    assert "send_rate >= 6 req/s" in rendered.text
    assert "send_rate" in (run_dir / "report.html").read_text()
