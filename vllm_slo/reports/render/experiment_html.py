"""The experiment and comparison page: an `ExperimentView` is built from the typed
`ExperimentSummary` (every string formatted, every decision made here), then the logic-free
template `experiment.html.j2` lays it out with the run report's environment, figure macro and
loader (`html.render_template`): Plotly specs travel as JSON in
`<script type="application/json">`, read with JSON.parse, and user text reaches the page only
through autoescape (or `figures.plot_text` inside Plotly labels)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vllm_slo.analysis.comparison import UNDECIDED_WITHIN_INSTANCE
from vllm_slo.analysis.experiment_summary import (
    CellComparisonEntry,
    ExperimentSummary,
    VariantEntry,
)
from vllm_slo.analysis.run_metrics import RunSeries
from vllm_slo.analysis.wording import (
    TABLE_LEGEND,
    TEST_TEXT,
    format_estimate,
    format_level,
    trial_values_text,
)
from vllm_slo.redaction import redact_secrets, redact_text
from vllm_slo.reports.render.experiment_text import cv_text, trials_text
from vllm_slo.reports.render.figures import (
    cell_axis,
    colour,
    latency_ecdf_figure,
    plot_text,
)
from vllm_slo.reports.render.html import FigureView, render_template
from vllm_slo.reports.render.plot_spec import Grid, Spec, figure, scatter, set_axis, spec_json
from vllm_slo.reports.render.plotly_bundle import plotly_js
from vllm_slo.reports.render.tables import tables_text
from vllm_slo.reports.render.text import (
    format_observed,
    format_threshold,
    outcome,
    scope_note,
    slo_name,
    verdict_counts,
)
from vllm_slo.run_folder.run_files import REPORT_FILE, TRIALS_DIR


@dataclass(frozen=True, slots=True)
class VariantSloRow:
    variant: str
    verdict: str
    verdict_class: str
    name: str  # "ttft p50"
    threshold: str  # "< 80.0ms"
    observed: str  # "55.1ms [52.0ms, 58.3ms]"
    basis: str


@dataclass(frozen=True, slots=True)
class VariantRow:
    name: str
    trials: str  # "4 of 4"
    server_args: str  # "block-size=32 enable-chunked-prefill=true", or "" (comparison)


@dataclass(frozen=True, slots=True)
class EstimateRow:
    variant: str
    cell: str
    estimate: str  # "2.31s [1.90s, 2.80s]"
    method: str
    trials: str  # "from trials 2.10s 2.50s"


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    pair: str  # "candidate vs baseline"
    cell: str
    verdict: str  # significant | ~ not significant | not testable | ?
    change: str  # "+4.1% [-9.0%, +18.7%]"
    level: str  # the interval's level: "99.2% (Holm step 1/6)"
    p: str  # "0.42 (unadjusted 0.07)"
    trials: str  # "5+5"
    notes: str  # footnote marks "[1][2]" into ExperimentView.comparison_notes
    decision: str = ""  # the design's decision at the last look, or "" (a comparison)


@dataclass(frozen=True, slots=True)
class PlanRow:
    cell: str
    cv: str
    effect: str
    trials: str
    notes: str


@dataclass(frozen=True, slots=True)
class TrialRow:
    position: str
    variant: str
    folder: str
    exit_code: str
    invalid: str
    report: str  # link to the trial's own report.html


@dataclass(frozen=True, slots=True)
class ExperimentView:
    title: str
    run_id: str
    description: str
    outcome: str  # PASS | FAIL | INCONCLUSIVE | INVALID, or "" for a comparison
    outcome_class: str
    headline: str  # "2 variants × 4 trials · 4 SLOs: 3 PASS, 1 FAIL"
    invalid_reasons: list[str]
    warnings: list[str]
    slo_rows: list[VariantSloRow]
    no_slo_note: str
    verdict_scope: str  # which variation the verdicts cover
    variants_title: str
    variant_rows: list[VariantRow]
    benchstat: str
    comparison_test: str  # the test of the compared cells (most of them: see their notes)
    comparison_legend: str
    comparison_rows: list[ComparisonRow]
    comparison_notes: list[str]
    estimate_rows: list[EstimateRow]
    figures: list[FigureView]
    plan_rows: list[PlanRow]
    no_plan_note: str
    trial_rows: list[TrialRow]
    differences: list[tuple[str, str]]
    scenario_title: str
    scenario_yaml: str
    plotly_js: str
    stopping: str = ""  # an experiment's rounds: why they ended ("" for a comparison)


def trial_dots_figure(variants: Sequence[VariantEntry], cells: Sequence[str]) -> str:
    """Per-trial values of each compared cell (valid trials), with the trial-level estimate
    (geometric mean, t interval on logs) and its 95% CI, one colour per variant."""
    columns = 3
    rows = max(1, -(-len(cells) // columns))
    grid = Grid(rows=rows, cols=columns, titles=tuple(plot_text(c) for c in cells))
    traces: list[Spec] = []
    layout: Spec = {"height": 320 * rows, "margin": {"l": 60, "r": 20, "t": 70, "b": 40},
                    "title": {"text": "Per-trial statistics (dots) with the trial-level "
                                      "estimate (geometric mean) and its 95% CI"}}
    for index, cell in enumerate(cells):
        row, col = index // columns + 1, index % columns + 1
        scale, unit = cell_axis(cell)
        for number, variant in enumerate(variants):
            label = plot_text(variant.label)
            values = [v * scale for v in variant.values(cell)]
            traces.append(scatter(
                [label] * len(values), values, grid, row, col, mode="markers",
                marker={"size": 8, "opacity": 0.7, "color": colour(number)},
                name=label, legendgroup=label, showlegend=index == 0))
            center = variant.cells[cell]
            if center.value is not None and center.ci_low is not None:
                high = center.ci_high if center.ci_high is not None else center.value
                traces.append(scatter(
                    [label], [center.value * scale], grid, row, col, mode="markers",
                    marker={"symbol": "line-ew-open", "size": 24, "color": "#222"},
                    error_y={"type": "data", "symmetric": False,
                             "array": [(high - center.value) * scale],
                             "arrayminus": [(center.value - center.ci_low) * scale]},
                    showlegend=False, hoverinfo="y"))
        set_axis(layout, grid.y(row, col), title=unit)
    return spec_json(figure(traces, layout, grid))


def _args_text(args: Mapping[str, Any] | None) -> str:
    if not args:
        return "" if args is None else "(none)"
    return " ".join(f"{key}={value if isinstance(value, str) else json.dumps(value)}"
                    for key, value in redact_secrets(dict(args)).items())


def _report_link(summary: ExperimentSummary, folder: str) -> str:
    """An experiment links its trial folders relatively; a comparison links each compared
    run folder's report by absolute path (the page lives elsewhere)."""
    if summary.kind == "experiment":
        return f"{TRIALS_DIR}/{folder}/{REPORT_FILE}"
    return Path(os.path.abspath(folder), REPORT_FILE).as_uri()


def _trial_rows(summary: ExperimentSummary) -> list[TrialRow]:
    """Every trial; an experiment's in execution order."""
    rows = [(trial.position, TrialRow(
                str(trial.position), variant.label, trial.folder, str(trial.exit_code),
                redact_text("; ".join(trial.invalid_reasons)),
                _report_link(summary, trial.folder)))
            for variant in summary.variants for trial in variant.trials]
    if summary.kind == "experiment":
        rows.sort(key=lambda item: item[0])
    return [row for _, row in rows]


def _verdict(cell: CellComparisonEntry) -> str:
    if not cell.decides:
        return UNDECIDED_WITHIN_INSTANCE
    if cell.p_adjusted is None:
        return "?"
    if not cell.testable:
        return "not testable"
    return "significant" if cell.significant else "~ not significant"


def _comparison_rows(summary: ExperimentSummary) -> tuple[list[ComparisonRow], list[str]]:
    """One row per pair and cell, and the warnings they mark (numbered once, as in the text
    table)."""
    rows = []
    notes: list[str] = []
    for pair in summary.comparisons:
        judgement = f"{pair.candidate} vs {pair.baseline}: {pair.judgement}"
        if pair.judgement and judgement not in notes:
            notes.append(judgement)  # the test, Holm family and unit, as gate prints them
        for cell in pair.cells:
            verdict = _verdict(cell)
            widest = cell.ratio_range or cell.shift_range
            if cell.testable:
                adjustment = ("unadjusted" if cell.holm_factor == 1 and cell.family_size == 1
                              else f"alpha / {cell.holm_factor}, Holm over "
                                   f"{cell.family_size}")
                level = f"{format_level(cell.interval_confidence)} ({adjustment})"
            elif widest is not None:
                level = (f"{format_level(widest.confidence)}: widest possible (needs "
                         f"{format_level(cell.interval_confidence)})")
            else:
                level = "no interval possible"
            p = "n/a" if cell.p_adjusted is None else f"{cell.p_adjusted:.2g}"
            if cell.p_value is not None and cell.p_adjusted != cell.p_value:
                p += f" (unadjusted {cell.p_value:.2g})"
            marks = f"[{notes.index(judgement) + 1}]" if pair.judgement else ""
            for warning in cell.warnings:
                if warning not in notes:
                    notes.append(warning)
                marks += f"[{notes.index(warning) + 1}]"
            rows.append(ComparisonRow(
                f"{pair.candidate} vs {pair.baseline}", cell.cell, verdict,
                cell.change, level, p, f"{cell.n_baseline}+{cell.n_candidate}", marks,
                "" if cell.decision is None else cell.decision.text))
    return rows, [redact_text(note) for note in notes]


def _estimate_rows(summary: ExperimentSummary) -> list[EstimateRow]:
    return [EstimateRow(variant.label, cell,
                        format_estimate(cell, estimate.value, estimate.ci_low, estimate.ci_high),
                        estimate.method, trial_values_text(cell, variant.values(cell)))
            for variant in summary.variants for cell, estimate in variant.cells.items()]


def _headline(summary: ExperimentSummary) -> str:
    groups = len(summary.variants)
    if summary.kind == "comparison":
        return f"{groups} runs compared (the first is the baseline)"
    slos = [slo for variant in summary.variants for slo in variant.slos]
    return (f"{groups} variant{'s' if groups != 1 else ''} × {summary.trials_per_variant} "
            f"trial{'s' if summary.trials_per_variant != 1 else ''} · {verdict_counts(slos)}")


def _comparison_test(summary: ExperimentSummary) -> str:
    """The test most compared cells used (`Welch t on log per-trial values (ratio of geometric
    means)`); a cell that fell back to the rank test says so in its notes."""
    tests: list[str] = [cell.test for pair in summary.comparisons for cell in pair.cells]
    return TEST_TEXT[max(TEST_TEXT, key=tests.count) if tests else "mann-whitney"]


def build_experiment_view(summary: ExperimentSummary, pooled: Mapping[str, RunSeries]
                          ) -> ExperimentView:
    """The page as values. `pooled` maps each variant's label to its valid trials' measured
    requests pooled (for the latency distributions)."""
    comparison = summary.kind == "comparison"
    verdict = "" if comparison else outcome(
        summary.exit_code, sum(len(v.slos) for v in summary.variants))
    figures = [
        FigureView("fig-trials", "Per-trial statistics",
                   trial_dots_figure(summary.variants, summary.cells)),
        FigureView("fig-ecdf", "Latency distributions (all trials pooled)",
                   latency_ecdf_figure(pooled)),
    ]
    comparison_rows, comparison_notes = _comparison_rows(summary)
    return ExperimentView(
        title=(f"vllm-slo {'comparison' if comparison else 'experiment'} · "
               f"{summary.scenario_name}"),
        run_id=summary.run_id, description=redact_text(summary.description),
        outcome=verdict, outcome_class=verdict.lower(), headline=_headline(summary),
        invalid_reasons=[redact_text(r) for r in summary.invalid_reasons],
        warnings=[redact_text(w) for w in summary.warnings],
        slo_rows=[VariantSloRow(variant.label, slo.verdict.value, slo.verdict.value.lower(),
                                slo_name(slo), format_threshold(slo), format_observed(slo),
                                redact_text(slo.basis))
                  for variant in summary.variants for slo in variant.slos],
        verdict_scope=scope_note([slo for variant in summary.variants
                                  for slo in variant.slos]),
        no_slo_note=("Saved runs are compared, not judged: no SLO verdicts here (each run's "
                     "own report has its verdicts)." if comparison
                     else "No variant has a valid trial to decide its SLOs on, or the "
                          "scenario declares none."),
        variants_title="Compared runs (the first is the baseline)" if comparison
        else "Variants",
        variant_rows=[VariantRow(variant.label,
                                 f"{variant.valid_trials} of {len(variant.trials)}",
                                 _args_text(variant.server_args))
                      for variant in summary.variants],
        benchstat=tables_text(summary.benchstat), comparison_test=_comparison_test(summary),
        comparison_legend=" ".join(TABLE_LEGEND),
        comparison_rows=comparison_rows, comparison_notes=comparison_notes,
        estimate_rows=_estimate_rows(summary),
        figures=figures,
        plan_rows=[PlanRow(plan.cell, cv_text(plan), f"{plan.effect:.0%}", trials_text(plan),
                           "; ".join(plan.warnings))
                   for plan in summary.planning],
        no_plan_note="Planning needs at least 2 valid trials per variant (the trial-to-trial "
                     "variation is measured from them).",
        trial_rows=_trial_rows(summary),
        differences=[(key, json.dumps(values))
                     for key, values in summary.provenance_differences.items()],
        scenario_title="Scenario of the baseline run, with the compared cells" if comparison
        else "Scenario",
        scenario_yaml=yaml.safe_dump(dict(summary.scenario), sort_keys=False,
                                     allow_unicode=True),
        plotly_js=plotly_js(),
        stopping="" if summary.stopping is None else summary.stopping.text)


def render_experiment_html(view: ExperimentView) -> str:
    return render_template("experiment.html.j2", view)
