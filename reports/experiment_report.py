"""An experiment's outputs (trials × variants) rebuilt from its folder alone: per-variant
statistics across trials, SLO verdicts from across-trial confidence intervals, comparisons
between variants (benchstat table), trial planning, summary.json and a comparison report."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import numpy as np
import plotly.graph_objects as go
import yaml
from plotly.offline import get_plotlyjs
from vllm_slo.reports.analysis.comparison import (
    CellComparison,
    CellPlan,
    Group,
    benchstat_table,
    center_estimate,
    compare_groups,
    format_cell_value,
    plan_trials,
    reachability_warning,
)
from vllm_slo.reports.analysis.run_metrics import LATENCY_METRICS, RunSeries
from vllm_slo.reports.analysis.statistics import Verdict, rate_estimate, slo_verdict
from vllm_slo.reports.analysis.summary import estimate_dict
from vllm_slo.reports.analysis.trial_folders import Trial, cell_value, collect_trials
from vllm_slo.reports.analysis.verdicts import choose_exit_code
from vllm_slo.reports.render.figures import latency_ecdf_figure
from vllm_slo.reports.render.html import TEMPLATES, script_json
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.scenarios.loader import resolve_variants
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.run_files import REPORT_FILE, SCENARIO_FILE, SUMMARY_FILE
from vllm_slo.scenarios.slo import SloRule

EXPERIMENT_SCHEMA_VERSION = 1
PROVENANCE_KEYS = ("model_id", "vllm_version", "platform", "seed", "max_model_len")


@dataclass(frozen=True, slots=True)
class SloAcrossTrials:
    variant: str
    rule: SloRule
    observed: dict[str, Any]
    verdict: Verdict
    basis: str


def slo_across_trials(group: Group, rule: SloRule, confidence: float = 0.95
                      ) -> SloAcrossTrials:
    """k >= 2 valid trials: the CI across trials of the per-trial statistic (error rate: exact
    bounds on the pooled counts). One trial: that trial's own verdict."""
    valid = [t for t in group.trials if t.valid]
    if len(valid) == 1:
        own = next(s for s in valid[0].summary["slos"]
                   if s["metric"] == rule.metric and s["text"] == rule.text)
        return SloAcrossTrials(group.label, rule, own["observed"], Verdict(own["verdict"]),
                               f"single trial: {own['basis']}")
    if rule.metric == "error_rate":
        failed = sum(t.series.failed for t in valid)
        requests = sum(t.series.requests for t in valid)
        estimate = rate_estimate(failed, requests, confidence)
        basis = f"{failed} of {requests} requests failed over {len(valid)} trials (exact bounds)"
    else:
        cell = f"{rule.metric}.{rule.statistic}"
        estimate = center_estimate(group, cell, confidence)
        basis = (f"mean of {estimate.n} trials' {rule.statistic} with a t interval across "
                 f"trials")
    return SloAcrossTrials(group.label, rule, estimate_dict(estimate),
                           slo_verdict(estimate, rule.comparator, rule.threshold), basis)


def pooled_series(trials: Sequence[Trial]) -> RunSeries:
    """All valid trials' measured requests together (for distribution plots only)."""
    valid = [t.series for t in trials if t.valid] or [t.series for t in trials]
    first = valid[0]
    pooled = {name: np.concatenate([getattr(s, f"{name}_s") for s in valid])
              for name in (*LATENCY_METRICS, "send_lag")}
    return dataclasses.replace(first, **{f"{k}_s": v for k, v in pooled.items()})


def comparison_dict(item: CellComparison) -> dict[str, Any]:
    result = item.comparison
    return {
        "cell": item.cell, "baseline": item.baseline, "candidate": item.candidate,
        "n_baseline": result.n_a, "n_candidate": result.n_b,
        "center_baseline": result.center_a, "center_candidate": result.center_b,
        "p_value": result.p_value, "p_adjusted": result.p_adjusted,
        "significant": result.significant, "alpha": result.alpha,
        "shift": estimate_dict(result.shift), "ratio": estimate_dict(result.ratio),
        "warnings": list(result.warnings),
    }


def plan_dict(item: CellPlan) -> dict[str, Any]:
    plan = item.plan
    return {"cell": item.cell, "trial_to_trial_cv": plan.cv, "effect": plan.effect,
            "alpha": plan.alpha, "power": plan.power,
            "trials_per_variant": plan.trials_per_variant, "warnings": list(plan.warnings)}


def provenance_differences(trials: Sequence[Trial]) -> dict[str, dict[str, Any]]:
    """Provenance keys whose values differ between groups of trials (label -> value)."""
    differences: dict[str, dict[str, Any]] = {}
    for key in (*PROVENANCE_KEYS, "host", "engine_args"):
        values = {}
        for trial in trials:
            if key == "engine_args":
                value = (trial.provenance.get("launch") or {}).get("engine_args")
            elif key == "host":
                host = trial.provenance.get("host") or {}
                value = {k: host.get(k) for k in ("cpu_model", "gpus")}
            else:
                value = trial.provenance.get(key)
            values.setdefault(trial.label, value)
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            differences[key] = values
    return differences


def groups_by_variant(trials: Sequence[Trial], order: Sequence[str]) -> list[Group]:
    return [Group(name or "run", tuple(t for t in trials if t.variant == name)) for name in order]


def build_experiment_summary(scenario: Scenario, trials: Sequence[Trial], run_id: str,
                             interrupted: bool) -> tuple[dict[str, Any], list[Group], str]:
    arms = resolve_variants(scenario)
    groups = groups_by_variant(trials, list(arms))
    cells = list(scenario.compare.cells)
    alpha = scenario.compare.alpha
    warnings: list[str] = []
    invalid: list[str] = []
    if interrupted:
        invalid.append("the experiment was interrupted before its planned end")
    variants = {}
    slo_results: list[SloAcrossTrials] = []
    for group, arm in zip(groups, arms.values(), strict=True):
        if group.valid_trials == 0:
            invalid.append(f"variant {group.label}: no valid trial")
        results = ([slo_across_trials(group, rule) for rule in arm.slo.rules()]
                   if group.valid_trials else [])
        slo_results.extend(results)
        variants[group.label] = {
            "trials": [{"folder": t.run_dir.name, "position": t.position,
                        "exit_code": t.summary["exit_code"],
                        "invalid_reasons": t.summary["invalid_reasons"],
                        "cells": {c: _finite(cell_value(t.series, c)) for c in cells}}
                       for t in group.trials],
            "valid_trials": group.valid_trials,
            "cells": {c: estimate_dict(center_estimate(group, c)) for c in cells},
            "slos": [{"metric": r.rule.metric, "statistic": r.rule.statistic,
                      "comparator": r.rule.comparator, "threshold": r.rule.threshold,
                      "text": r.rule.text, "observed": r.observed, "verdict": r.verdict.value,
                      "basis": r.basis} for r in results],
            "server_args": arm.server.args,
        }
        if 0 < group.valid_trials < len(group.trials):
            warnings.append(f"variant {group.label}: {len(group.trials) - group.valid_trials} "
                            f"invalid trial(s) excluded")
    families = compare_groups(groups, cells, alpha) if len(groups) > 1 else []
    if len(groups) > 1:
        reach = reachability_warning(scenario.trials, len(cells), alpha)
        if reach:
            warnings.append(reach)
    plans = plan_trials(groups, cells, scenario.compare.effect, alpha)
    table = benchstat_table(groups, families, cells) if families else ""
    exit_code = choose_exit_code(slo_results, invalid)
    summary = {
        "schema_version": EXPERIMENT_SCHEMA_VERSION,
        "kind": "experiment",
        "run_id": run_id,
        "scenario": scenario.to_yaml_dict(),
        "trials_per_variant": scenario.trials,
        "order": [{"position": t.position, "variant": t.label, "folder": t.run_dir.name}
                  for t in sorted(trials, key=lambda t: t.position)],
        "variants": variants,
        "comparisons": [{"baseline": f[0].baseline, "candidate": f[0].candidate,
                         "cells": [comparison_dict(item) for item in f]} for f in families],
        "planning": [plan_dict(p) for p in plans],
        "provenance_differences": provenance_differences(trials),
        "benchstat": table,
        "exit_code": int(exit_code),
        "invalid_reasons": invalid,
        "warnings": warnings,
    }
    return summary, groups, table


def _finite(value: float | None) -> float | None:
    return value if value is not None and np.isfinite(value) else None


def render_experiment_text(summary: dict[str, Any]) -> str:
    lines = [f"experiment {summary['run_id']}: {len(summary['variants'])} variant(s) × "
             f"{summary['trials_per_variant']} trial(s)"]
    for name, variant in summary["variants"].items():
        lines.append(f"\n[{name}] {variant['valid_trials']} valid trial(s)")
        for slo in variant["slos"]:
            observed = slo["observed"]
            value = format_cell_value(f"{slo['metric']}.x", observed["value"])
            lines.append(f"  {slo['verdict']:<12} {slo['metric']} {slo['text']:<14} "
                         f"observed {value}  ({slo['basis']})")
    if summary["benchstat"]:
        lines += ["", summary["benchstat"]]
    for plan in summary["planning"]:
        needed = plan["trials_per_variant"]
        lines.append(f"plan: {plan['cell']}: trial CV {plan['trial_to_trial_cv']:.0%} → "
                     f"{needed if needed is not None else '> 200'} trials per variant to "
                     f"detect {plan['effect']:.0%} (power {plan['power']:.0%})")
    for reason in summary["invalid_reasons"]:
        lines.append(f"INVALID      {reason}")
    for warning in summary["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


def trial_dots_figure(groups: Sequence[Group], cells: Sequence[str]) -> str:
    """Per-trial values of each compared cell, with the across-trial mean and its 95% CI."""
    from plotly.subplots import make_subplots

    columns = 3
    rows = max(1, -(-len(cells) // columns))
    figure = make_subplots(rows=rows, cols=columns, subplot_titles=list(cells))
    for index, cell in enumerate(cells):
        row, col = divmod(index, columns)
        scale = 1e3 if "throughput" not in cell and not cell.startswith("error") else 1.0
        for position, group in enumerate(groups):
            values = group.values(cell) * scale
            figure.add_trace(go.Scatter(
                x=[group.label] * values.size, y=values, mode="markers",
                marker={"size": 8, "opacity": 0.7, "color": _COLORS[position % len(_COLORS)]},
                name=group.label, legendgroup=group.label, showlegend=index == 0),
                row=row + 1, col=col + 1)
            estimate = center_estimate(group, cell)
            if estimate.value is not None and estimate.ci_low is not None:
                figure.add_trace(go.Scatter(
                    x=[group.label], y=[estimate.value * scale], mode="markers",
                    marker={"symbol": "line-ew-open", "size": 24, "color": "#222"},
                    error_y={"type": "data", "symmetric": False,
                             "array": [(estimate.ci_high - estimate.value) * scale],
                             "arrayminus": [(estimate.value - estimate.ci_low) * scale]},
                    showlegend=False, hoverinfo="y"), row=row + 1, col=col + 1)
        unit = ("tok/s" if cell.startswith("output") else "req/s" if cell.startswith("request")
                else "" if cell.startswith("error") else "ms")
        figure.update_yaxes(title_text=unit, row=row + 1, col=col + 1)
    figure.update_layout(template="plotly_white", height=320 * rows,
                         title="Per-trial statistics (dots) with the mean and its 95% CI",
                         margin={"l": 60, "r": 20, "t": 70, "b": 40})
    return figure.to_json()


_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def render_experiment_html(summary: dict[str, Any], groups: Sequence[Group]) -> str:
    cells = summary["scenario"]["compare"]["cells"]
    figures = [
        ("fig-trials", "Per-trial statistics", trial_dots_figure(groups, cells)),
        ("fig-ecdf", "Latency distributions (all trials pooled)",
         latency_ecdf_figure({g.label: pooled_series(g.trials) for g in groups})),
    ]
    environment = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES),
                                     autoescape=True, undefined=jinja2.StrictUndefined)
    environment.filters["script_json"] = script_json
    view = {
        "title": f"vllm-slo experiment · {summary['scenario']['name']}",
        "summary": summary,
        "outcome": {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}.get(summary["exit_code"],
                                                                  "INVALID"),
        "slo_rows": [
            {"variant": name, "verdict": s["verdict"], "metric": s["metric"], "rule": s["text"],
             "observed": format_cell_value(f"{s['metric']}.x", s["observed"]["value"]),
             "basis": s["basis"]}
            for name, v in summary["variants"].items() for s in v["slos"]],
        "trial_rows": [
            {"variant": name, "folder": t["folder"], "position": str(t["position"]),
             "exit_code": str(t["exit_code"]), "invalid": "; ".join(t["invalid_reasons"]),
             "report": f"trials/{t['folder']}/{REPORT_FILE}"}
            for name, v in summary["variants"].items() for t in v["trials"]],
        "plan_rows": [
            {"cell": p["cell"], "cv": f"{p['trial_to_trial_cv']:.0%}",
             "trials": str(p["trials_per_variant"] or "> 200"),
             "effect": f"{p['effect']:.0%}"} for p in summary["planning"]],
        "differences": [(key, json.dumps(values)) for key, values
                        in summary["provenance_differences"].items()],
        "figures": figures,
        "scenario_yaml": yaml.safe_dump(summary["scenario"], sort_keys=False),
        "plotly_js": get_plotlyjs(),
    }
    return environment.get_template("experiment.html.j2").render(view=view)


def render_experiment(run_dir: Path, interrupted: bool = False) -> RenderedRun:
    scenario = Scenario.model_validate(yaml.safe_load((run_dir / SCENARIO_FILE).read_text()))
    trials = collect_trials(run_dir)
    summary, groups, _ = build_experiment_summary(scenario, trials, run_dir.name, interrupted)
    summary_path = run_dir / SUMMARY_FILE
    summary_path.write_text(json.dumps(summary, indent=2, default=_json_default) + "\n")
    report_path = run_dir / REPORT_FILE
    report_path.write_text(render_experiment_html(summary, groups))
    return RenderedRun(summary, render_experiment_text(summary), report_path, summary_path)


def _json_default(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
