"""A tune's outputs from its results: the candidates that started as an experiment
(scenario.yaml, summary.json, report.html: per-candidate SLO verdicts, comparisons, every
trial), then tune.json (ranking, Pareto front, searches, recommendation), tune.html, the
recommended server config (vLLM --config YAML) and command line, and the text printed. Split
like the run and experiment pages: decisions in analysis/tuning.py, the summary and tune.json
in analysis/tune_summary.py, the page in render/tune_html.py, the text in render/tune_text.py;
this module writes the files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from vllm_slo.analysis.tune_summary import TuneResult, build_tune_summary
from vllm_slo.redaction import redact_secrets
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.reports.render.tune_html import TuneView, build_tune_view, render_tune_html
from vllm_slo.reports.render.tune_text import render_tune_text
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.run_folder.file_writes import write_atomic
from vllm_slo.run_folder.run_files import (
    RECOMMENDED_COMMAND_FILE,
    RECOMMENDED_CONFIG_FILE,
    SCENARIO_FILE,
    TRIALS_DIR,
    TUNE_REPORT_FILE,
    TUNE_SUMMARY_FILE,
)
from vllm_slo.serialise import to_json


def build_tune(result: TuneResult, experiment_report: bool = False
               ) -> tuple[dict[str, Any], str, TuneView]:
    """tune.json's content (secrets redacted), the text printed at the end and the HTML view
    (linking the candidates' experiment report when `experiment_report`)."""
    summary = build_tune_summary(result)
    document: dict[str, Any] = redact_secrets(to_json(summary))
    return (document, render_tune_text(summary),
            build_tune_view(summary, experiment_report))


def _experiment_scenario(result: TuneResult) -> dict[str, Any] | None:
    """The candidates that started as an experiment's variants; None when none did."""
    started = [c for c in result.candidates if c.started and
               (c.objective_values or c.invalid_trials)]
    if not started:
        return None
    document = result.scenario.to_yaml_dict()
    document.pop("tune")
    document["trials"] = result.trials_per_candidate
    cells = document["compare"]["cells"]
    document["compare"]["cells"] = list(dict.fromkeys(
        [*cells, result.throughput_cell, result.latency_cell]))
    document["variants"] = {c.name: {"server": {"args": dict(c.changed)},
                                     "description": c.origin} for c in started}
    return document


def write_tune(run_dir: Path, result: TuneResult) -> RenderedRun:
    """Every tune output into `run_dir`; the RenderedRun's summary is tune.json's content."""
    experiment = _experiment_scenario(result)
    with_experiment = experiment is not None and (run_dir / TRIALS_DIR).is_dir()
    if with_experiment:
        write_atomic(run_dir / SCENARIO_FILE, yaml.safe_dump(redact_secrets(experiment),
                                                             sort_keys=False))
        render_experiment(run_dir, interrupted=result.interrupted)
    document, text, view = build_tune(result, with_experiment)
    summary_path = run_dir / TUNE_SUMMARY_FILE
    write_atomic(summary_path, json.dumps(document, indent=2) + "\n")
    report_path = run_dir / TUNE_REPORT_FILE
    write_atomic(report_path, render_tune_html(view))
    recommended = document["recommended"]
    for name in (RECOMMENDED_CONFIG_FILE, RECOMMENDED_COMMAND_FILE):
        (run_dir / name).unlink(missing_ok=True)
    if recommended:
        write_atomic(
            run_dir / RECOMMENDED_CONFIG_FILE,
            f"# vllm-slo tune {result.run_id}: candidate {recommended['candidate']} "
            f"({recommended['note']})\n# vllm serve {result.model} --config "
            f"{RECOMMENDED_CONFIG_FILE}\n"
            + yaml.safe_dump(recommended["args"], sort_keys=False))
        write_atomic(run_dir / RECOMMENDED_COMMAND_FILE, recommended["command"] + "\n")
    return RenderedRun(document, text, report_path, summary_path)
