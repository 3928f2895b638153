"""Comparisons between groups of trials (variants of one experiment, or saved runs), release
gates and trial planning — pure functions over per-trial statistics. Their wording (the
changes, the judgement, the benchstat-style table) is `analysis/wording.py`, which imports
this module and never the reverse. The unit of comparison is the trial, never the request."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vllm_slo.analysis.quantised_cells import Quantisation, pair_bias_log, quantisation
from vllm_slo.analysis.trials import Trial, instance_key, trial_cell_value
from vllm_slo.scenarios.metrics import lower_is_better
from vllm_slo.stats.plan_uncertainty import instance_units, plan_with_uncertainty, pooled_log_cv
from vllm_slo.stats.statistics import Estimate, Verdict, across_trials_estimate
from vllm_slo.stats.trial_planning import TrialPlan
from vllm_slo.stats.trial_statistics import (
    Comparison,
    NonInferiority,
    TrialTest,
    below_alpha,
    compare_trials,
    smallest_adjusted_p,
    with_holm,
)

WITHIN_INSTANCE = "within-instance"
BETWEEN_INSTANCES = "between-instances"


@dataclass(frozen=True, slots=True)
class Group:
    """Trials that belong together: one variant, or one saved run folder."""

    label: str
    trials: tuple[Trial, ...]

    def values(self, cell: str) -> np.ndarray:
        values = [trial_cell_value(t, cell) for t in self.trials if t.valid]
        return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)

    @property
    def valid_trials(self) -> int:
        return sum(1 for t in self.trials if t.valid)

    def instance_keys(self) -> list[str]:
        """Each valid trial's server instance (`trials.instance_key`; a trial that does not
        say is an instance of its own)."""
        return [instance_key(t) or f"trial {t.run_dir}" for t in self.trials if t.valid]

    @property
    def instances(self) -> int:
        """Distinct server instances among the valid trials."""
        return len(set(self.instance_keys()))

    def instance_values(self, cell: str) -> np.ndarray:
        """One value per distinct instance: the geometric mean of its trials' values (the
        arithmetic mean where a value is <= 0), so trials of one server count once."""
        valid = [t for t in self.trials if t.valid]
        values = [trial_cell_value(trial, cell) for trial in valid]
        return instance_means(
            [math.nan if v is None else v for v in values], self.instance_keys())


def instance_means(values: Sequence[float], keys: Sequence[str]) -> np.ndarray:
    """One value per distinct key (server instance), in first-seen order: the geometric mean
    of its finite values (the arithmetic mean where one is <= 0); a key without a finite value
    has none. Pure: the unit a between-instances comparison tests."""
    by_instance: dict[str, list[float]] = {}
    for value, key in zip(values, keys, strict=True):
        if math.isfinite(value):
            by_instance.setdefault(key, []).append(float(value))
    means = [float(np.exp(np.mean(np.log(v)))) if min(v) > 0 else float(np.mean(v))
             for v in by_instance.values()]
    return np.asarray(means, dtype=float)


@dataclass(frozen=True, slots=True)
class InstanceScope:
    """How many distinct server instances each side of a comparison has, and what the
    between-arm verdict is therefore about: `between-instances` when every trial of both sides
    ran on a server of its own, else `within-instance` (trials of one server are not
    independent instances: a change may be the instances', not the config's)."""

    baseline_trials: int
    candidate_trials: int
    baseline_instances: int
    candidate_instances: int
    shared_between_sides: int  # instances that served trials of both sides

    @property
    def scope(self) -> str:
        independent = (self.baseline_instances == self.baseline_trials
                       and self.candidate_instances == self.candidate_trials
                       and not self.shared_between_sides)
        return BETWEEN_INSTANCES if independent else WITHIN_INSTANCE

    def text(self) -> str:
        """`n=5+5 trials, 1+1 instances: within-instance`."""
        shared = (f", {self.shared_between_sides} serving both sides"
                  if self.shared_between_sides else "")
        return (f"n={self.baseline_trials}+{self.candidate_trials} trials, "
                f"{self.baseline_instances}+{self.candidate_instances} instances{shared}: "
                f"{self.scope}")


def instance_scope(baseline: Group, candidate: Group) -> InstanceScope:
    base_keys, cand_keys = baseline.instance_keys(), candidate.instance_keys()
    return InstanceScope(len(base_keys), len(cand_keys), len(set(base_keys)),
                         len(set(cand_keys)), len(set(base_keys) & set(cand_keys)))


def within_instance_warning(baseline: Group, candidate: Group) -> str | None:
    """The note a within-instance comparison carries (None between instances)."""
    scope = instance_scope(baseline, candidate)
    if scope.scope == BETWEEN_INSTANCES:
        return None
    return (f"{candidate.label} vs {baseline.label}: {scope.text()} — trials that share a "
            f"server instance are not independent instances, so the comparison covers no "
            f"restart-to-restart variation and a difference may be the instances', not the "
            f"config's (run each trial on a fresh server, or label restarts: server.instance, "
            f"`import vllm-bench --instance`)")


#: the decision word of a pair with fewer than 2 server instances on a side
UNDECIDED_WITHIN_INSTANCE = "undecided: within-instance"
#: the flag that asks for a within-instance test by name (compare, gate)
WITHIN_INSTANCE_FLAG = "--within-instance"
MIN_INSTANCES_TO_DECIDE = 2


@dataclass(frozen=True, slots=True)
class PairBasis:
    """What a pair's test compares and whether its verdict decides anything about configs.

    The server instance is the unit: with >= 2 distinct instances on each side the test runs
    on one value per instance (the geometric mean of its trials: `instance_means`), so trials
    of one server count once and the test's variance is the instance-to-instance one. With
    fewer than 2 on a side there is no instance-to-instance variance to test against: the
    estimate is reported, on per-trial values, but the pair decides nothing
    (`undecided: within-instance`) unless a within-instance test was asked for by name
    (`within_instance_asked`, --within-instance), which then decides on per-trial values and
    says so."""

    baseline_instances: int
    candidate_instances: int
    within_instance_asked: bool = False

    @property
    def between_instances(self) -> bool:
        return min(self.baseline_instances,
                   self.candidate_instances) >= MIN_INSTANCES_TO_DECIDE

    @property
    def decides(self) -> bool:
        return self.between_instances or self.within_instance_asked

    @property
    def unit(self) -> str:
        """`instance means` (between instances) or `trials` (within-instance)."""
        return "instance means" if self.between_instances else "trials"

    def text(self) -> str:
        counts = f"{self.baseline_instances}+{self.candidate_instances} instances"
        if self.between_instances:
            return f"tested on instance means ({counts}: one value per server instance)"
        if self.within_instance_asked:
            return (f"within-instance test asked by {WITHIN_INSTANCE_FLAG} ({counts}): "
                    f"decides between these servers, not between configs")
        return (f"{UNDECIDED_WITHIN_INSTANCE} ({counts}; < {MIN_INSTANCES_TO_DECIDE} "
                f"instances on a side: the estimate is shown, nothing is decided about "
                f"configs; {WITHIN_INSTANCE_FLAG} tests these servers by name)")


def pair_basis(baseline: Group, candidate: Group, within_instance: bool = False) -> PairBasis:
    return PairBasis(baseline.instances, candidate.instances, within_instance)


def shares_instances(baseline: Group, candidate: Group) -> bool:
    """A pair judged between instances some of whose trials share one (or serve both
    sides): per-trial values are not its units, instance means are."""
    basis = pair_basis(baseline, candidate)
    scope = instance_scope(baseline, candidate)
    return basis.between_instances and scope.scope != BETWEEN_INSTANCES


def unit_values(group: Group, cell: str, basis: PairBasis) -> np.ndarray:
    """The values a pair's test runs on: one per instance between instances, else one per
    trial."""
    return group.instance_values(cell) if basis.between_instances else group.values(cell)


def judge_values(values: Mapping[str, tuple[np.ndarray, np.ndarray]], alpha: float,
                 test: TrialTest, quantised: Mapping[str, tuple[Quantisation, ...]] | None = None
                 ) -> tuple[tuple[Comparison, ...], tuple[Comparison, ...]]:
    """The one judgement `compare`, experiments and `gate` make of a pair (cell ->
    (baseline's, candidate's) unit values): `test` on every cell, Holm over the cells (one
    family per pair). Returns the Holm-adjusted comparisons (significance; intervals at the
    Holm-consistent level) and the unadjusted ones (each cell's own 1 - alpha interval: what
    a gate's PASS, an intersection-union test, rests on). A cell with quantised sides
    (`quantised`: `quantised_cells.quantisation`) is tested over its phase-bias box
    (`compare_trials`' ``bias_log``), and says so in its warnings."""
    quantised = quantised or {}
    raw = tuple(_quantised(compare_trials(base, cand, alpha=alpha, test=test,
                                          bias_log=pair_bias_log(quantised.get(cell, ()))),
                           quantised.get(cell, ()))
                for cell, (base, cand) in values.items())
    return with_holm(raw), raw


def _quantised(comparison: Comparison, sides: Sequence[Quantisation]) -> Comparison:
    if not sides:
        return comparison
    notes = tuple(f"{q.text()}: tested over a bias of up to ×/÷{math.exp(q.bias_log):.3g} "
                  f"on this side" for q in sides)
    return dataclasses.replace(comparison, warnings=(*comparison.warnings, *notes))


def pair_quantisation(baseline: Group, candidate: Group, cells: Sequence[str]
                      ) -> dict[str, tuple[Quantisation, ...]]:
    """The quantised sides of each cell of a pair (cells without any are left out)."""
    found = {cell: tuple(q for q in (quantisation(baseline.label, baseline.trials, cell),
                                     quantisation(candidate.label, candidate.trials, cell))
                         if q is not None) for cell in cells}
    return {cell: sides for cell, sides in found.items() if sides}


@dataclass(frozen=True, slots=True)
class CellComparison:
    cell: str
    baseline: str
    candidate: str
    comparison: Comparison
    #: False: the pair has < 2 instances on a side and no --within-instance (PairBasis)
    decides: bool = True
    #: the cell's own 1 - alpha comparison, before Holm (a gate's PASS)
    unadjusted: Comparison | None = None


@dataclass(frozen=True, slots=True)
class CellGate:
    """One gated cell: `result` is the interval its verdict rests on (95% for PASS and
    INCONCLUSIVE; a FAIL at its Holm step's level, `1 - alpha / holm_factor`)."""

    cell: str
    result: NonInferiority
    holm_factor: int = 1
    family_size: int = 1
    #: a cell beyond the margin at 1 - alpha, but not after Holm over the family
    not_after_holm: bool = False
    #: the cell's Holm-adjusted comparison: the one `compare` shows for the same folders
    comparison: Comparison | None = None
    #: False: the pair has < 2 instances a side and no --within-instance (PairBasis)
    decides: bool = True


@dataclass(frozen=True, slots=True)
class CellPlan:
    cell: str
    plan: TrialPlan  # at the CV's estimate
    cv_low: float | None = None  # the CV's 95% chi-square interval
    cv_high: float | None = None
    trials_at_upper: int | None = None  # trials per variant at the CV's upper bound


def center_estimate(group: Group, cell: str, confidence: float = 0.95) -> Estimate:
    return across_trials_estimate(group.values(cell), confidence)


def compare_pair(baseline: Group, candidate: Group, cells: Sequence[str], alpha: float,
                 test: TrialTest, within_instance: bool = False
                 ) -> tuple[PairBasis, tuple[CellComparison, ...]]:
    """A candidate against the baseline: `judge_values` on the pair's unit values
    (`pair_basis`). The one function `compare`, experiments and `gate` decide a pair with."""
    basis = pair_basis(baseline, candidate, within_instance)
    adjusted, raw = judge_values(
        {cell: (unit_values(baseline, cell, basis), unit_values(candidate, cell, basis))
         for cell in cells}, alpha, test, pair_quantisation(baseline, candidate, cells))
    return basis, tuple(
        CellComparison(cell, baseline.label, candidate.label, result, basis.decides, own)
        for cell, result, own in zip(cells, adjusted, raw, strict=True))


def per_pair_alpha(alpha: float, arms: int) -> float:
    """The level each pair against the baseline is tested at when an experiment or a compare
    has ``arms`` arms: Bonferroni over its ``arms - 1`` pairs (Holm over each pair's cells),
    so the chance of any false "changed" over every pair and cell stays <= alpha."""
    return alpha / max(1, arms - 1)


def compare_groups(groups: Sequence[Group], cells: Sequence[str], alpha: float = 0.05,
                   test: TrialTest = "mann-whitney", within_instance: bool = False
                   ) -> list[tuple[CellComparison, ...]]:
    """Every group against the first with ``test`` (scenario ``compare.test``: the test the
    sequential decisions and the design check use too), by `compare_pair`; Holm over the
    cells of each pair, each pair at `per_pair_alpha` (Bonferroni over the pairs)."""
    level = per_pair_alpha(alpha, len(groups))
    return [compare_pair(groups[0], candidate, cells, level, test, within_instance)[1]
            for candidate in groups[1:]]


def gate(candidate: Group, baseline: Group, cells: Sequence[str], margin: float,
         alpha: float = 0.05, test: TrialTest = "welch-log", within_instance: bool = False
         ) -> tuple[PairBasis, tuple[CellGate, ...]]:
    """The release gate on `compare_pair`'s judgement of the two groups (the family, the test
    and the instance rule `compare` uses), laid against the margin by `gate_judged`."""
    basis, judged = compare_pair(baseline, candidate, cells, alpha, test, within_instance)
    return basis, gate_judged(judged, margin)


def gate_values(values: Mapping[str, tuple[np.ndarray, np.ndarray]], margin: float,
                alpha: float = 0.05, test: TrialTest = "welch-log") -> tuple[CellGate, ...]:
    """`gate_judged` on `judge_values` of per-cell unit values (cell -> candidate's and
    baseline's values)."""
    adjusted, raw = judge_values({cell: (base, cand) for cell, (cand, base) in values.items()},
                                 alpha, test)
    return gate_judged([CellComparison(cell, "baseline", "candidate", held, True, own)
                        for cell, held, own in zip(values, adjusted, raw, strict=True)], margin)


def _beyond(comparison: Comparison, bound: float, lower_better: bool, *, bad: bool) -> bool:
    """Does the ratio's interval lie wholly on the bad (`bad`) or the good side of `bound`?"""
    ratio = comparison.ratio
    if not comparison.testable or ratio.ci_low is None or ratio.ci_high is None:
        return False
    if lower_better == bad:
        return ratio.ci_low > bound
    return ratio.ci_high < bound


def gate_judged(judged: Sequence[CellComparison], margin: float) -> tuple[CellGate, ...]:
    """Non-inferiority from the pair's one judgement (`judge_values`: the test, Holm over the
    cells). PASS rests on each cell's own 1 - alpha interval lying on the good side of
    1 ± margin (the gate passes only when every cell passes: an intersection-union test needs
    no correction). FAIL is a claim about one cell among many: the cell's Holm-consistent
    interval — the very interval `compare` shows, which excludes 1 exactly when compare calls
    the cell significant — lies wholly beyond the margin. So a gate FAIL is always a
    significant change in the bad direction in `compare` (with margin 0 the two are the
    same), and a cell `compare` does not call significant never FAILs. A pair that decides
    nothing (`PairBasis.decides`: < 2 instances a side) is INCONCLUSIVE in every cell."""
    if not 0.0 <= margin < 1.0 or math.isnan(margin):
        raise ValueError(f"margin must be within [0, 1), got {margin!r}")
    family = sum(1 for item in judged if item.comparison.p_value is not None)
    results = []
    for item in judged:
        lower_better = lower_is_better(item.cell)
        bound = 1.0 + margin if lower_better else 1.0 - margin
        held = item.comparison
        own = item.unadjusted or held
        warnings = list(held.warnings)
        if own.ratio.value is None:
            warnings.append("a ratio needs positive values on both sides")
        if not item.decides:
            verdict, shown, factor, after = Verdict.INCONCLUSIVE, own, 1, False
            warnings.append(UNDECIDED_WITHIN_INSTANCE)
        elif held.significant and _beyond(held, bound, lower_better, bad=True):
            verdict, shown, factor, after = Verdict.FAIL, held, held.holm_factor, False
        elif _beyond(own, bound, lower_better, bad=False):
            verdict, shown, factor, after = Verdict.PASS, own, 1, False
        else:
            verdict, shown, factor = Verdict.INCONCLUSIVE, own, 1
            after = _beyond(own, bound, lower_better, bad=True)
        results.append(CellGate(item.cell, NonInferiority(shown.ratio, margin, verdict,
                                                          tuple(warnings)),
                                factor, max(family, 1), not_after_holm=after,
                                comparison=held, decides=item.decides))
    return tuple(results)


def plan_samples(group: Group, cell: str) -> tuple[list[float], list[str]]:
    """A group's valid trials' values of a cell with each trial's server instance (trials
    without a finite value left out): what `plan` and the experiments' planning table size
    trials from."""
    valid = [t for t in group.trials if t.valid]
    pairs = [(trial_cell_value(trial, cell), key)
             for trial, key in zip(valid, group.instance_keys(), strict=True)]
    kept = [(float(v), key) for v, key in pairs if v is not None and math.isfinite(v)]
    return [v for v, _ in kept], [key for _, key in kept]


def plan_trials(groups: Sequence[Group], cells: Sequence[str], effect: float, alpha: float,
                test: TrialTest = "mann-whitney") -> tuple[CellPlan, ...]:
    """Trials per variant for `test` to detect `effect` in each cell, as `vllm-slo plan`
    sizes them (`stats.plan_uncertainty`): the CV across distinct server instances pooled on
    the log scale over the groups (trials of one instance count once, as their geometric
    mean: repeated runs on one server do not show restart-to-restart variation), with its
    chi-square interval, and the trials at the estimate and at the upper bound, each cell at
    Holm's first-step level over the family (alpha / len(cells)). Cells without an estimate
    (no group with >= 2 instances) are left out."""
    plans = []
    for cell in cells:
        samples = [plan_samples(group, cell) for group in groups]
        units, unit_name = instance_units(samples)
        estimate = pooled_log_cv(units, unit_name)
        if estimate.cv is None:
            continue
        uncertain = plan_with_uncertainty(estimate, effect, alpha, len(cells), test)
        plan, upper = uncertain.at_estimate, uncertain.at_upper
        assert plan is not None  # an estimate has an interval (pooled_log_cv)
        collapsed = [f"{group.label}: {group.valid_trials} trials on {group.instances} "
                     f"instance(s)" for group in groups if group.instances < group.valid_trials]
        notes = list(dict.fromkeys((*plan.warnings, *estimate.warnings)))
        if collapsed:
            notes.append("variation across distinct server instances only (trials of one "
                         "instance collapsed to their mean): " + "; ".join(collapsed))
        floor = min_trials_for_family(len(cells), alpha) if test == "mann-whitney" else 2
        needed = plan.trials_per_variant
        if needed is not None and needed < floor:
            needed = floor
            notes.append(f"raised to {floor}: with Holm over {len(cells)} cells fewer trials "
                         f"can never reach p<{alpha:g}")
        plan = dataclasses.replace(plan, trials_per_variant=needed, warnings=tuple(notes))
        plans.append(CellPlan(cell, plan, estimate.ci_low, estimate.ci_high,
                              None if upper is None else upper.trials_per_variant))
    return tuple(plans)


def min_trials_for_family(cells: int, alpha: float) -> int:
    """Fewest trials per side for which the smallest Holm-adjusted p can be below alpha."""
    return next(k for k in range(2, 1000)
                if below_alpha(smallest_adjusted_p(k, k, cells), alpha))


def reachability_warning(n_a: int, n_b: int, cells: int, alpha: float) -> str | None:
    """Can a comparison of n_a against n_b trials ever be significant after Holm over `cells`?
    The smallest possible Holm-adjusted p is `smallest_adjusted_p`, the number the cells'
    footnotes quote too (`with_holm`)."""
    smallest = smallest_adjusted_p(n_a, n_b, cells)
    if below_alpha(smallest, alpha):
        return None
    needed = min_trials_for_family(cells, alpha)
    counts = f"{n_a} trial(s) per side" if n_a == n_b else f"{n_a} vs {n_b} trials"
    return (f"{counts} over {cells} compared cell(s) can never reach p<{alpha:g} (smallest "
            f"possible Holm-adjusted p={smallest:.2g}); use trials >= {needed} per side")


def family_reachability_warnings(family: Sequence[CellComparison]) -> list[str]:
    """One `reachability_warning` per distinct pair of trial counts among a pair's rank-test
    cells (Welch on logs reaches any p with >= 2 trials a side; Holm's family counts every
    compared cell)."""
    compared = [item.comparison for item in family if item.comparison.p_value is not None]
    counts = dict.fromkeys((c.n_a, c.n_b) for c in compared if c.test == "mann-whitney")
    warnings = []
    for n_a, n_b in counts:
        warning = reachability_warning(n_a, n_b, len(compared), compared[0].alpha)
        if warning:
            warnings.append(f"{family[0].candidate} vs {family[0].baseline}: {warning}")
    return warnings


def family_basis(baseline: Group, candidate: Group, family: Sequence[CellComparison]
                 ) -> PairBasis:
    """The basis a compared pair was judged on (its cells say whether it decides)."""
    basis = pair_basis(baseline, candidate)
    asked = bool(family) and family[0].decides and not basis.between_instances
    return dataclasses.replace(basis, within_instance_asked=asked)
