"""Rebuild every output of a run from its folder alone: samples + resolved scenario +
provenance + run status (+ server_metrics.jsonl when present) -> summary.json, report.html,
junit.xml, summary.md (appended to $GITHUB_STEP_SUMMARY when set), and the text table returned.
Credentials are redacted (reports.text.redact_secrets) from everything written.

    vllm-slo report runs/<id>
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from vllm_slo.reports.analysis.run_metrics import run_series, summarize
from vllm_slo.reports.analysis.summary import build_summary
from vllm_slo.reports.analysis.verdicts import (
    choose_exit_code,
    evaluate_slos,
    goodput,
    invalid_measurement_reasons,
)
from vllm_slo.reports.redaction import redact_secrets
from vllm_slo.reports.render.html import build_view, render_html
from vllm_slo.reports.render.junit import render_junit
from vllm_slo.reports.render.markdown import append_step_summary, render_markdown
from vllm_slo.reports.render.text import render_table
from vllm_slo.reports.samples import client_cpu_fractions, load_samples
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.run_files import (
    JUNIT_FILE,
    PROVENANCE_FILE,
    REPORT_FILE,
    SCENARIO_FILE,
    SERVER_METRICS_FILE,
    STATUS_FILE,
    SUMMARY_FILE,
    SUMMARY_MD_FILE,
)

INTERRUPTED_REASON = "the run was interrupted before its planned end"


@dataclass(frozen=True, slots=True)
class RenderedRun:
    summary: dict[str, Any]
    text: str
    report_path: Path
    summary_path: Path
    junit_path: Path | None = None
    markdown_path: Path | None = None


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def read_server_metrics(path: Path) -> list[dict[str, Any]]:
    """The /metrics scrapes, one JSON object a line; a torn or foreign line is skipped (the
    recorder may have died mid-write)."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def client_cpu_summary(fractions: list[float]) -> dict[str, float] | None:
    """Load-generator CPU per process-second, in % of one core (None before it was recorded)."""
    if not fractions:
        return None
    values = np.asarray(fractions) * 100.0
    return {"p50_percent": float(np.percentile(values, 50)),
            "p99_percent": float(np.percentile(values, 99)), "max_percent": float(values.max()),
            "samples": int(values.size)}


def render_run(run_dir: Path) -> RenderedRun:
    scenario_path = run_dir / SCENARIO_FILE
    if not scenario_path.is_file():
        raise ScenarioError(f"{run_dir} is not a vllm-slo run folder (no {SCENARIO_FILE})")
    scenario = Scenario.model_validate(yaml.safe_load(scenario_path.read_text()))
    provenance = redact_secrets(_read_json(run_dir / PROVENANCE_FILE))
    status = _read_json(run_dir / STATUS_FILE)
    table = load_samples(run_dir)
    series = run_series(table, scenario.traffic.duration_s)
    summary = summarize(series)
    slo_results = evaluate_slos(scenario.slo.rules(), series, summary)
    invalid = invalid_measurement_reasons(summary, status.get("server_failure"),
                                          status.get("load_generator_failure"),
                                          scenario.traffic.max_send_lag_p99_s)
    if status.get("interrupted"):
        invalid = (*invalid, INTERRUPTED_REASON)
    document = build_summary(
        run_id=run_dir.name, scenario=redact_secrets(scenario.to_yaml_dict()),
        provenance=provenance,
        summary=summary, slo_results=slo_results,
        exit_code=choose_exit_code(slo_results, invalid), invalid_reasons=invalid,
        goodput=goodput(scenario.slo.rules(), series),
        client_cpu=client_cpu_summary(client_cpu_fractions(run_dir)),
        warnings=status.get("warnings", []))
    summary_path = run_dir / SUMMARY_FILE
    summary_path.write_text(json.dumps(document, indent=2) + "\n")
    report_path = run_dir / REPORT_FILE
    view = build_view(document, series, table, read_server_metrics(run_dir / SERVER_METRICS_FILE))
    report_path.write_text(render_html(view), encoding="utf-8")
    junit_path = run_dir / JUNIT_FILE
    junit_path.write_text(render_junit(document), encoding="utf-8")
    markdown = render_markdown(document)
    markdown_path = run_dir / SUMMARY_MD_FILE
    markdown_path.write_text(markdown, encoding="utf-8")
    append_step_summary(markdown)
    return RenderedRun(document, render_table(document), report_path, summary_path,
                       junit_path, markdown_path)
