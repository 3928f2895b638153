"""SLO verdicts from confidence bounds, and the run's exit code (pure).

Every SLO is evaluated before the exit code is chosen: 0 all pass, 1 any fail, 3 inconclusive
(none failed), 4 the measurement is invalid (no successful request, server died, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reports.metrics import RunSeries, RunSummary
from reports.statistics import Estimate, Verdict, percentile_estimate, slo_verdict
from scenarios.errors import ExitCode
from scenarios.slo import SloRule


@dataclass(frozen=True, slots=True)
class SloResult:
    rule: SloRule
    observed: Estimate
    verdict: Verdict


def observed_for(rule: SloRule, series: RunSeries, summary: RunSummary,
                 confidence: float = 0.95) -> Estimate:
    if rule.metric == "error_rate":
        return summary.error_rate
    if rule.metric == "output_throughput":
        return summary.output_tokens_per_s
    if rule.metric == "request_throughput":
        return summary.requests_per_s
    metric = summary.metrics[rule.metric]
    if rule.percentile is None:
        return metric.mean
    known = metric.percentiles.get(rule.percentile)
    if known is not None:
        return known
    return percentile_estimate(series.latency(rule.metric), rule.percentile, confidence)


def evaluate_slos(rules: Sequence[SloRule], series: RunSeries, summary: RunSummary,
                  confidence: float = 0.95) -> tuple[SloResult, ...]:
    results = []
    for rule in rules:
        observed = observed_for(rule, series, summary, confidence)
        results.append(SloResult(rule, observed,
                                 slo_verdict(observed, rule.comparator, rule.threshold)))
    return tuple(results)


def choose_exit_code(results: Sequence[SloResult], invalid_reasons: Sequence[str]) -> ExitCode:
    if invalid_reasons:
        return ExitCode.INVALID_MEASUREMENT
    verdicts = {result.verdict for result in results}
    if Verdict.FAIL in verdicts:
        return ExitCode.SLO_FAILED
    if Verdict.INCONCLUSIVE in verdicts:
        return ExitCode.INCONCLUSIVE
    return ExitCode.PASS


def invalid_measurement_reasons(summary: RunSummary, server_failure: str | None,
                                load_generator_failure: str | None) -> tuple[str, ...]:
    reasons = []
    if server_failure:
        reasons.append(f"server failed during the run: {server_failure.splitlines()[0]}")
    if load_generator_failure:
        reasons.append(f"load generator failed: {load_generator_failure}")
    if summary.ok == 0:
        reasons.append("no successful request in the measured window")
    return tuple(reasons)
