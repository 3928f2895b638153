"""Plain text of an experiment's or a comparison's summary, for the terminal (the formatters
are the run report's, `render.text`, and the comparison's, `analysis.wording`)."""

from __future__ import annotations

import json

from vllm_slo.analysis.experiment_summary import (
    ExperimentSummary,
    PlanEntry,
    VariantEntry,
)
from vllm_slo.analysis.wording import format_estimate, trial_values_text
from vllm_slo.reports.render.tables import tables_text
from vllm_slo.reports.render.text import format_observed, format_trials_needed, scope_note

ESTIMATES_TITLE = ("trial-level estimates (geometric mean of the valid trials, 95% t interval "
                   "on logs; raw scale when a value is <= 0), each trial's value beside:")


def cv_text(plan: PlanEntry) -> str:
    """`24% [15%, 60%]`: the CV with its 95% interval where it has one."""
    if plan.cv_interval is None:
        return f"{plan.trial_to_trial_cv:.0%}"
    low, high = plan.cv_interval
    return f"{plan.trial_to_trial_cv:.0%} [{low:.0%}, {high:.0%}]"


def trials_text(plan: PlanEntry) -> str:
    """`99 (161 at the CV's upper bound)`."""
    text = format_trials_needed(plan.trials_per_variant)
    if plan.cv_interval is None:
        return text
    return f"{text} ({format_trials_needed(plan.trials_at_upper)} at the CV's upper bound)"


def plan_line(plan: PlanEntry) -> str:
    return (f"plan: {plan.cell}: instance CV {cv_text(plan)} → {trials_text(plan)} trials per "
            f"variant to detect {plan.effect:.0%} (power {plan.power:.0%}, {plan.test}, "
            f"alpha {plan.alpha:.3g} a cell)")


def estimate_line(variant: VariantEntry, cell: str) -> str:
    """`ttft.p50: 2.31s [1.90s, 2.80s] from trials 2.10s 2.50s`."""
    estimate = variant.cells[cell]
    return (f"{cell}: {format_estimate(cell, estimate.value, estimate.ci_low, estimate.ci_high)} "
            f"{trial_values_text(cell, variant.values(cell))}")


def _estimate_lines(variant: VariantEntry) -> list[str]:
    return [f"  {estimate_line(variant, cell)}" for cell in variant.cells]


def render_experiment_text(summary: ExperimentSummary) -> str:
    """Per variant its SLO verdicts across trials and each cell's trial-level estimate beside
    the trials' values, then the benchstat table, the planning lines, invalid reasons and
    warnings."""
    lines = [f"experiment {summary.run_id}: {len(summary.variants)} variant(s) × "
             f"{summary.trials_per_variant} trial(s)"]
    if summary.stopping is not None:
        lines.append(summary.stopping.text)
    lines.append(ESTIMATES_TITLE)
    for variant in summary.variants:
        lines.append(f"\n[{variant.label}] {variant.valid_trials} valid trial(s)")
        for slo in variant.slos:
            lines.append(f"  {slo.verdict.value:<12} {slo.rule.label:<20} "
                         f"observed {format_observed(slo)}  ({slo.basis})")
        if variant.slos:
            lines.append(f"  ({scope_note(variant.slos)})")
        lines += _estimate_lines(variant)
    if summary.benchstat:
        lines += ["", tables_text(summary.benchstat)]
    lines += [plan_line(plan) for plan in summary.planning]
    lines += [f"INVALID      {reason}" for reason in summary.invalid_reasons]
    lines += [f"warning: {warning}" for warning in summary.warnings]
    return "\n".join(lines)


def render_comparison_text(summary: ExperimentSummary) -> str:
    """Each compared group's trial-level estimates beside its trials' values, the benchstat
    table, the planning lines, the provenance that differs between the runs, and warnings."""
    lines = [ESTIMATES_TITLE]
    for variant in summary.variants:
        lines.append(f"[{variant.label}] {variant.valid_trials} valid trial(s)")
        lines += _estimate_lines(variant)
    lines += ["", tables_text(summary.benchstat)]
    lines += [plan_line(plan) for plan in summary.planning]
    lines += [f"provenance differs: {key}: {json.dumps(values)}"
              for key, values in summary.provenance_differences.items()]
    lines += [f"warning: {warning}" for warning in summary.warnings]
    return "\n".join(lines)
