"""Rebuild every output of a run from its folder alone: samples + resolved scenario +
provenance + run status (+ server_metrics.jsonl when present) -> summary.json, report.html,
junit.xml, summary.md (appended to $GITHUB_STEP_SUMMARY when set), and the text table returned.
The folder is read once (`run_folder_read.read_run_folder`), analysed once into the typed
summary document (`analysis/run_analysis.py`), serialised once into summary.json, and every
renderer reads the typed document. Credentials are redacted (reports.redaction) from
everything written.

    vllm-slo report runs/<id>
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_slo.analysis.run_analysis import LoadedRun, analyse_run
from vllm_slo.analysis.verdicts import INTERRUPTED_REASON
from vllm_slo.reports.render.html import build_view, render_html
from vllm_slo.reports.render.junit import render_junit
from vllm_slo.reports.render.markdown import render_markdown, step_summary_warning
from vllm_slo.reports.render.text import render_table
from vllm_slo.reports.run_folder_read import read_run_folder
from vllm_slo.run_folder.file_writes import OutputWriteError, write_atomic
from vllm_slo.run_folder.run_files import (
    JUNIT_FILE,
    REPORT_FILE,
    SUMMARY_FILE,
    SUMMARY_MD_FILE,
)
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.serialise import to_json


@dataclass(frozen=True, slots=True)
class RenderedRun:
    """What a render wrote. `summary` is summary.json's content as written (the document's
    one serialisation, for callers that want the machine-readable form)."""

    summary: dict[str, Any]
    text: str
    report_path: Path
    summary_path: Path
    junit_path: Path | None = None
    markdown_path: Path | None = None

    @property
    def exit_code(self) -> ExitCode:
        """The verdict the summary states (a run's, an experiment's or a tune's)."""
        return ExitCode(self.summary["exit_code"])

    @property
    def interrupted(self) -> bool:
        """Stopped before its planned end (Ctrl-C, SIGTERM): not a verdict to keep."""
        return INTERRUPTED_REASON in self.summary.get("invalid_reasons", ())

    @property
    def slo_count(self) -> int:
        """The SLOs judged: a run's, or those of every variant of an experiment."""
        variants = self.summary.get("variants")
        if isinstance(variants, dict):
            return sum(len(variant["slos"]) for variant in variants.values())
        return len(self.summary.get("slos", ()))


def load_run(run_dir: Path) -> LoadedRun:
    """Read a run folder and build its typed summary document (nothing is written). A
    damaged samples.parquet is read from the streams, a damaged provenance.json left out (a
    warning each); a damaged run_status.json makes the run invalid (how it ended is unknown);
    a damaged scenario.yaml is a ScenarioError naming it."""
    return analyse_run(read_run_folder(run_dir))


def render_run(run_dir: Path) -> RenderedRun:
    """Every output of a run folder, from the folder alone, each written whole and never
    through a link (`file_writes.write_atomic`). A write that fails is an OutputWriteError
    naming the file and carrying the verdict; a $GITHUB_STEP_SUMMARY that cannot be appended
    is a warning at the end of the text."""
    loaded = load_run(run_dir)
    document = loaded.document
    summary = to_json(document)
    text = render_table(document)
    summary_path = run_dir / SUMMARY_FILE
    report_path = run_dir / REPORT_FILE
    junit_path = run_dir / JUNIT_FILE
    markdown_path = run_dir / SUMMARY_MD_FILE
    markdown = render_markdown(document)
    try:
        write_atomic(summary_path, json.dumps(summary, indent=2) + "\n")
        view = build_view(document, loaded.series, loaded.table, loaded.server_records)
        write_atomic(report_path, render_html(view))
        write_atomic(junit_path, render_junit(document))
        write_atomic(markdown_path, markdown)
    except OutputWriteError as error:
        raise error.with_verdict(text, int(document.exit_code)) from None
    warning = step_summary_warning(markdown)
    if warning is not None:
        text += f"\nwarning: {warning}"
    return RenderedRun(summary, text, report_path, summary_path, junit_path, markdown_path)
