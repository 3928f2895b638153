"""Plain text of an experiment's or a comparison's summary, for the terminal (the formatters
are the run report's, `render.text`)."""

from __future__ import annotations

import json

from vllm_slo.reports.analysis.experiment_summary import ExperimentSummary, PlanEntry
from vllm_slo.reports.render.text import format_observed, format_trials_needed


def plan_line(plan: PlanEntry) -> str:
    return (f"plan: {plan.cell}: trial CV {plan.trial_to_trial_cv:.0%} → "
            f"{format_trials_needed(plan.trials_per_variant)} trials per variant to detect "
            f"{plan.effect:.0%} (power {plan.power:.0%})")


def render_experiment_text(summary: ExperimentSummary) -> str:
    """Per variant its SLO verdicts across trials, then the benchstat table, the planning
    lines, invalid reasons and warnings."""
    lines = [f"experiment {summary.run_id}: {len(summary.variants)} variant(s) × "
             f"{summary.trials_per_variant} trial(s)"]
    for variant in summary.variants:
        lines.append(f"\n[{variant.label}] {variant.valid_trials} valid trial(s)")
        for slo in variant.slos:
            lines.append(f"  {slo.verdict.value:<12} {slo.rule.metric} {slo.rule.text:<14} "
                         f"observed {format_observed(slo)}  ({slo.basis})")
    if summary.benchstat:
        lines += ["", summary.benchstat]
    lines += [plan_line(plan) for plan in summary.planning]
    lines += [f"INVALID      {reason}" for reason in summary.invalid_reasons]
    lines += [f"warning: {warning}" for warning in summary.warnings]
    return "\n".join(lines)


def render_comparison_text(summary: ExperimentSummary) -> str:
    """The benchstat table, the provenance that differs between the runs, and warnings."""
    lines = [summary.benchstat]
    lines += [f"provenance differs: {key}: {json.dumps(values)}"
              for key, values in summary.provenance_differences.items()]
    lines += [f"warning: {warning}" for warning in summary.warnings]
    return "\n".join(lines)
