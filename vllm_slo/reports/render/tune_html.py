"""tune.html's view from a tune's summary: the ranking, the searches, every candidate, the
Pareto figure and the recommendation, laid out for the template (reports/templates/
tune.html.j2, no logic in it)."""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from vllm_slo.analysis.tune_summary import (
    TuneSummary,
    args_text,
    gain_text,
    versus_text,
)
from vllm_slo.analysis.tuning import median_or_nan
from vllm_slo.analysis.wording import format_cell_value
from vllm_slo.redaction import redact_secrets
from vllm_slo.reports.render.figures import pareto_figure
from vllm_slo.reports.render.html import FigureView, render_template
from vllm_slo.reports.render.plotly_bundle import plotly_js
from vllm_slo.run_folder.run_files import REPORT_FILE

OBJECTIVE_NAMES = {"goodput": "goodput (requests/s meeting every per-request latency SLO)",
                   "output_throughput": "output tokens/s",
                   "request_throughput": "requests/s"}
OUTCOMES = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}  # any other exit code: INVALID


@dataclass(frozen=True, slots=True)
class RankRow:
    rank: str
    name: str
    objective: str
    versus_best: str  # "-12.0% [-30.1%, +5.2%], p=0.67"
    standing: str
    slo: str
    changed: str


@dataclass(frozen=True, slots=True)
class CandidateRow:
    name: str
    origin: str
    changed: str
    trials: str  # "2 valid of 2", "did not start (2)"
    objective_trials: str
    throughput: str
    latency: str
    preemptions: str
    problems: str


@dataclass(frozen=True, slots=True)
class SearchRow:
    index: str
    arg: str
    values: str  # "512 → 1024 → 2048 (c04 c05 c06)"
    stop: str
    boundary: str


@dataclass(frozen=True, slots=True)
class TuneView:
    title: str
    run_id: str
    description: str
    outcome: str
    outcome_class: str
    headline: str
    warnings: list[str]
    recommended: str  # "c03: max-num-seqs=8", or why there is none
    recommended_note: str
    gain: str  # the recommendation over the scenario's own args, "" when they did not run
    command: str
    objective: str
    rank_rows: list[RankRow]
    search_rows: list[SearchRow]
    candidate_rows: list[CandidateRow]
    figures: list[FigureView]
    pareto_note: str
    experiment_report: str  # link to the candidates' experiment report, or ""
    scenario_yaml: str
    plotly_js: str


def rank_rows(summary: TuneSummary) -> list[RankRow]:
    cell = summary.objective_cell
    by_name = {c.name: c for c in summary.result.candidates}
    return [RankRow(str(e.rank), e.name, format_cell_value(cell, e.median),
                    versus_text(cell, e), e.standing, by_name[e.name].slo_verdict,
                    args_text(dict(by_name[e.name].changed)))
            for e in summary.ranking.entries]


def search_rows(summary: TuneSummary) -> list[SearchRow]:
    return [SearchRow(
        str(s.index), s.arg,
        " → ".join(f"{v} ({n})" for v, n in zip(s.values, s.candidates, strict=False)),
        s.stop, "none" if s.boundary is None else f"{s.boundary} ({s.boundary_candidate})")
        for s in summary.result.searches]


def headline(summary: TuneSummary) -> str:
    result = summary.result
    assert result.scenario.tune is not None
    compare = result.scenario.compare
    return (f"{len(result.candidates)} candidate(s) × {result.trials_per_candidate} trial(s) · "
            f"objective {result.scenario.tune.objective} · vs best: {compare.test}, Holm, "
            f"alpha {compare.alpha:g}")


def build_tune_view(summary: TuneSummary, experiment_report: bool = False) -> TuneView:
    """The page's view (linking the candidates' experiment report when `experiment_report`)."""
    result, best = summary.result, summary.best
    spec = result.scenario.tune
    assert spec is not None
    cell = summary.objective_cell
    candidate_rows = [CandidateRow(
        c.name, c.origin, args_text(dict(c.changed)),
        f"did not start ({len(c.start_failures)})" if c.start_failures else
        f"{len(c.objective_values)} valid of {len(c.objective_values) + c.invalid_trials}",
        " ".join(format_cell_value(cell, v) for v in c.objective_values) or "n/a",
        format_cell_value(result.throughput_cell, median_or_nan(c.throughput_values)),
        format_cell_value(result.latency_cell, median_or_nan(c.latency_values)),
        "not exported" if c.preemptions is None else f"{c.preemptions:g}",
        " | ".join(f.splitlines()[0][:300] for f in c.start_failures))
        for c in result.candidates]
    outcome = OUTCOMES.get(int(summary.exit_code), "INVALID")
    recommended = (f"{best.name}: {args_text(dict(best.changed))}" if best is not None else
                   "none: no candidate started, ran valid trials and met its SLOs")
    figures = [FigureView("fig-pareto", "Pareto front",
                          pareto_figure(summary.points, summary.front, result.latency_cell,
                                        result.throughput_cell))] if summary.points else []
    return TuneView(
        title=f"Tune: {result.scenario.name}", run_id=result.run_id,
        description=result.scenario.description, outcome=outcome,
        outcome_class=outcome.lower(), headline=headline(summary), warnings=summary.warnings,
        recommended=recommended, recommended_note=summary.note,
        gain="" if summary.gain is None else gain_text(summary.gain),
        command=summary.command,
        objective=OBJECTIVE_NAMES[spec.objective], rank_rows=rank_rows(summary),
        search_rows=search_rows(summary), candidate_rows=candidate_rows, figures=figures,
        pareto_note=(f"on the front ({result.throughput_cell} up, {result.latency_cell} down): "
                     f"{', '.join(summary.front) or 'none'}"),
        experiment_report=REPORT_FILE if experiment_report else "",
        scenario_yaml=yaml.safe_dump(redact_secrets(result.scenario.to_yaml_dict()),
                                     sort_keys=False),
        plotly_js=plotly_js())


def render_tune_html(view: TuneView) -> str:
    return render_template("tune.html.j2", view)
