"""The machine-readable outputs of a run (summary.json against its schema, junit.xml,
summary.md and $GITHUB_STEP_SUMMARY) on synthetic run folders rendered by the real pipeline."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from tests.support import synthetic as synthesis
from vllm_slo.reports.run_report import render_run

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "reports" / "schema" / "summary.schema.json").read_text())





SLOS = {"ttft": ["p95 < 500ms", "p50 < 20ms"], "itl": ["p99 < 200ms"],
        "e2e": ["p99.9 < 1h"], "error_rate": "< 1%", "output_throughput": "> 10 tok/s"}


def make_run(tmp_path: Path, name: str = "20270115T120000Z-synthetic", *, n: int = 1500,
             slo: dict | None = None, status: dict | None = None,
             failure_fraction: float = 0.03, server: bool = True, **kwargs) -> Path:
    table = synthesis.synthetic_table(n, chunks=8, warmup_s=5.0, duration_s=30.0,
                                      failure_fraction=failure_fraction, seed=3)
    scenario = synthesis.scenario_document("synthetic", duration_s=30.0, warmup_s=5.0,
                                           slo=SLOS if slo is None else slo, **kwargs)
    return synthesis.write_run_folder(
        tmp_path / name, table, scenario, status=status,
        server_records=synthesis.synthetic_server_records(35.0) if server else None)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory):
    return render_run(make_run(tmp_path_factory.mktemp("outputs")))


def test_the_schema_is_valid_json_schema_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_summary_json_validates_against_its_schema(rendered) -> None:
    document = json.loads(rendered.summary_path.read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert document == rendered.summary
    verdicts = {s["text"]: s["verdict"] for s in document["slos"]}
    # the synthetic run was built so that each verdict occurs
    assert verdicts["p95 < 500ms"] == "PASS" and verdicts["p50 < 20ms"] == "FAIL"
    assert verdicts["p99.9 < 1h"] == "INCONCLUSIVE"  # too few samples for p99.9 (tail rule)


def test_schema_rejects_what_it_does_not_document(rendered) -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    undocumented = {**rendered.summary, "surprise": 1}
    assert not validator.is_valid(undocumented)
    broken = json.loads(json.dumps(rendered.summary))
    broken["metrics"]["ttft"]["percentiles"]["p95"]["value"] = "fast"
    assert not validator.is_valid(broken)
    broken = json.loads(json.dumps(rendered.summary))
    broken["slos"][0]["verdict"] = "MAYBE"
    assert not validator.is_valid(broken)


def test_summary_of_an_empty_invalid_run_validates(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, failure_fraction=1.0, status={
        "server_failure": "EngineCore died\ntraceback...", "load_generator_failure": None,
        "interrupted": True, "warnings": ["prefix cache not reset"]})
    result = render_run(run_dir)
    jsonschema.Draft202012Validator(SCHEMA).validate(result.summary)
    assert result.summary["exit_code"] == 4
    assert result.summary["metrics"]["ttft"]["percentiles"]["p50"]["value"] is None


def _junit(path: Path) -> ET.Element:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    return root


def test_junit_one_testcase_per_slo_with_observed_vs_threshold(rendered) -> None:
    root = _junit(rendered.junit_path)
    suite = root.find("testsuite")
    assert suite is not None and suite.get("name") == "vllm-slo.synthetic"
    cases = suite.findall("testcase")
    slos = rendered.summary["slos"]
    assert [c.get("name") for c in cases] == (
        ["measurement is valid"] + [f"{s['metric']} {s['text']}" for s in slos])
    by_name = {c.get("name"): c for c in cases}
    failure = by_name["ttft p50 < 20ms"].find("failure")
    assert failure is not None
    assert failure.get("message", "").startswith("observed ")
    assert "vs threshold < 20.0ms" in failure.get("message", "")
    skipped = by_name["e2e p99.9 < 1h"].find("skipped")
    assert skipped is not None and skipped.get("message", "").startswith("INCONCLUSIVE: ")
    passed = by_name["ttft p95 < 500ms"]  # a pass: only the scope property, no outcome element
    assert [child.tag for child in passed] == ["properties"]
    assert {p.get("name"): p.get("value") for p in passed.iter("property")} == {
        "verdict_scope": "within-instance"}
    assert "restart-to-restart variation not included" in failure.text
    counts = {k: int(suite.get(k, "-1")) for k in ("tests", "failures", "errors", "skipped")}
    verdicts = [s["verdict"] for s in slos]
    assert counts == {"tests": len(slos) + 1, "failures": verdicts.count("FAIL"), "errors": 0,
                      "skipped": verdicts.count("INCONCLUSIVE")}
    assert {p.get("name"): p.get("value") for p in suite.iter("property")}["exit_code"] == "1"
    system_out = suite.find("system-out")
    assert system_out is not None and "outcome FAIL" in (system_out.text or "")


def test_junit_invalid_measurement_is_an_error_everywhere(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, status={
        "server_failure": "EngineCore died", "load_generator_failure": None,
        "interrupted": False, "warnings": []})
    suite = _junit(render_run(run_dir).junit_path).find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert all(c.find("error") is not None for c in cases)
    assert all(c.find("failure") is None and c.find("skipped") is None for c in cases)
    validity = cases[0].find("error")
    assert validity is not None and "server failed during the run" in validity.get("message", "")
    assert int(suite.get("errors", "0")) == len(cases)


def test_junit_survives_control_characters_and_markup(tmp_path: Path) -> None:
    import dataclasses

    from vllm_slo.reports.render.junit import render_junit
    from vllm_slo.reports.run_report import load_run

    document = load_run(make_run(tmp_path)).document
    slos = list(document.slos)
    slos[1] = dataclasses.replace(
        slos[1], basis="bell \x07 and <b>markup</b> & \"quotes\" \x1b[31m")
    text = render_junit(dataclasses.replace(document, slos=tuple(slos)))
    case = ET.fromstring(text).find("testsuite/testcase[3]/failure")
    assert case is not None
    assert "<b>markup</b> & \"quotes\"" in (case.text or "")
    assert "\x07" not in text and "\x1b" not in text


def test_summary_md_table_and_step_summary(rendered, tmp_path: Path, monkeypatch) -> None:
    from vllm_slo.reports.render.markdown import append_step_summary

    markdown = rendered.markdown_path.read_text()
    lines = markdown.splitlines()
    assert lines[0] == "### vllm-slo · synthetic: **FAIL**"
    assert "| verdict | SLO | threshold | observed [95% CI] |" in lines
    assert any(line.startswith("| **FAIL** | ttft p50 | < 20.0ms | ") for line in lines)
    assert "| metric | count | mean | p50 | p95 | p99 |" in lines
    target = tmp_path / "step_summary.md"
    target.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    assert append_step_summary(markdown) == target
    assert target.read_text() == "earlier step\n" + markdown + "\n"
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    assert append_step_summary(markdown) is None


def test_render_run_appends_to_github_step_summary(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "summary-of-steps.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    result = render_run(make_run(tmp_path))
    assert result.markdown_path is not None
    assert target.read_text() == result.markdown_path.read_text() + "\n"


def test_markdown_escapes_user_text() -> None:
    from vllm_slo.reports.render.markdown import escape

    assert escape("<script>alert(1)</script>") == "&lt;script&gt;alert\\(1\\)&lt;/script&gt;"
    assert escape("a | b\nc") == "a \\| b c"
    assert escape("[x](javascript:alert(1))") == "\\[x\\]\\(javascript:alert\\(1\\)\\)"
