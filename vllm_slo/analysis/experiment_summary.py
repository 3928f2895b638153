"""An experiment's (trials × variants) or a comparison's (saved runs) summary as one frozen
typed value (pure): per-variant statistics across trials, SLO verdicts from across-trial
confidence intervals, comparisons between groups (benchstat table), trial planning and the
provenance that differs. summary.json is `serialise.to_json(summary)` with the tables laid
out as their text (`vllm_slo/reports/experiment_report.py: summary_document`; schema:
reports/schema/experiment-summary.schema.json); the renderers read the typed value."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from vllm_slo.analysis.comparison import (
    CellComparison,
    CellPlan,
    Group,
    InstanceScope,
    TextTable,
    benchstat_table,
    center_estimate,
    compare_groups,
    family_basis,
    family_reachability_warnings,
    format_change_interval,
    format_judged,
    format_ratio,
    instance_scope,
    judgement_text,
    pair_quantisation,
    pairs_text,
    plan_trials,
    shares_instances,
    within_instance_warning,
)
from vllm_slo.analysis.experiment_design import StopReason, sequential_design
from vllm_slo.analysis.quantised_cells import decision_over_box, pair_bias_log
from vllm_slo.analysis.run_metrics import RunSeries
from vllm_slo.analysis.summary import EchoesScenario, ReportedEstimate, SloEntry
from vllm_slo.analysis.trials import Trial, gpu_set, machines_text, trial_cell_value
from vllm_slo.analysis.verdicts import VerdictScope, choose_exit_code
from vllm_slo.analysis.warmup_sizing import unsized_estimate
from vllm_slo.redaction import redact_secrets
from vllm_slo.scenarios.loader import resolve_variants
from vllm_slo.scenarios.metrics import MetricKind, metric_named
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.slo import SloRule
from vllm_slo.serialise import derive, json_field
from vllm_slo.stats.sequential import (
    CellDecision,
    CellDecisionWord,
    SequentialDesign,
    TrialTest,
    decide_cells,
)
from vllm_slo.stats.statistics import Estimate, Verdict, rate_estimate, slo_verdict

EXPERIMENT_SCHEMA_VERSION = 2  # 2: comparison intervals at the Holm-consistent level
PROVENANCE_KEYS = ("model_id", "vllm_version", "platform", "seed", "max_model_len")
Kind = Literal["experiment", "comparison"]


def _number(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def _optional(estimate: Estimate | None) -> ReportedEstimate | None:
    return None if estimate is None else ReportedEstimate.of(estimate)


@dataclass(frozen=True, slots=True, kw_only=True)
class TrialEntry:
    folder: str  # experiment: the trial folder's name; comparison: the run folder's path
    position: int
    exit_code: int
    invalid_reasons: tuple[str, ...]
    cells: Mapping[str, float | None]  # this trial's statistic per cell (point values)

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons


@dataclass(frozen=True, slots=True, kw_only=True)
class VariantEntry:
    """One variant of an experiment, or one compared run (an experiment's variant)."""

    label: str = json_field(skip=True)  # the key the summary writes it under
    trials: tuple[TrialEntry, ...]
    valid_trials: int = field(init=False)
    # per cell (compared cells, then SLO cells): the trial-level estimate across valid trials,
    # geometric mean with a t interval on logs (t-log-across-trials; raw t when a value <= 0)
    cells: Mapping[str, ReportedEstimate]
    # per cell, the per-trial values the statistics used (`values`)
    trial_values: Mapping[str, list[float]] = field(init=False)
    slos: tuple[SloEntry, ...]
    # experiment only: its `vllm serve` args
    server_args: Mapping[str, Any] | None = json_field(default=None, omit_none=True)

    def __post_init__(self) -> None:
        derive(self, valid_trials=sum(1 for trial in self.trials if trial.valid),
               trial_values={cell: self.values(cell) for cell in self.cells})

    def values(self, cell: str) -> list[float]:
        """The per-trial values the statistics used: valid trials that have one."""
        return [value for trial in self.trials if trial.valid
                for value in (trial.cells.get(cell),) if value is not None]


@dataclass(frozen=True, slots=True, kw_only=True)
class CellComparisonEntry:
    cell: str
    baseline: str
    candidate: str
    # the cell's test: the comparison's (compare.test), or mann-whitney where values <= 0
    test: str = "mann-whitney"
    n_baseline: int
    n_candidate: int
    center_baseline: float | None
    center_candidate: float | None
    p_value: float | None  # two-sided, of `test` on per-trial values
    p_adjusted: float | None  # Holm over the pair's cells
    significant: bool
    # False: the pair has < 2 server instances on a side and no --within-instance, so
    # `significant` decides nothing about configs (comparison.PairBasis)
    decides: bool = True
    alpha: float
    testable: bool  # False: these trial counts can never be significant in this family
    family_size: int  # cells in the pair's Holm family
    holm_factor: int  # the intervals are at 1 - alpha / holm_factor
    interval_confidence: float
    # candidate - baseline / candidate / baseline, intervals at interval_confidence: they
    # exclude 0 / 1 exactly when `significant` (ties: see warnings). welch-log: difference and
    # ratio of geometric means (Welch interval on logs); mann-whitney: Hodges-Lehmann
    shift: ReportedEstimate
    ratio: ReportedEstimate
    # not testable only: the widest interval the trial counts allow (every pairwise
    # difference / ratio), at its own lower level; descriptive, never a verdict
    shift_range: ReportedEstimate | None
    ratio_range: ReportedEstimate | None
    interval_agrees: bool  # False only with ties among per-trial values
    change: str  # the change and the interval shown: "+4.1% [-9.0%, +18.7%]"
    display: str  # the table's cell: "~ +4.1% [-9.0%, +18.7%] (99.2% CI, p=1 n=5+5)"
    warnings: tuple[str, ...]
    decision: DecisionEntry | None = None  # experiments: the design's decision at its last look

    @classmethod
    def of(cls, item: CellComparison) -> CellComparisonEntry:
        result = item.comparison
        return cls(
            cell=item.cell, baseline=item.baseline, candidate=item.candidate, test=result.test,
            n_baseline=int(result.n_a), n_candidate=int(result.n_b),
            center_baseline=_number(result.center_a), center_candidate=_number(result.center_b),
            p_value=_number(result.p_value), p_adjusted=_number(result.p_adjusted),
            significant=bool(result.significant), decides=bool(item.decides),
            alpha=float(result.alpha),
            testable=bool(result.testable), family_size=int(result.family_size),
            holm_factor=int(result.holm_factor),
            interval_confidence=float(result.interval_confidence),
            shift=ReportedEstimate.of(result.shift), ratio=ReportedEstimate.of(result.ratio),
            shift_range=_optional(result.shift_range), ratio_range=_optional(result.ratio_range),
            interval_agrees=bool(result.interval_agrees),
            change=format_change_interval(item.cell, result),
            display=format_judged(item), warnings=tuple(result.warnings))


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionEntry:
    """A compared cell's decision at the experiment's last look (analysis.sequential): changed,
    equivalent within ±compare.effect, or undecided, with that look's Holm-adjusted p-values,
    the nominal level the change test was held to, and the ratio candidate / baseline."""

    decision: CellDecisionWord
    test: str
    trials_per_arm: int  # at the look
    decided_at_trials: int | None  # the look (trials per arm) that decided it
    p_change: float | None
    p_equivalence: float | None
    alpha_look: float
    shown_trials: int = 0  # the look whose test decided the cell (the current one if not)
    p_shown: float | None = None  # that test's unadjusted p there
    level_shown: float = 0.0  # the boundary it was held to there
    effect: float
    ratio: ReportedEstimate  # at the look shown, at its level (CellDecision)
    warnings: tuple[str, ...]

    @classmethod
    def of(cls, item: CellDecision, test: str, trials_per_arm: int, effect: float
           ) -> DecisionEntry:
        return cls(decision=item.decision, test=test, trials_per_arm=trials_per_arm,
                   decided_at_trials=item.decision_trials, p_change=_number(item.p_change),
                   p_equivalence=_number(item.p_equivalence),
                   alpha_look=float(item.alpha_look), shown_trials=item.shown_trials,
                   p_shown=_number(item.p_shown), level_shown=float(item.level_shown),
                   effect=effect, ratio=ReportedEstimate.of(item.ratio),
                   warnings=tuple(item.warnings))

    @property
    def text(self) -> str:
        """The evidence, self-consistent: `changed ×3.02 [×2.61, ×3.49] (p=0.0003 < level
        0.0051 at 4 trials per variant, welch-log)`; `equivalent -1.2% [-6.0%, +3.9%] (within
        ±10%: TOST p=0.002 < level 0.011 at 5 trials per variant, ...)`; an undecided cell's
        current look with `>=`."""
        ratio = self.ratio
        shown = ("" if ratio.value is None
                 else format_ratio(ratio.value, ratio.ci_low, ratio.ci_high) + " ")
        p = self.p_shown
        relation = "<" if self.decision != "undecided" else ">="
        p_text = ("p=–" if p is None
                  else f"p={p:.2g} {relation} level {self.level_shown:.2g}")
        what = (f"within ±{self.effect:.0%}: TOST " if self.decision == "equivalent" else "")
        return (f"{self.decision} {shown}({what}{p_text} at {self.shown_trials} trials per "
                f"variant, {self.test})")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stopping:
    """Why an experiment's rounds ended (the runner writes it to stopping.json after every
    round; the summary echoes it): `rounds` completed (one trial per variant each), `looks`
    taken at the compared cells (from trials.min on)."""

    reason: StopReason
    rounds: int
    looks: int
    min_trials: int
    max_trials: int
    budget_s: float | None
    elapsed_s: float
    detail: str

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> Stopping:
        return cls(reason=data["reason"], rounds=int(data["rounds"]), looks=int(data["looks"]),
                   min_trials=int(data["min_trials"]), max_trials=int(data["max_trials"]),
                   budget_s=data.get("budget_s"), elapsed_s=float(data["elapsed_s"]),
                   detail=str(data.get("detail", "")))

    @property
    def text(self) -> str:
        """`stopped: decided after 4 round(s), 2 look(s) (trials 3-10 per variant)`."""
        span = (f"{self.max_trials}" if self.min_trials == self.max_trials
                else f"{self.min_trials}-{self.max_trials}")
        reason = self.reason.replace("_", " ")
        return (f"stopped: {reason} after {self.rounds} round(s), {self.looks} look(s) "
                f"(trials {span} per variant, {self.elapsed_s / 60:.1f} min)"
                + (f": {self.detail}" if self.detail else ""))


def looks_taken(rounds: int, min_trials: int) -> int:
    """Looks at the compared cells after `rounds` rounds: one per round from trials.min on."""
    return max(0, rounds - min_trials + 1)


def instances_json(scope: InstanceScope) -> dict[str, Any]:
    """A pair's server instances as its comparison states them."""
    return {"baseline": scope.baseline_instances, "candidate": scope.candidate_instances,
            "shared_between_sides": scope.shared_between_sides, "scope": scope.scope,
            "text": scope.text()}


@dataclass(frozen=True, slots=True, kw_only=True)
class ComparisonEntry:
    """One candidate against the baseline, every compared cell (one Holm family). `instances`
    says how many distinct server instances each side's trials ran on, and `scope` whether
    the verdict is between instances or within-instance (comparison.InstanceScope)."""

    baseline: str
    candidate: str
    holm_family: tuple[str, ...] = field(init=False)  # the cells' names
    cells: tuple[CellComparisonEntry, ...]
    instances: InstanceScope | None = json_field(default=None, omit_none=True,
                                                 convert=instances_json)
    # the test, its unit (instance means or trials) and Holm's family, said once per pair:
    # the same words `gate` prints (comparison.judgement_text)
    judgement: str = ""

    def __post_init__(self) -> None:
        derive(self, holm_family=tuple(cell.cell for cell in self.cells))


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanEntry:
    cell: str
    trial_to_trial_cv: float
    test: str = "mann-whitney"  # the test the trials are sized for
    effect: float
    alpha: float
    power: float
    trials_per_variant: int | None  # None: more than the planner's cap
    warnings: tuple[str, ...]
    #: the CV's 95% chi-square interval (`plan` prints the same)
    cv_interval: tuple[float, float] | None = None
    #: trials per variant at the CV's upper bound (None: more than the cap, or no interval)
    trials_at_upper: int | None = None

    @classmethod
    def of(cls, item: CellPlan) -> PlanEntry:
        plan = item.plan
        needed = None if plan.trials_per_variant is None else int(plan.trials_per_variant)
        interval = (None if item.cv_low is None or item.cv_high is None
                    else (float(item.cv_low), float(item.cv_high)))
        return cls(cell=item.cell, trial_to_trial_cv=float(plan.cv), test=plan.test,
                   effect=float(plan.effect), alpha=float(plan.alpha), power=float(plan.power),
                   trials_per_variant=needed, warnings=tuple(plan.warnings),
                   cv_interval=interval, trials_at_upper=item.trials_at_upper)


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderEntry:
    position: int
    variant: str
    folder: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperimentSummary(EchoesScenario):
    """Everything an experiment's (or a comparison's) summary.json holds, in its documented
    key order (`serialise.to_json` writes it). `scenario` is the (redacted) scenario echo;
    `cells` the compared cells, in order."""

    schema_version: int = EXPERIMENT_SCHEMA_VERSION
    kind: Kind
    run_id: str
    scenario: Mapping[str, Any]
    cells: tuple[str, ...] = json_field(skip=True)  # the scenario echo's compare.cells
    trials_per_variant: int
    # comparison only: the run folders, baseline first
    runs: tuple[str, ...] | None = json_field(default=None, omit_none=True)
    # experiment only: execution order
    order: tuple[OrderEntry, ...] | None = json_field(default=None, omit_none=True)
    # experiment only: why its rounds ended (runner's record)
    stopping: Stopping | None = json_field(default=None, omit_none=True)
    variants: tuple[VariantEntry, ...] = json_field(keyed_by="label")  # baseline first
    comparisons: tuple[ComparisonEntry, ...]
    planning: tuple[PlanEntry, ...]
    provenance_differences: Mapping[str, Mapping[str, Any]]  # key -> {label: value}
    # the benchstat-style table, then (an experiment with a design) its decisions; none
    # without a comparison. summary.json's `benchstat` is their text, laid out by the writer
    # (reports/render/tables.py)
    benchstat: tuple[TextTable, ...]
    exit_code: int
    invalid_reasons: tuple[str, ...]
    warnings: tuple[str, ...]


# ------------------------------------------------------------------------------------------
# building


def sized_across_trials(rule: SloRule, trials: Sequence[Trial]) -> SloRule:
    """A warm-up rule across trials: the median of the thresholds the trials sized on their
    own warm-ups (unsized when none did)."""
    thresholds = [entry.rule.threshold for trial in trials for entry in trial.outcome.slos
                  if entry.rule == rule and entry.rule.sized]
    return dataclasses.replace(
        rule, threshold=float(np.median(thresholds)) if thresholds else math.nan)


def slo_across_trials(group: Group, rule: SloRule, confidence: float = 0.95) -> SloEntry:
    """k >= 2 valid trials: decided between trials (scope `between-trials`) from the interval
    across the per-trial statistics; for the error rate, the wider of that interval and the
    exact bounds on the pooled counts (identical per-trial rates, e.g. all zero, still leave
    the counts' uncertainty). One trial: that trial's own verdict (`within-instance`); trials
    that shared a server instance (attach mode, one label) are `within-instance` too."""
    valid = [t for t in group.trials if t.valid]
    if rule.warmup_factor is not None:  # `3x warmup`: each trial sized it on its own warm-up
        rule = sized_across_trials(rule, valid)
        if not rule.sized:
            why = "no valid trial sized the warm-up threshold"
            return SloEntry(rule=rule,
                            observed=ReportedEstimate.of(unsized_estimate(why, confidence)),
                            verdict=Verdict.INCONCLUSIVE, basis=why,
                            scope=VerdictScope.BETWEEN_TRIALS)
    if len(valid) == 1:
        own = next(s for s in valid[0].outcome.slos if s.rule == rule)
        return SloEntry(rule=rule, observed=own.observed, verdict=own.verdict,
                        basis=f"single trial: {own.basis}", scope=VerdictScope.WITHIN_INSTANCE)
    estimate = center_estimate(group, rule.cell, confidence)
    center = ("geometric mean, t interval on logs" if estimate.method == "t-log-across-trials"
              else "mean, t interval (a value <= 0)")
    part = f"part {rule.part!r}: " if rule.part else ""
    basis = f"{part}{estimate.n} trials' {rule.statistic} ({estimate.method}: {center})"
    if metric_named(rule.metric).kind is MetricKind.FRACTION:  # pooled counts too
        judged = [t.series if rule.part is None else t.parts.get(rule.part)
                  for t in valid]
        failed = sum(series.failed for series in judged if series is not None)
        requests = sum(series.requests for series in judged if series is not None)
        pooled = rate_estimate(failed, requests, confidence)
        estimate = _wider(pooled, estimate)
        basis = (f"{failed} of {requests} requests failed over {len(valid)} trials: the wider "
                 f"of the exact bounds on the pooled counts and the interval across trials")
    scope = VerdictScope.BETWEEN_TRIALS
    if group.instances < len(valid):  # trials that shared a server cover no restart variation
        scope = VerdictScope.WITHIN_INSTANCE
        basis += (f"; {len(valid)} trials on {group.instances} server instance(s): "
                  f"within-instance")
    return SloEntry(rule=rule, observed=ReportedEstimate.of(estimate),
                    verdict=slo_verdict(estimate, rule.comparator, rule.threshold), basis=basis,
                    scope=scope)


def _wider(first: Estimate, second: Estimate) -> Estimate:
    """`first`'s value with the union of both intervals (an open side stays open)."""
    if first.ci_low is None or first.ci_high is None:
        return first
    if second.value is None or second.ci_low is None or second.ci_high is None:
        return dataclasses.replace(first, warnings=(*first.warnings, *second.warnings))
    return dataclasses.replace(first, ci_low=min(first.ci_low, second.ci_low),
                               ci_high=max(first.ci_high, second.ci_high),
                               method=f"{first.method}+{second.method}",
                               warnings=(*first.warnings, *second.warnings))


def pooled_series(trials: Sequence[Trial]) -> RunSeries:
    """All valid trials' measured requests together (for distribution plots only)."""
    valid = [t.series for t in trials if t.valid] or [t.series for t in trials]

    def pooled(name: str) -> np.ndarray:
        return np.concatenate([getattr(s, f"{name}_s") for s in valid])

    # the per-request series: every latency metric (metrics.LATENCY_METRICS) and the send lag
    return dataclasses.replace(valid[0], ttft_s=pooled("ttft"), itl_s=pooled("itl"),
                               tpot_s=pooled("tpot"), e2e_s=pooled("e2e"),
                               send_lag_s=pooled("send_lag"))


def _provenance_value(trial: Trial, key: str) -> Any:
    if key == "engine_args":
        return (trial.provenance.get("launch") or {}).get("engine_args")
    if key == "host":
        host = trial.provenance.get("host") or {}
        return {k: host.get(k) for k in ("cpu_model", "gpus")}
    return trial.provenance.get(key)


def provenance_differences(groups: Sequence[Group]) -> dict[str, dict[str, Any]]:
    """Provenance keys whose values differ between groups (label -> the value of the group's
    first trial)."""
    differences: dict[str, dict[str, Any]] = {}
    for key in (*PROVENANCE_KEYS, "host", "engine_args"):
        values = {group.label: _provenance_value(group.trials[0], key)
                  for group in groups if group.trials}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            differences[key] = values
    return differences


def groups_by_variant(trials: Sequence[Trial], order: Sequence[str]) -> list[Group]:
    return [Group(name or "run", tuple(t for t in trials if t.variant == name)) for name in order]


def _variant(group: Group, cells: Sequence[str], folder: str, slos: Sequence[SloEntry] = (),
             server_args: Mapping[str, Any] | None = None) -> VariantEntry:
    """`folder` is "name" (an experiment's trial folders) or "path" (compared run folders).
    Per cell (the compared ones, then the SLOs' own) each trial's value and the trial-level
    estimate, so every verdict can be read next to the trials it came from."""
    cells = tuple(dict.fromkeys([*cells, *(s.rule.cell for s in slos)]))
    trials = tuple(
        TrialEntry(folder=t.run_dir.name if folder == "name" else str(t.run_dir),
                   position=t.position, exit_code=t.outcome.exit_code,
                   invalid_reasons=t.outcome.invalid_reasons,
                   cells={c: _number(trial_cell_value(t, c)) for c in cells})
        for t in group.trials)
    return VariantEntry(
        label=group.label, trials=trials,
        cells={c: ReportedEstimate.of(center_estimate(group, c)) for c in cells},
        slos=tuple(slos), server_args=server_args)


def machines_warning(trials: Sequence[Trial]) -> str | None:
    """When an experiment's trials ran on more than one set of GPUs (resumed on another
    machine), which trials ran where: their comparison includes the machine."""
    where = machines_text([(t.run_dir.name, gpu_set(t.provenance))
                           for t in sorted(trials, key=lambda t: t.position)])
    if where is None:
        return None
    return (f"the trials ran on {where}: a comparison of trials from different machines "
            "includes the machine; an arm whose trials all ran on one machine and another's "
            "on the other confounds the two")


def _excluded_warning(variant: VariantEntry) -> list[str]:
    excluded = len(variant.trials) - variant.valid_trials
    if variant.valid_trials > 0 and excluded:
        return [f"variant {variant.label}: {excluded} invalid trial(s) excluded"]
    return []


@dataclass(frozen=True, slots=True)
class _Compared:
    comparisons: tuple[ComparisonEntry, ...]
    planning: tuple[PlanEntry, ...]
    benchstat: tuple[TextTable, ...]
    reach_warnings: tuple[str, ...]  # per pair, from its actual trial counts
    instance_warnings: tuple[str, ...] = ()  # per pair whose trials shared server instances


def _compare(groups: Sequence[Group], cells: Sequence[str], alpha: float, effect: float,
             test: TrialTest, within_instance: bool = False) -> _Compared:
    families = (compare_groups(groups, cells, alpha, test, within_instance)
                if len(groups) > 1 else [])
    reach = tuple(w for family in families for w in family_reachability_warnings(family))
    shared = tuple(w for candidate in groups[1:]
                   for w in (within_instance_warning(groups[0], candidate),) if w)
    return _Compared(
        tuple(ComparisonEntry(baseline=f[0].baseline, candidate=f[0].candidate,
                              cells=tuple(CellComparisonEntry.of(item) for item in f),
                              instances=instance_scope(groups[0], candidate),
                              judgement=judgement_text(
                                  family_basis(groups[0], candidate, f), f, cells))
              for f, candidate in zip(families, groups[1:], strict=True)),
        tuple(PlanEntry.of(p) for p in plan_trials(groups, cells, effect, alpha, test)),
        (benchstat_table(groups, families, cells),) if families else (), reach, shared)


def round_values(baseline: Group, candidate: Group, cells: Sequence[str]
                 ) -> dict[str, tuple[list[float], list[float]]]:
    """Per cell, each arm's per-trial values in round order (its trials by position), NaN in
    the place of an invalid trial or one without a value: what a look tests."""
    def values(group: Group, cell: str) -> list[float]:
        result = []
        for trial in sorted(group.trials, key=lambda t: t.position):
            value = trial_cell_value(trial, cell) if trial.valid else None
            result.append(math.nan if value is None else value)
        return result

    return {cell: (values(baseline, cell), values(candidate, cell)) for cell in cells}


def look_decisions(design: SequentialDesign, groups: Sequence[Group], cells: Sequence[str],
                   trials_per_arm: int) -> tuple[tuple[str, tuple[CellDecision, ...]], ...]:
    """Each candidate's decisions against the baseline (the first group) at the look after
    `trials_per_arm` rounds: (candidate label, one decision per cell)."""
    baseline = groups[0]
    return tuple((candidate.label, _boxed(design, baseline, candidate, cells, trials_per_arm))
                 for candidate in groups[1:])


def _boxed(design: SequentialDesign, baseline: Group, candidate: Group, cells: Sequence[str],
           trials_per_arm: int) -> tuple[CellDecision, ...]:
    """`decide_cells` of a pair, each quantised cell's decision held against its phase-bias
    box (`quantised_cells.decision_over_box`), so the runner's stopping rule and the summary
    see the box as `compare_pair` does."""
    values = round_values(baseline, candidate, cells)
    quantised = pair_quantisation(baseline, candidate, cells)
    decided = []
    for decision in decide_cells(design, trials_per_arm, values):
        base, cand = values[decision.cell]
        boxed = decision_over_box(decision, base, cand,
                                  pair_bias_log(quantised.get(decision.cell, ())),
                                  design.test, design.effect)
        decided.append(decision if boxed is None else boxed.decision)
    return tuple(decided)


def _with_decisions(comparisons: Sequence[ComparisonEntry], design: SequentialDesign,
                    decided: Sequence[tuple[str, tuple[CellDecision, ...]]], trials_per_arm: int
                    ) -> tuple[ComparisonEntry, ...]:
    by_pair = {(label, d.cell): d for label, decisions in decided for d in decisions}
    result = []
    for comparison in comparisons:
        cells = []
        for entry in comparison.cells:
            decision = by_pair.get((comparison.candidate, entry.cell))
            cells.append(entry if decision is None else dataclasses.replace(
                entry, decision=DecisionEntry.of(decision, design.test, trials_per_arm,
                                                 design.effect)))
        result.append(dataclasses.replace(comparison, cells=tuple(cells)))
    return tuple(result)


def decision_table(comparisons: Sequence[ComparisonEntry], cells: Sequence[str],
                   stopping: Stopping | None, design: SequentialDesign) -> TextTable:
    """The benchstat table's decision rows: per cell, each pair's decision at the last look."""
    def shown(decision: DecisionEntry | None) -> str:
        return "–" if decision is None else decision.text

    rows = tuple((cell, *(shown(comparison.cells[index].decision) for comparison in comparisons))
                 for index, cell in enumerate(cells))
    kind = ("sequential design, O'Brien-Fleming-type alpha spending over the looks"
            if design.sequential else "fixed design, one look")
    notes = [f"decision: {kind}; changed = significant after Holm, equivalent = within "
             f"±{design.effect:.0%} by two one-sided tests, each at alpha "
             f"{design.alpha:g} (docs/statistics.md)"]
    if stopping is not None:
        notes.append(stopping.text)
    return TextTable(
        header=("decision", *(f"{c.candidate} vs {c.baseline}" for c in comparisons)),
        rows=rows, notes=tuple(notes))


def side_by_side_warnings(scenario: Scenario, rounds: int | None = None) -> list[str]:
    """What running the variants at once means for the comparison (the confound), with the
    rotation of device slots each variant saw."""
    spec = scenario.side_by_side
    if spec is None:
        return []
    names = list(scenario.variants)
    rounds = scenario.max_trials if rounds is None else rounds
    seen = {name: [spec.slot_of(k, r) for r in range(rounds)] for k, name in enumerate(names)}
    placement = "; ".join(
        f"{name} on " + ", ".join("[" + ",".join(map(str, slot)) + "]" for slot in slots)
        for name, slots in seen.items())
    warnings = [
        f"side by side: each round's variants ran at the same time, on device slots rotated "
        f"every round ({placement}). They shared this host's CPUs, memory bandwidth and "
        f"interconnect, so a difference can come from running together or from a device as "
        f"well as from the config; run without side_by_side to confirm a finding."]
    if rounds % len(spec.devices):
        warnings.append(
            f"side by side: {rounds} round(s) do not rotate evenly over {len(spec.devices)} "
            f"device slots — a device's own speed is not balanced across variants (use a "
            f"multiple of {len(spec.devices)} trials)")
    return warnings


def build_experiment_summary(scenario: Scenario, trials: Sequence[Trial], run_id: str,
                             interrupted: bool, stopping: Stopping | None = None
                             ) -> tuple[ExperimentSummary, list[Group]]:
    """An experiment folder's summary (its trials in execution order) and its groups; with
    variants and the runner's record of its rounds (`stopping`; an older folder has none),
    each compared cell's decision at the look after the rounds run."""
    arms = resolve_variants(scenario)
    groups = groups_by_variant(trials, list(arms))
    cells = tuple(scenario.compare.cells)
    invalid: list[str] = []
    if interrupted:
        invalid.append("the experiment was interrupted before its planned end")
    variants = []
    warnings: list[str] = []
    for group, arm in zip(groups, arms.values(), strict=True):
        if group.valid_trials == 0:
            invalid.append(f"variant {group.label}: no valid trial")
        slos = ([slo_across_trials(group, rule) for rule in arm.slo.rules()]
                if group.valid_trials else [])
        variants.append(_variant(group, cells, "name", slos,
                                 redact_secrets(arm.server.engine_args)))
        warnings += _excluded_warning(variants[-1])
    compared = _compare(groups, cells, scenario.compare.alpha, scenario.compare.effect,
                        scenario.compare.test)
    pairs = pairs_text(scenario.compare.alpha, len(groups))
    warnings += [pairs] if pairs else []
    design = sequential_design(scenario)
    decides = design is not None and stopping is not None and stopping.rounds > 0
    # with a welch-log design, only cells whose values <= 0 fell back to the table's rank test
    # carry its limit; the design's decisions test their positive values: say whose limit it is
    warnings += [f"{w} (the rank test, which the benchstat table uses where a value <= 0 has "
                 f"no logarithm; the design's decisions use {design.test})"
                 if decides and design is not None and design.test != "mann-whitney" else w
                 for w in compared.reach_warnings]
    warnings += compared.instance_warnings
    machines = machines_warning(trials)
    if machines:
        warnings.append(machines)
    rounds = None if stopping is None else stopping.rounds
    # the rounds whose trials are on disk (an interrupted round's too): where arms ran
    warnings += side_by_side_warnings(
        scenario, None if stopping is None else max((len(g.trials) for g in groups), default=0))
    comparisons, benchstat = compared.comparisons, compared.benchstat
    looked = 0 if rounds is None else min(rounds, scenario.max_trials)
    if design is not None and comparisons and looked > 0 and stopping is not None:
        nested = [candidate.label for candidate in groups[1:]
                  if shares_instances(groups[0], candidate)]
        decided = tuple((label, decisions)
                        for label, decisions in look_decisions(design, groups, cells, looked)
                        if label not in nested)
        warnings += [f"{label} vs {groups[0].label}: trials share server instances, so the "
                     f"design's looks (per-trial values) are not used; the pair is judged on "
                     f"instance means by the table's test and Holm" for label in nested]
        comparisons = _with_decisions(comparisons, design, decided, looked)
        benchstat += (decision_table(comparisons, cells, stopping, design),)
    slos = [slo for variant in variants for slo in variant.slos]
    summary = ExperimentSummary(
        kind="experiment", run_id=run_id, scenario=redact_secrets(scenario.to_yaml_dict()),
        cells=cells,
        trials_per_variant=scenario.max_trials if stopping is None else stopping.rounds,
        variants=tuple(variants), comparisons=comparisons, planning=compared.planning,
        provenance_differences=provenance_differences(groups), benchstat=benchstat,
        exit_code=int(choose_exit_code(slos, invalid)), invalid_reasons=tuple(invalid),
        warnings=tuple(warnings),
        order=tuple(OrderEntry(position=t.position, variant=t.label, folder=t.run_dir.name)
                    for t in sorted(trials, key=lambda t: t.position)),
        stopping=stopping)
    return summary, groups


def build_comparison_summary(groups: Sequence[Group], runs: Sequence[str],
                             cells: Sequence[str] | None, alpha: float, run_id: str,
                             test: TrialTest | None = None, within_instance: bool = False
                             ) -> ExperimentSummary:
    """Saved runs compared (`vllm-slo compare`): one group per run folder (or per variant of
    an experiment folder), the first the baseline. The scenario echo is the baseline's, with
    the compared cells, alpha and test (`test`, default the baseline's `compare.test`);
    planning uses its `compare.effect`. No SLO verdicts: runs are compared, not judged (exit
    code 0)."""
    baseline = groups[0].trials[0].scenario
    cells = tuple(cells or baseline.compare.cells)
    effect = baseline.compare.effect
    test = test or baseline.compare.test
    smallest = min(len(g.values(cells[0])) for g in groups)
    variants = [_variant(group, cells, "path") for group in groups]
    compared = _compare(groups, cells, alpha, effect, test, within_instance)
    warnings = [w for variant in variants for w in _excluded_warning(variant)]
    warnings += [*compared.reach_warnings, *compared.instance_warnings]
    pairs = pairs_text(alpha, len(groups))
    warnings += [pairs] if pairs else []
    scenario = {**baseline.to_yaml_dict(),
                "compare": {"cells": list(cells), "alpha": alpha, "effect": effect,
                            "test": test}}
    return ExperimentSummary(
        kind="comparison", run_id=run_id, scenario=redact_secrets(scenario), cells=cells,
        trials_per_variant=smallest, variants=tuple(variants),
        comparisons=compared.comparisons, planning=compared.planning,
        provenance_differences=provenance_differences(groups), benchstat=compared.benchstat,
        exit_code=0, invalid_reasons=(), warnings=tuple(warnings), runs=tuple(runs))
