"""Rebuild an experiment's outputs (trials × variants) from its folder alone: the trials' own
folders (each already rendered) + the scenario -> summary.json (schema
reports/schema/experiment-summary.schema.json), report.html, junit.xml and summary.md
(render/experiment_ci.py: a CI step reads an A/B as it reads a run) and the text returned. The
same writer serves `vllm-slo compare` (saved_runs), whose summary comes from the same builder.

    vllm-slo report runs/<experiment>
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from vllm_slo.analysis.comparison import Group
from vllm_slo.analysis.experiment_design import Stopping, StopReason
from vllm_slo.analysis.experiment_summary import (
    ExperimentSummary,
    build_experiment_summary,
    pooled_series,
)
from vllm_slo.reports.render.experiment_ci import (
    render_experiment_junit,
    render_experiment_markdown,
)
from vllm_slo.reports.render.experiment_html import build_experiment_view, render_experiment_html
from vllm_slo.reports.render.experiment_text import (
    render_comparison_text,
    render_experiment_text,
)
from vllm_slo.reports.render.markdown import step_summary_warning
from vllm_slo.reports.render.tables import tables_text
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.reports.trial_folders import collect_trials, naming, read_scenario
from vllm_slo.run_folder.file_writes import OutputWriteError, write_atomic
from vllm_slo.run_folder.run_files import (
    JUNIT_FILE,
    REPORT_FILE,
    STOPPING_FILE,
    SUMMARY_FILE,
    SUMMARY_MD_FILE,
)
from vllm_slo.serialise import to_json


@dataclass(frozen=True, slots=True)
class WrittenExperiment:
    summary: dict[str, Any]  # summary.json's content as written
    summary_path: Path
    report_path: Path
    junit_path: Path | None = None
    markdown_path: Path | None = None
    step_summary_warning: str | None = None  # $GITHUB_STEP_SUMMARY could not be appended


def load_experiment(run_dir: Path, interrupted: bool = False
                    ) -> tuple[ExperimentSummary, list[Group]]:
    """Read an experiment folder and build its typed summary (nothing is written); a damaged
    scenario.yaml or stopping.json is a usage error naming it."""
    scenario = read_scenario(run_dir)
    stopping = read_stopping(run_dir)
    return build_experiment_summary(scenario, collect_trials(run_dir), run_dir.name,
                                    interrupted or (stopping is not None
                                                    and stopping.reason == "interrupted"),
                                    stopping)


def read_stopping(run_dir: Path) -> Stopping | None:
    """stopping.json (None where there is none: a fixed-count experiment of an older version,
    a comparison); damaged, a usage error naming it (resume and the report need what it
    says)."""
    path = run_dir / STOPPING_FILE
    if not path.is_file():
        return None
    with naming(path, "without it, --resume replays the rounds from the trials on disk (the "
                      "earlier sessions' time uncounted)"):
        stopping = Stopping.from_json_dict(json.loads(path.read_text()))
        if stopping.reason not in get_args(StopReason) or stopping.rounds < 0:
            raise ValueError(f"reason {stopping.reason!r}, rounds {stopping.rounds}: not a "
                             f"stopping record (reasons: {', '.join(get_args(StopReason))})")
    return stopping


def summary_document(summary: ExperimentSummary) -> dict[str, Any]:
    """summary.json's content: the summary's fields (`serialise.to_json`), its tables as the
    text they are laid out as (`benchstat`, one string: the benchstat table, then the
    decisions)."""
    document = to_json(summary)
    document["benchstat"] = tables_text(summary.benchstat)
    return document


def write_experiment(out_dir: Path, summary: ExperimentSummary, groups: Sequence[Group]
                     ) -> WrittenExperiment:
    """summary.json (the summary's one serialisation), report.html, junit.xml and summary.md
    into `out_dir`, each whole and never through a link (`file_writes.write_atomic`). A write
    that fails is an OutputWriteError naming the file and carrying the verdict; a
    $GITHUB_STEP_SUMMARY that cannot be appended is `step_summary_warning`."""
    document = summary_document(summary)
    # junit.xml and summary.md as a single run writes them: a CI gate reads an A/B the same way
    text = (render_comparison_text(summary) if summary.kind == "comparison"
            else render_experiment_text(summary))
    summary_path = out_dir / SUMMARY_FILE
    report_path = out_dir / REPORT_FILE
    junit_path = out_dir / JUNIT_FILE
    markdown_path = out_dir / SUMMARY_MD_FILE
    markdown = render_experiment_markdown(summary)
    try:
        write_atomic(summary_path, json.dumps(document, indent=2) + "\n")
        view = build_experiment_view(summary,
                                     {g.label: pooled_series(g.trials) for g in groups})
        write_atomic(report_path, render_experiment_html(view))
        write_atomic(junit_path, render_experiment_junit(summary, text))
        write_atomic(markdown_path, markdown)
    except OutputWriteError as error:
        raise error.with_verdict(text, int(document.get("exit_code", 0))) from None
    return WrittenExperiment(document, summary_path, report_path, junit_path, markdown_path,
                             step_summary_warning(markdown))


def render_experiment(run_dir: Path, interrupted: bool = False) -> RenderedRun:
    summary, groups = load_experiment(run_dir, interrupted)
    written = write_experiment(run_dir, summary, groups)
    text = render_experiment_text(summary)
    if written.step_summary_warning is not None:
        text += f"\nwarning: {written.step_summary_warning}"
    return RenderedRun(written.summary, text, written.report_path, written.summary_path,
                       written.junit_path, written.markdown_path)
