"""A tune's outputs from its results: the candidates that started as an experiment
(scenario.yaml, summary.json, report.html: per-candidate SLO verdicts, comparisons, every
trial), then tune.json (ranking, Pareto front, searches, recommendation), tune.html, the
recommended server config (vLLM --config YAML) and command line, and the text printed.
Decisions come from vllm_slo/reports/analysis/tuning.py; this module formats and writes.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import yaml

from vllm_slo.reports.analysis.comparison import format_cell_value, format_change_interval
from vllm_slo.reports.analysis.tuning import (
    CandidateResult,
    RankEntry,
    Ranking,
    SearchFinding,
    median_or_nan,
    pareto_front,
    rank_candidates,
)
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.reports.redaction import redact_secrets
from vllm_slo.reports.render.figures import figure_json, plot_text
from vllm_slo.reports.render.html import FigureView, render_template
from vllm_slo.reports.render.plotly_bundle import plotly_js
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.run_files import (
    RECOMMENDED_COMMAND_FILE,
    RECOMMENDED_CONFIG_FILE,
    REPORT_FILE,
    SCENARIO_FILE,
    TRIALS_DIR,
    TUNE_REPORT_FILE,
    TUNE_SUMMARY_FILE,
)
from vllm_slo.scenarios.server_configs import engine_args_to_argv

TUNE_SCHEMA_VERSION = 1
OBJECTIVE_CELLS = {  # how each objective's numbers are formatted
    "goodput": "request_throughput.mean",
    "output_throughput": "output_throughput.mean",
    "request_throughput": "request_throughput.mean",
}
OBJECTIVE_NAMES = {"goodput": "goodput (requests/s meeting every per-request latency SLO)",
                   "output_throughput": "output tokens/s",
                   "request_throughput": "requests/s"}


@dataclass(frozen=True, slots=True)
class TuneResult:
    scenario: Scenario  # as given, tune section included
    run_id: str
    trials_per_candidate: int
    candidates: Sequence[CandidateResult]  # in the order they were first needed
    searches: Sequence[SearchFinding]
    latency_cell: str  # the Pareto front's latency axis
    throughput_cell: str
    interrupted: bool
    model: str  # the model argument of `vllm serve` in the recommended command


def _args_text(args: dict[str, Any]) -> str:
    return " ".join(f"{flag}={value}" for flag, value in args.items()) or "as given"


def recommended_command(model: str, args: dict[str, Any]) -> str:
    return shlex.join(["vllm", "serve", model, *engine_args_to_argv(dict(args))])


def tune_exit_code(ranking: Ranking, candidates: Sequence[CandidateResult],
                   interrupted: bool) -> ExitCode:
    """4 when interrupted or nothing valid ran; with a recommendation its SLO verdict (PASS,
    or no SLO: 0; INCONCLUSIVE: 3); 1 when every candidate that ran failed an SLO."""
    if interrupted:
        return ExitCode.INVALID_MEASUREMENT
    if ranking.best is not None:
        best = next(c for c in candidates if c.name == ranking.best)
        return ExitCode.INCONCLUSIVE if best.slo_verdict == "INCONCLUSIVE" else ExitCode.PASS
    if any(c.slo_verdict == "FAIL" for c in candidates):
        return ExitCode.SLO_FAILED
    return ExitCode.INVALID_MEASUREMENT


def _ratio_json(entry: RankEntry) -> dict[str, Any] | None:
    if entry.versus_best is None:
        return None
    ratio = entry.versus_best.ratio
    return {"value": ratio.value, "ci_low": ratio.ci_low, "ci_high": ratio.ci_high,
            "confidence": entry.versus_best.interval_confidence,
            "p_adjusted": entry.versus_best.p_adjusted,
            "significant": entry.versus_best.significant,
            "testable": entry.versus_best.testable}


def _versus_text(cell: str, entry: RankEntry) -> str:
    if entry.versus_best is None:
        return "" if entry.eligible else "n/a"
    comparison = entry.versus_best
    p = "" if comparison.p_adjusted is None else f", p={comparison.p_adjusted:.2g}"
    return f"{format_change_interval(cell, comparison)}{p}"


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


def pareto_figure(candidates: Sequence[CandidateResult], front: Sequence[str],
                  latency_cell: str, throughput_cell: str) -> str:
    """Each started candidate's median throughput against its median latency; the front as a
    line through its points."""
    figure = go.Figure()
    points = [(c.name, median_or_nan(c.throughput_values), median_or_nan(c.latency_values))
              for c in candidates if c.throughput_values and c.latency_values]
    scale = 1.0 if latency_cell.startswith(("output", "request", "error")) else 1000.0
    figure.add_trace(go.Scatter(
        x=[p[1] for p in points], y=[p[2] * scale for p in points], mode="markers+text",
        text=[plot_text(p[0]) for p in points], textposition="top center", name="candidates",
        marker={"size": 10, "color": "#888"}))
    by_name = {p[0]: p for p in points}
    on_front = [by_name[name] for name in front if name in by_name]
    figure.add_trace(go.Scatter(
        x=[p[1] for p in on_front], y=[p[2] * scale for p in on_front], mode="lines+markers",
        name="Pareto front", marker={"size": 12, "color": "#1f77b4"}))
    figure.update_layout(template="plotly_white", height=420,
                         xaxis_title=f"{throughput_cell} (tok/s), median over trials",
                         yaxis_title=f"{latency_cell} ({'ms' if scale > 1 else ''}), median "
                                     "over trials",
                         margin={"t": 30})
    return figure_json(figure)


def build_tune(result: TuneResult, experiment_report: bool = False
               ) -> tuple[dict[str, Any], str, TuneView]:
    """tune.json's content, the text printed at the end and the HTML view (linking the
    candidates' experiment report when `experiment_report`)."""
    spec = result.scenario.tune
    assert spec is not None
    alpha = result.scenario.compare.alpha
    cell = OBJECTIVE_CELLS[spec.objective]
    candidates = list(result.candidates)
    by_name = {c.name: c for c in candidates}
    ranking = rank_candidates(candidates, alpha)
    points = {c.name: (median_or_nan(c.throughput_values), median_or_nan(c.latency_values))
              for c in candidates if c.started}
    front = pareto_front(points)
    exit_code = tune_exit_code(ranking, candidates, result.interrupted)
    warnings = []
    if result.interrupted:
        warnings.append("the tune was interrupted: the ranking covers the trials that finished")
    if spec.search:
        warnings.append("search steps run one after another (each step's trials back to back), "
                        "so drift over time is not balanced between steps as it is between "
                        "grid candidates")
    if any(e.versus_best is not None and not e.versus_best.testable for e in ranking.entries):
        warnings.append(f"{result.trials_per_candidate} trial(s) per candidate can never show a "
                        f"significant difference at alpha {alpha:g} after Holm: the ranking "
                        "orders medians only (raise tune.trials)")
    best = by_name.get(ranking.best) if ranking.best else None
    command = recommended_command(result.model, dict(best.args)) if best else ""
    if best is None:
        recommended_text = "none: no candidate started, ran valid trials and met its SLOs"
        note = ""
    else:
        recommended_text = f"{best.name}: {_args_text(dict(best.changed))}"
        note = (f"not significantly better than {', '.join(ranking.tied_with_best)} "
                f"(alpha {alpha:g}, Holm): on this evidence they are as good"
                if ranking.tied_with_best else
                "significantly better than every other eligible candidate" if
                len([e for e in ranking.entries if e.eligible]) > 1 else
                "the only eligible candidate")
    document: dict[str, Any] = {
        "schema_version": TUNE_SCHEMA_VERSION, "kind": "tune", "run_id": result.run_id,
        "objective": spec.objective, "alpha": alpha,
        "trials_per_candidate": result.trials_per_candidate,
        "interrupted": result.interrupted,
        "candidates": [{
            "name": c.name, "origin": c.origin, "changed": dict(c.changed), "args": dict(c.args),
            "objective_values": list(c.objective_values), "median": c.median,
            "start_failures": list(c.start_failures), "invalid_trials": c.invalid_trials,
            "slo_verdict": c.slo_verdict, "preemptions": c.preemptions,
            "throughput_values": list(c.throughput_values),
            "latency_values": list(c.latency_values)} for c in candidates],
        "ranking": [{"rank": e.rank, "name": e.name, "median": e.median,
                     "eligible": e.eligible, "why_ineligible": e.why_ineligible,
                     "standing": e.standing, "ratio_to_best": _ratio_json(e)}
                    for e in ranking.entries],
        "pareto": {"latency_cell": result.latency_cell,
                   "throughput_cell": result.throughput_cell, "front": front},
        "searches": [{"index": s.index, "arg": s.arg, "values": list(s.values),
                      "candidates": list(s.candidates), "stop": s.stop,
                      "boundary": s.boundary, "boundary_candidate": s.boundary_candidate}
                     for s in result.searches],
        "recommended": None if best is None else {
            "candidate": best.name, "changed": dict(best.changed), "args": dict(best.args),
            "command": command, "config_file": RECOMMENDED_CONFIG_FILE,
            "tied_with": list(ranking.tied_with_best), "note": note},
        "exit_code": int(exit_code), "warnings": warnings,
    }
    document = redact_secrets(document)
    rank_rows = [RankRow(
        str(e.rank), e.name, format_cell_value(cell, e.median), _versus_text(cell, e),
        e.standing, by_name[e.name].slo_verdict, _args_text(dict(by_name[e.name].changed)))
        for e in ranking.entries]
    search_rows = [SearchRow(
        str(s.index), s.arg,
        " → ".join(f"{v} ({n})" for v, n in zip(s.values, s.candidates, strict=False)),
        s.stop, "none" if s.boundary is None else f"{s.boundary} ({s.boundary_candidate})")
        for s in result.searches]
    candidate_rows = [CandidateRow(
        c.name, c.origin, _args_text(dict(c.changed)),
        f"did not start ({len(c.start_failures)})" if c.start_failures else
        f"{len(c.objective_values)} valid of {len(c.objective_values) + c.invalid_trials}",
        " ".join(format_cell_value(cell, v) for v in c.objective_values) or "n/a",
        format_cell_value(result.throughput_cell, median_or_nan(c.throughput_values)),
        format_cell_value(result.latency_cell, median_or_nan(c.latency_values)),
        "not exported" if c.preemptions is None else f"{c.preemptions:g}",
        " | ".join(f.splitlines()[0][:300] for f in c.start_failures)) for c in candidates]
    outcome = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}.get(int(exit_code), "INVALID")
    headline = (f"{len(candidates)} candidate(s) × {result.trials_per_candidate} trial(s) · "
                f"objective {spec.objective}")
    view = TuneView(
        title=f"Tune: {result.scenario.name}", run_id=result.run_id,
        description=result.scenario.description, outcome=outcome,
        outcome_class=outcome.lower(), headline=headline, warnings=warnings,
        recommended=recommended_text, recommended_note=note, command=command,
        objective=OBJECTIVE_NAMES[spec.objective], rank_rows=rank_rows,
        search_rows=search_rows, candidate_rows=candidate_rows,
        figures=[FigureView("fig-pareto", "Pareto front",
                            pareto_figure(candidates, front, result.latency_cell,
                                          result.throughput_cell))] if points else [],
        pareto_note=(f"on the front ({result.throughput_cell} up, {result.latency_cell} down): "
                     f"{', '.join(front) or 'none'}"),
        experiment_report=REPORT_FILE if experiment_report else "",
        scenario_yaml=yaml.safe_dump(redact_secrets(result.scenario.to_yaml_dict()),
                                     sort_keys=False),
        plotly_js=plotly_js())
    return document, tune_text(document, rank_rows, search_rows, headline), view


def tune_text(document: dict[str, Any], rank_rows: Sequence[RankRow],
              search_rows: Sequence[SearchRow], headline: str) -> str:
    lines = [f"tune {document['run_id']}: {headline}", "",
             f"{'rank':<5}{'candidate':<11}{'objective':<16}{'vs best':<34}{'SLO':<14}standing"]
    for row in rank_rows:
        lines.append(f"{row.rank:<5}{row.name:<11}{row.objective:<16}{row.versus_best:<34}"
                     f"{row.slo:<14}{row.standing}  [{row.changed}]")
    for search in search_rows:
        lines.append(f"search {search.index} {search.arg}: {search.values}; "
                     f"stopped: {search.stop}; boundary {search.boundary}")
    pareto = document["pareto"]
    lines.append(f"Pareto front ({pareto['throughput_cell']} vs {pareto['latency_cell']}): "
                 f"{', '.join(pareto['front']) or 'none'}")
    recommended = document["recommended"]
    if recommended:
        lines += [f"recommended: {recommended['candidate']} ({recommended['note']})",
                  f"  {recommended['command']}"]
    else:
        lines.append("recommended: none (no candidate started, ran valid trials and met its "
                     "SLOs)")
    lines += [f"warning: {w}" for w in document["warnings"]]
    return "\n".join(lines)


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
        (run_dir / SCENARIO_FILE).write_text(yaml.safe_dump(redact_secrets(experiment),
                                                            sort_keys=False))
        render_experiment(run_dir, interrupted=result.interrupted)
    document, text, view = build_tune(result, with_experiment)
    summary_path = run_dir / TUNE_SUMMARY_FILE
    summary_path.write_text(json.dumps(document, indent=2) + "\n")
    report_path = run_dir / TUNE_REPORT_FILE
    report_path.write_text(render_template("tune.html.j2", view), encoding="utf-8")
    recommended = document["recommended"]
    for name in (RECOMMENDED_CONFIG_FILE, RECOMMENDED_COMMAND_FILE):
        (run_dir / name).unlink(missing_ok=True)
    if recommended:
        (run_dir / RECOMMENDED_CONFIG_FILE).write_text(
            f"# vllm-slo tune {result.run_id}: candidate {recommended['candidate']} "
            f"({recommended['note']})\n# vllm serve {result.model} --config "
            f"{RECOMMENDED_CONFIG_FILE}\n"
            + yaml.safe_dump(recommended["args"], sort_keys=False))
        (run_dir / RECOMMENDED_COMMAND_FILE).write_text(recommended["command"] + "\n")
    return RenderedRun(document, text, report_path, summary_path)
