"""Comparisons between groups of trials (variants of one experiment, or saved runs), release
gates and trial planning — pure functions over per-trial statistics, plus the benchstat-style
text table. The unit of comparison is the trial, never the request."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vllm_slo.reports.analysis.statistics import Estimate, across_trials_estimate
from vllm_slo.reports.analysis.trial_folders import Trial, cell_value, lower_is_better
from vllm_slo.reports.analysis.trial_statistics import (
    Comparison,
    NonInferiority,
    TrialPlan,
    compare_trials,
    min_p_value_mann_whitney,
    non_inferiority,
    trials_needed,
    with_holm,
)
from vllm_slo.scenarios.units import format_duration_s


@dataclass(frozen=True, slots=True)
class Group:
    """Trials that belong together: one variant, or one saved run folder."""

    label: str
    trials: tuple[Trial, ...]

    def values(self, cell: str) -> np.ndarray:
        values = [cell_value(t.series, cell) for t in self.trials if t.valid]
        return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)

    @property
    def valid_trials(self) -> int:
        return sum(1 for t in self.trials if t.valid)


@dataclass(frozen=True, slots=True)
class CellComparison:
    cell: str
    baseline: str
    candidate: str
    comparison: Comparison


@dataclass(frozen=True, slots=True)
class CellGate:
    cell: str
    result: NonInferiority


@dataclass(frozen=True, slots=True)
class CellPlan:
    cell: str
    plan: TrialPlan


def center_estimate(group: Group, cell: str, confidence: float = 0.95) -> Estimate:
    return across_trials_estimate(group.values(cell), confidence)


def compare_groups(groups: Sequence[Group], cells: Sequence[str], alpha: float = 0.05
                   ) -> list[tuple[CellComparison, ...]]:
    """Every group against the first; Holm over the cells of each pair (one family each)."""
    baseline = groups[0]
    families = []
    for candidate in groups[1:]:
        raw = [compare_trials(baseline.values(cell), candidate.values(cell), alpha=alpha)
               for cell in cells]
        adjusted = with_holm(raw)
        families.append(tuple(CellComparison(cell, baseline.label, candidate.label, result)
                              for cell, result in zip(cells, adjusted, strict=True)))
    return families


def gate(candidate: Group, baseline: Group, cells: Sequence[str], margin: float
         ) -> tuple[CellGate, ...]:
    return tuple(CellGate(cell, non_inferiority(candidate.values(cell), baseline.values(cell),
                                                margin, lower_is_better=lower_is_better(cell)))
                 for cell in cells)


def plan_trials(groups: Sequence[Group], cells: Sequence[str], effect: float, alpha: float
                ) -> tuple[CellPlan, ...]:
    """Trials per variant needed to detect `effect` in each cell, from the observed
    trial-to-trial coefficient of variation (median over the groups that have >= 2 trials)."""
    plans = []
    for cell in cells:
        cvs = []
        for group in groups:
            values = group.values(cell)
            if values.size >= 2 and np.mean(values) != 0:
                cvs.append(float(np.std(values, ddof=1) / abs(np.mean(values))))
        if not cvs:
            continue
        plan = trials_needed(float(np.median(cvs)), effect, alpha)
        floor = min_trials_for_family(len(cells), alpha)
        if plan.trials_per_variant is not None and plan.trials_per_variant < floor:
            plan = dataclasses.replace(
                plan, trials_per_variant=floor,
                warnings=(*plan.warnings, f"raised to {floor}: with Holm over {len(cells)} "
                          f"cells fewer trials can never reach p<{alpha:g}"))
        plans.append(CellPlan(cell, plan))
    return tuple(plans)


def min_trials_for_family(cells: int, alpha: float) -> int:
    """Fewest trials per side for which the smallest Holm-adjusted p can be below alpha."""
    return next(k for k in range(2, 1000) if cells * min_p_value_mann_whitney(k, k) < alpha)


def reachability_warning(trials_per_side: int, cells: int, alpha: float) -> str | None:
    """Can a comparison with this many trials per side ever be significant after Holm?"""
    smallest = min(1.0, cells * min_p_value_mann_whitney(trials_per_side, trials_per_side))
    if smallest < alpha:
        return None
    needed = min_trials_for_family(cells, alpha)
    return (f"{trials_per_side} trial(s) per side over {cells} compared cells can never reach "
            f"p<{alpha:g} (smallest possible Holm-adjusted p {smallest:.3g}); "
            f"use trials >= {needed}")


# ------------------------------------------------------------------------------------------
# text


def format_cell_value(cell: str, value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if cell.startswith("output_throughput"):
        return f"{value:,.1f} tok/s"
    if cell.startswith("request_throughput"):
        return f"{value:,.2f} req/s"
    if cell.startswith("error_rate"):
        return f"{value * 100:.2f}%"
    return format_duration_s(value)


def center_text(group: Group, cell: str) -> str:
    estimate = center_estimate(group, cell)
    if estimate.value is None:
        return "n/a"
    text = format_cell_value(cell, estimate.value)
    if estimate.ci_high is not None and estimate.value:
        half = (estimate.ci_high - estimate.ci_low) / 2 / abs(estimate.value) * 100
        text += f" ±{half:.0f}%"
    return text


def delta_text(result: Comparison) -> str:
    counts = f"n={result.n_a}+{result.n_b}"
    if result.p_adjusted is None:
        return f"? ({counts})"
    p = f"p={result.p_adjusted:.3f}"
    ratio = result.ratio
    if not result.significant or ratio.value is None:
        return f"~ ({p} {counts})"
    text = f"{(ratio.value - 1) * 100:+.1f}%"
    if ratio.ci_low is not None and ratio.ci_high is not None:
        text += f" [{(ratio.ci_low - 1) * 100:+.1f}%, {(ratio.ci_high - 1) * 100:+.1f}%]"
    return f"{text} ({p} {counts})"


def benchstat_table(groups: Sequence[Group], families: Sequence[tuple[CellComparison, ...]],
                    cells: Sequence[str]) -> str:
    """benchstat's layout: center ±CI% per group; delta with its CI, or `~` when not
    significant after Holm; (p=… n=…); footnoted warnings."""
    baseline = groups[0]
    header = ["cell", baseline.label]
    for candidate in groups[1:]:
        header += [candidate.label, f"vs {baseline.label}"]
    rows = [header]
    notes: list[str] = []
    for index, cell in enumerate(cells):
        row = [cell, center_text(baseline, cell)]
        for family, candidate in zip(families, groups[1:], strict=True):
            comparison = family[index].comparison
            marks = ""
            for warning in comparison.warnings:
                if warning not in notes:
                    notes.append(warning)
                marks += f"[{notes.index(warning) + 1}]"
            row += [center_text(candidate, cell), delta_text(comparison) + marks]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [f"[{i}] {note}" for i, note in enumerate(notes, start=1)]
    return "\n".join(lines)
