"""An SLO judged across an experiment's trials (pure): between trials from the interval across
the per-trial statistics (each trial a fresh server instance), a warm-up rule at the median of
the thresholds the trials sized, one trial's own verdict when it is the only valid one."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from vllm_slo.analysis.comparison import Group, center_estimate
from vllm_slo.analysis.summary import ReportedEstimate, SloEntry
from vllm_slo.analysis.trials import Trial
from vllm_slo.analysis.verdicts import VerdictScope
from vllm_slo.analysis.warmup_sizing import unsized_estimate
from vllm_slo.scenarios.metrics import MetricKind, metric_named
from vllm_slo.scenarios.slo import SloRule
from vllm_slo.stats.statistics import Estimate, Verdict, rate_estimate, slo_verdict


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
