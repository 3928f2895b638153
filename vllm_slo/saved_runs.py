"""Offline work on saved run folders: `vllm-slo report`, `compare`, `gate` and `plan`.
A single-run folder is one trial; an experiment folder contributes one group per variant."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vllm_slo.reports.analysis.comparison import (
    Group,
    benchstat_table,
    center_estimate,
    compare_groups,
    gate,
    plan_trials,
    reachability_warning,
)
from vllm_slo.reports.analysis.statistics import Verdict
from vllm_slo.reports.analysis.summary import estimate_dict
from vllm_slo.reports.analysis.trial_folders import (
    Trial,
    cell_value,
    collect_trials,
    is_experiment,
    trial_folders,
)
from vllm_slo.reports.experiment_report import (
    comparison_dict,
    plan_dict,
    provenance_differences,
    render_experiment,
    render_experiment_html,
)
from vllm_slo.reports.run_report import render_run
from vllm_slo.scenarios.errors import ExitCode, ScenarioError
from vllm_slo.scenarios.run_files import REPORT_FILE, SUMMARY_FILE

GATE_IDENTITY = ("model_id", "vllm_version", "seed", "host", "workload")


@dataclass(frozen=True, slots=True)
class CommandResult:
    text: str
    exit_code: ExitCode
    report_path: Path | None = None


def groups_of(run_dir: Path) -> list[Group]:
    if not run_dir.is_dir():
        raise ScenarioError(f"run folder {run_dir} does not exist")
    trials = collect_trials(run_dir)
    if not is_experiment(run_dir):
        return [Group(run_dir.name, tuple(trials))]
    variants = list(dict.fromkeys(t.variant for t in trials))
    label = (lambda v: f"{run_dir.name}:{v}") if len(variants) > 1 else (lambda v: run_dir.name)
    return [Group(label(v), tuple(t for t in trials if t.variant == v)) for v in variants]


def _relabelled(trials: Sequence[Trial], label: str) -> list[Trial]:
    return [dataclasses.replace(t, variant=label) for t in trials]


def compare_saved_runs(run_dirs: Sequence[Path], cells: Sequence[str] | None, alpha: float,
                       out_dir: Path | None = None) -> CommandResult:
    if len(run_dirs) < 2:
        raise ScenarioError("compare needs at least two run folders (the first is the baseline)")
    groups = [group for run_dir in run_dirs for group in groups_of(run_dir)]
    cells = list(cells or groups[0].trials[0].scenario.compare.cells)
    families = compare_groups(groups, cells, alpha)
    table = benchstat_table(groups, families, cells)
    trials = [t for g in groups for t in _relabelled(g.trials, g.label)]
    differences = provenance_differences(trials)
    warnings = []
    smallest = min(len(g.values(cells[0])) for g in groups)
    reach = reachability_warning(max(smallest, 1), len(cells), alpha)
    if reach:
        warnings.append(reach)
    summary = {
        "schema_version": 1, "kind": "comparison",
        "run_id": f"compare-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}",
        "scenario": {**groups[0].trials[0].scenario.to_yaml_dict(),
                     "compare": {"cells": cells, "alpha": alpha, "effect": 0.1}},
        "trials_per_variant": smallest,
        "runs": [str(p) for p in run_dirs],
        "variants": {g.label: {
            "trials": [{"folder": str(t.run_dir), "position": t.position,
                        "exit_code": t.summary["exit_code"],
                        "invalid_reasons": t.summary["invalid_reasons"],
                        "cells": {c: cell_value(t.series, c) for c in cells}} for t in g.trials],
            "valid_trials": g.valid_trials,
            "cells": {c: estimate_dict(center_estimate(g, c)) for c in cells},
            "slos": []} for g in groups},
        "comparisons": [{"baseline": f[0].baseline, "candidate": f[0].candidate,
                         "cells": [comparison_dict(item) for item in f]} for f in families],
        "planning": [plan_dict(p) for p in plan_trials(groups, cells, 0.1, alpha)],
        "provenance_differences": differences,
        "benchstat": table, "exit_code": 0, "invalid_reasons": [], "warnings": warnings,
    }
    out_dir = out_dir or run_dirs[0].parent / summary["run_id"]
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=str) + "\n")
    report_path = out_dir / REPORT_FILE
    report_path.write_text(render_experiment_html(summary, groups))
    lines = [table]
    for key, values in differences.items():
        lines.append(f"provenance differs: {key}: {json.dumps(values)}")
    lines += [f"warning: {w}" for w in warnings]
    lines.append(f"\nreport: {report_path}")
    return CommandResult("\n".join(lines), ExitCode.PASS, report_path)


def _identity(trial: Trial) -> dict[str, Any]:
    provenance = trial.provenance
    host = provenance.get("host") or {}
    traffic = trial.scenario.traffic
    return {"model_id": provenance.get("model_id"), "vllm_version": provenance.get("vllm_version"),
            "seed": traffic.seed, "host": {"cpu_model": host.get("cpu_model"),
                                           "gpus": host.get("gpus")},
            "workload": {"profile": traffic.profile, "arrival": traffic.arrival.model_dump(
                mode="json", by_alias=True), "duration": traffic.duration_s}}


def _single_group(run_dir: Path, role: str) -> Group:
    groups = groups_of(run_dir)
    if len(groups) != 1:
        raise ScenarioError(f"{role} {run_dir} holds {len(groups)} variants; gate one variant "
                            f"against one (run the variants as separate scenarios)")
    return groups[0]


def gate_saved_runs(candidate_dir: Path, baseline_dir: Path, margin: float,
                    cells: Sequence[str] | None, force: bool) -> CommandResult:
    candidate = _single_group(candidate_dir, "candidate")
    baseline = _single_group(baseline_dir, "baseline")
    mismatches = []
    for key in GATE_IDENTITY:
        values = {json.dumps(_identity(t)[key], sort_keys=True)
                  for t in (*candidate.trials, *baseline.trials)}
        if len(values) > 1:
            mismatches.append(f"{key} differs: {' vs '.join(sorted(values))}")
    if mismatches and not force:
        raise ScenarioError("refusing to gate runs that are not comparable (use --force to "
                            "gate anyway):\n  " + "\n  ".join(mismatches))
    cells = list(cells or baseline.trials[0].scenario.compare.cells)
    results = gate(candidate, baseline, cells, margin)
    lines = [f"gate: {candidate.label} vs baseline {baseline.label}, margin {margin:.1%} "
             f"(PASS when the 95% CI of the ratio stays on the good side of 1 ± margin)"]
    for item in results:
        ratio = item.result.ratio
        shown = ("n/a" if ratio.value is None else
                 f"{ratio.value:.3f} [{ratio.ci_low:.3f}, {ratio.ci_high:.3f}]"
                 if ratio.ci_low is not None else f"{ratio.value:.3f}")
        notes = "; ".join(item.result.warnings)
        lines.append(f"{item.result.verdict.value:<12} {item.cell:<24} ratio {shown}"
                     f"{'  (' + notes + ')' if notes else ''}")
    lines += [f"warning (--force): {m}" for m in mismatches]
    verdicts = {item.result.verdict for item in results}
    code = (ExitCode.SLO_FAILED if Verdict.FAIL in verdicts else
            ExitCode.INCONCLUSIVE if Verdict.INCONCLUSIVE in verdicts else ExitCode.PASS)
    lines.append(f"exit code {int(code)} ({code.name})")
    return CommandResult("\n".join(lines), code)


def report_saved_run(run_dir: Path) -> CommandResult:
    """Rebuild every output of a run folder from the folder alone; an experiment re-renders
    each trial's outputs first, then its own."""
    if not run_dir.is_dir():
        raise ScenarioError(f"run folder {run_dir} does not exist")
    if is_experiment(run_dir):
        for trial_dir, _, _ in trial_folders(run_dir):
            render_run(trial_dir)
        rendered = render_experiment(run_dir)
    else:
        rendered = render_run(run_dir)
    return CommandResult(f"{rendered.text}\n\nreport: {rendered.report_path}",
                         ExitCode(rendered.summary["exit_code"]), rendered.report_path)


def plan_saved_run(run_dir: Path, effect: float, alpha: float) -> CommandResult:
    return CommandResult(plan_from_saved_run(run_dir, effect, alpha), ExitCode.PASS)


def plan_from_saved_run(run_dir: Path, effect: float, alpha: float) -> str:
    groups = groups_of(run_dir)
    cells = list(groups[0].trials[0].scenario.compare.cells)
    plans = plan_trials(groups, cells, effect, alpha)
    if not plans:
        return (f"{run_dir} has fewer than 2 valid trials per variant: run a pilot with "
                f"trials >= 2 (e.g. trials=5) to measure the trial-to-trial variation")
    lines = [f"trials per variant to detect a {effect:.0%} change at alpha {alpha:g} with 80% "
             f"power (Mann-Whitney on per-trial statistics):"]
    for item in plans:
        plan = item.plan
        needed = plan.trials_per_variant if plan.trials_per_variant is not None else "> 200"
        lines.append(f"  {item.cell:<24} trial CV {plan.cv:6.1%} -> {needed}")
        lines += [f"    note: {w}" for w in plan.warnings]
    return "\n".join(lines)
