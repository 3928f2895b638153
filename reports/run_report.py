"""Rebuild every output of a run from its folder alone: samples + resolved scenario +
provenance + run status -> summary.json, report.html (and the text table returned).

    vllm-slo report runs/<id>
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from reports.html import build_view, render_html
from reports.metrics import run_series, summarize
from reports.samples import load_samples
from reports.summary import build_summary
from reports.text import render_table
from reports.verdicts import choose_exit_code, evaluate_slos, invalid_measurement_reasons
from scenarios.errors import ScenarioError
from scenarios.model import Scenario
from scenarios.run_files import (
    PROVENANCE_FILE,
    REPORT_FILE,
    SCENARIO_FILE,
    STATUS_FILE,
    SUMMARY_FILE,
)


@dataclass(frozen=True, slots=True)
class RenderedRun:
    summary: dict[str, Any]
    text: str
    report_path: Path
    summary_path: Path


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def render_run(run_dir: Path) -> RenderedRun:
    scenario_path = run_dir / SCENARIO_FILE
    if not scenario_path.is_file():
        raise ScenarioError(f"{run_dir} is not a vllm-slo run folder (no {SCENARIO_FILE})")
    scenario_yaml = scenario_path.read_text()
    scenario = Scenario.model_validate(yaml.safe_load(scenario_yaml))
    provenance = _read_json(run_dir / PROVENANCE_FILE)
    status = _read_json(run_dir / STATUS_FILE)
    table = load_samples(run_dir)
    series = run_series(table, scenario.traffic.duration_s)
    summary = summarize(series)
    slo_results = evaluate_slos(scenario.slo.rules(), series, summary)
    invalid = invalid_measurement_reasons(summary, status.get("server_failure"),
                                          status.get("load_generator_failure"))
    if status.get("interrupted"):
        invalid = (*invalid, "the run was interrupted before its planned end")
    document = build_summary(
        run_id=run_dir.name, scenario=scenario.to_yaml_dict(), provenance=provenance,
        summary=summary, slo_results=slo_results,
        exit_code=choose_exit_code(slo_results, invalid), invalid_reasons=invalid,
        warnings=status.get("warnings", []))
    summary_path = run_dir / SUMMARY_FILE
    summary_path.write_text(json.dumps(document, indent=2) + "\n")
    report_path = run_dir / REPORT_FILE
    report_path.write_text(render_html(build_view(document, series, table, scenario_yaml)))
    return RenderedRun(document, render_table(document), report_path, summary_path)
