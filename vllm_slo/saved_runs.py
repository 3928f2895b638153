"""Offline work on saved run folders: `vllm-slo report`, `compare`, `gate` and `plan`.
A single-run folder is one trial; an experiment folder contributes one group per variant."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vllm_slo.reports.analysis.comparison import (
    Group,
    center_estimate,
    format_estimate,
    gate,
    plan_trials,
    trial_values_text,
)
from vllm_slo.reports.analysis.experiment_summary import build_comparison_summary
from vllm_slo.reports.analysis.statistics import Verdict
from vllm_slo.reports.analysis.trial_planning import trials_for_gate
from vllm_slo.reports.analysis.trials import Trial
from vllm_slo.reports.experiment_report import render_experiment, write_experiment
from vllm_slo.reports.render.experiment_text import render_comparison_text
from vllm_slo.reports.render.text import format_trials_needed
from vllm_slo.reports.run_report import render_run
from vllm_slo.reports.trial_folders import collect_trials, is_experiment, trial_folders
from vllm_slo.scenarios.errors import ExitCode, ScenarioError

GATE_IDENTITY = ("model_id", "vllm_version", "host", "workload")


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

    def label(variant: str) -> str:
        return f"{run_dir.name}:{variant}" if len(variants) > 1 else run_dir.name

    return [Group(label(v), tuple(t for t in trials if t.variant == v)) for v in variants]


def compare_saved_runs(run_dirs: Sequence[Path], cells: Sequence[str] | None, alpha: float,
                       out_dir: Path | None = None) -> CommandResult:
    """Compare saved runs (the first is the baseline): summary.json and report.html through
    the experiment summary builder and page, into `out_dir` (default: a new `compare-<UTC>`
    folder next to the first run)."""
    if len(run_dirs) < 2:
        raise ScenarioError("compare needs at least two run folders (the first is the baseline)")
    groups = [group for run_dir in run_dirs for group in groups_of(run_dir)]
    run_id = f"compare-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    summary = build_comparison_summary(groups, [str(p) for p in run_dirs], cells, alpha, run_id)
    out_dir = out_dir or run_dirs[0].parent / run_id
    out_dir.mkdir(parents=True, exist_ok=True)
    written = write_experiment(out_dir, summary, groups)
    text = render_comparison_text(summary)
    return CommandResult(f"{text}\n\nreport: {written.report_path}", ExitCode.PASS,
                         written.report_path)


BENCH_WORKLOAD_KEYS = ("backend", "num_prompts", "request_rate", "burstiness",
                       "max_concurrency")


def _identity(trial: Trial) -> dict[str, Any]:
    """What must match between a gate's two sides. The workload is the traffic settings the
    run asked for (imported `vllm bench serve` results: the bench settings; their measured
    duration varies run to run)."""
    provenance = trial.provenance
    host = provenance.get("host") or {}
    traffic = trial.scenario.traffic
    bench = provenance.get("vllm_bench")
    workload = ({key: bench.get(key) for key in BENCH_WORKLOAD_KEYS}
                if provenance.get("source") == "vllm-bench" and isinstance(bench, dict) else
                {"profile": traffic.profile, "duration": traffic.duration_s,
                 "arrival": traffic.arrival.model_dump(mode="json", by_alias=True)})
    return {"model_id": provenance.get("model_id"), "vllm_version": provenance.get("vllm_version"),
            "host": {"cpu_model": host.get("cpu_model"), "gpus": host.get("gpus")},
            "workload": workload}


def gate_mismatches(candidate: Group, baseline: Group) -> list[str]:
    """Why two sides are not comparable (empty: they are). Model, vLLM version, host and
    workload must be one value over every trial of both sides. Seeds may differ from trial to
    trial, but both sides must have used the same set of seeds (the same prompt sequences)."""
    mismatches = []
    identities = [_identity(t) for t in (*candidate.trials, *baseline.trials)]
    for key in GATE_IDENTITY:
        values = {json.dumps(identity[key], sort_keys=True) for identity in identities}
        if len(values) > 1:
            mismatches.append(f"{key} differs: {' vs '.join(sorted(values))}")
    seeds = [sorted({t.scenario.traffic.seed for t in side.trials})
             for side in (candidate, baseline)]
    if seeds[0] != seeds[1]:
        mismatches.append(f"seeds differ: candidate used {seeds[0]}, baseline {seeds[1]} "
                          f"(each side may use several seeds, but the same set)")
    return mismatches


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
    mismatches = gate_mismatches(candidate, baseline)
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
    from vllm_slo.tuner import is_tune, report_tune

    if is_tune(run_dir):
        for trial_dir, _, _ in trial_folders(run_dir) if is_experiment(run_dir) else []:
            render_run(trial_dir)
        outcome = report_tune(run_dir, say=lambda text: None)
        rendered = outcome.rendered
        assert rendered is not None  # a tune always writes its report (Tuner.run)
        return CommandResult(f"{rendered.text}\n\ntune report: "
                             f"{rendered.report_path}", outcome.exit_code,
                             rendered.report_path)
    if is_experiment(run_dir):
        for trial_dir, _, _ in trial_folders(run_dir):
            render_run(trial_dir)
        rendered = render_experiment(run_dir)
    else:
        rendered = render_run(run_dir)
    return CommandResult(f"{rendered.text}\n\nreport: {rendered.report_path}",
                         ExitCode(rendered.summary["exit_code"]), rendered.report_path)


def plan_saved_run(run_dir: Path, effect: float, alpha: float,
                   margin: float = 0.05) -> CommandResult:
    return CommandResult(plan_from_saved_run(run_dir, effect, alpha, margin), ExitCode.PASS)


def plan_from_saved_run(run_dir: Path, effect: float, alpha: float,
                        margin: float = 0.05) -> str:
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
        gate_trials = trials_for_gate(plan.cv, margin)
        lines.append(f"  {item.cell:<24} trial CV {plan.cv:6.1%} -> "
                     f"{format_trials_needed(plan.trials_per_variant)}; a gate at margin "
                     f"{margin:.0%} passes an unchanged candidate 80% of the time with "
                     f"{format_trials_needed(gate_trials)} trials per side")
        lines += [f"    note: {w}" for w in plan.warnings]
        for group in groups:  # what the variation was measured from
            center = center_estimate(group, item.cell)
            shown = format_estimate(item.cell, center.value, center.ci_low, center.ci_high)
            values = [float(v) for v in group.values(item.cell)]
            lines.append(f"    {group.label}: {shown} {trial_values_text(item.cell, values)}")
    return "\n".join(lines)
