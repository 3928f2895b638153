"""Rebuild an experiment's outputs (trials × variants) from its folder alone: the trials' own
folders (each already rendered) + the scenario -> summary.json (schema
reports/schema/experiment-summary.schema.json), report.html and the text returned. The same
writer serves `vllm-slo compare` (saved_runs), whose summary comes from the same builder.

    vllm-slo report runs/<experiment>
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vllm_slo.reports.analysis.comparison import Group
from vllm_slo.reports.analysis.experiment_summary import (
    ExperimentSummary,
    build_experiment_summary,
    pooled_series,
)
from vllm_slo.reports.render.experiment_html import build_experiment_view, render_experiment_html
from vllm_slo.reports.render.experiment_text import render_experiment_text
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.reports.trial_folders import collect_trials
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.run_files import REPORT_FILE, SCENARIO_FILE, SUMMARY_FILE


@dataclass(frozen=True, slots=True)
class WrittenExperiment:
    summary: dict[str, Any]  # summary.json's content as written
    summary_path: Path
    report_path: Path


def load_experiment(run_dir: Path, interrupted: bool = False
                    ) -> tuple[ExperimentSummary, list[Group]]:
    """Read an experiment folder and build its typed summary (nothing is written)."""
    scenario = Scenario.model_validate(yaml.safe_load((run_dir / SCENARIO_FILE).read_text()))
    return build_experiment_summary(scenario, collect_trials(run_dir), run_dir.name,
                                    interrupted)


def write_experiment(out_dir: Path, summary: ExperimentSummary, groups: Sequence[Group]
                     ) -> WrittenExperiment:
    """summary.json (the summary's one serialisation) and report.html into `out_dir`."""
    document = summary.to_json_dict()
    summary_path = out_dir / SUMMARY_FILE
    summary_path.write_text(json.dumps(document, indent=2) + "\n")
    view = build_experiment_view(summary, {g.label: pooled_series(g.trials) for g in groups})
    report_path = out_dir / REPORT_FILE
    report_path.write_text(render_experiment_html(view), encoding="utf-8")
    return WrittenExperiment(document, summary_path, report_path)


def render_experiment(run_dir: Path, interrupted: bool = False) -> RenderedRun:
    summary, groups = load_experiment(run_dir, interrupted)
    written = write_experiment(run_dir, summary, groups)
    return RenderedRun(written.summary, render_experiment_text(summary), written.report_path,
                       written.summary_path)
