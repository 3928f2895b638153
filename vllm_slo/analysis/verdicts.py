"""SLO verdicts from confidence bounds, why a run's measurement is invalid, and the run's exit
code (pure).

Every SLO is evaluated before the exit code is chosen: 0 all pass, 1 any fail, 3 inconclusive
(none failed), 4 the measurement is invalid (no successful request, server died, ...: every
reason is `invalid_reasons`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

import numpy as np

from vllm_slo.analysis.client_health import ClientHealth
from vllm_slo.analysis.outages import Outage, Stall
from vllm_slo.analysis.prefix_cache import PrefixCacheCheck
from vllm_slo.analysis.run_metrics import RunSeries, RunSummary
from vllm_slo.run_folder.run_status import RunStatus
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.scenarios.metrics import PER_REQUEST_LATENCY_METRICS, MetricKind, metric_named
from vllm_slo.scenarios.slo import SloRule
from vllm_slo.stats.statistics import (
    SECTIONING_METHOD,
    SECTIONS,
    Estimate,
    Verdict,
    clopper_pearson_interval,
    goodput_estimate,
    mean_estimate,
    percentile_estimate,
    quantile_effective_size,
    slo_verdict,
)

INTERRUPTED_REASON = "the run was interrupted before its planned end"
# the runner writes run_status.json and samples.parquet on every way out it controls (end,
# failure, Ctrl-C); a folder with neither was cut short (the runner killed hard) or is running
UNFINISHED_REASON = ("the run did not finish (no run_status.json nor samples.parquet: the "
                     "runner was killed or is still running); the rows on disk are reported")


class VerdictScope(str, Enum):
    """Which variation a verdict's interval covers (docs/statistics.md "Which variation a
    verdict covers"). One run sees one server instance: its intervals cover request-to-request
    variation only, and a restart moved median TTFT by 41% on an H200 — so a single-run verdict
    is not a release-grade decision. With >= 2 trials (each a fresh instance) the interval is
    across trials and covers restart-to-restart variation."""

    WITHIN_INSTANCE = "within-instance"
    BETWEEN_TRIALS = "between-trials"

    @property
    def note(self) -> str:
        if self is VerdictScope.WITHIN_INSTANCE:
            return ("verdicts within one server instance: restart-to-restart variation not "
                    "included (use trials >= 2; `vllm-slo plan RUN` says how many)")
        return ("verdicts between trials: each trial a fresh server instance, so the "
                "intervals include restart-to-restart variation")


@dataclass(frozen=True, slots=True)
class SloResult:
    rule: SloRule
    observed: Estimate
    verdict: Verdict
    basis: str  # how the verdict was reached, for reports


@dataclass(frozen=True, slots=True)
class ThresholdTest:
    """P(X below threshold) with its CI from the effective sample size, against q."""

    fraction_below: float | None
    ci_low: float | None
    ci_high: float | None
    n: int
    n_effective: float
    verdict: Verdict


def percentile_threshold_test(series_time_ordered: np.ndarray, percentile: float,
                              comparator: str, threshold: float, confidence: float = 0.95,
                              observed: Estimate | None = None) -> ThresholdTest:
    """Decide `p{q} <comparator> threshold` by the quantile test (as scipy.stats.quantile_test)
    with the binomial count scaled to the effective sample size of the indicator series
    `x_t < threshold` in time order. It decides from the data around the threshold, so a
    percentile whose point estimate is withheld for lack of tail samples can still clearly
    pass or fail (e.g. every request far above a threshold).

    `observed`: the run summary's `percentile_estimate` of this percentile, if the caller has
    it: its effective size is the one at the observed percentile that the test needs
    (`quantile_effective_size(x, q, np.quantile(x, q))`), reused when it was computed from the
    same values (the summary drops NaNs, the test every non-finite value: equal counts mean no
    infinity), so that a series of 250 M gaps is not analysed twice. Same number either way."""
    x = np.asarray(series_time_ordered, dtype=np.float64)
    finite = np.isfinite(x)
    if not finite.all():
        x = x[finite]
    del finite
    n = x.size
    if n == 0:
        return ThresholdTest(None, None, None, 0, 0.0, Verdict.INCONCLUSIVE)
    q = percentile / 100.0
    below = (x <= threshold) if comparator in ("<=", ">") else (x < threshold)
    fraction = float(np.count_nonzero(below)) / n
    del below
    # the indicator's own autocorrelation, capped by the one at the nearest level with enough
    # exceedances (a constant or nearly constant indicator says nothing about clustering)
    reuse = (observed is not None and observed.value is not None and observed.n == n
             and 0.0 < q < 1.0)
    at_percentile = (observed.n_effective if reuse and observed is not None
                     else quantile_effective_size(x, q, float(np.quantile(x, q))))
    n_eff = min(quantile_effective_size(x, q, threshold), at_percentile)
    low, high = clopper_pearson_interval(fraction * n_eff, n_eff, confidence)
    if comparator in ("<", "<="):  # holds when more than q of the mass lies below
        verdict = (Verdict.PASS if low > q else Verdict.FAIL if high < q
                   else Verdict.INCONCLUSIVE)
    else:  # ">" / ">=": holds when less than q of the mass lies below
        verdict = (Verdict.PASS if high < q else Verdict.FAIL if low > q
                   else Verdict.INCONCLUSIVE)
    return ThresholdTest(fraction, low, high, n, n_eff, verdict)


def observed_for(rule: SloRule, series: RunSeries, summary: RunSummary,
                 confidence: float = 0.95) -> Estimate:
    registered = metric_named(rule.metric)
    if registered.kind is not MetricKind.LATENCY:  # a rate or a fraction: the run's estimate
        if not registered.summary_field:  # a registered rate: from its samples
            return series.rate_estimate(rule.metric, confidence)
        estimate: Estimate = getattr(summary, registered.summary_field)
        return estimate
    metric = summary.metrics.get(rule.metric)
    if metric is None:  # a registered latency (per session): from its samples
        values = series.latency(rule.metric)
        return (mean_estimate(values, confidence) if rule.percentile is None
                else percentile_estimate(values, rule.percentile, confidence))
    if rule.percentile is None:
        return metric.mean
    known = metric.percentiles.get(rule.percentile)
    if known is not None:
        return known
    return percentile_estimate(series.latency(rule.metric), rule.percentile, confidence)


def evaluate_slos(rules: Sequence[SloRule], series: RunSeries, summary: RunSummary,
                  confidence: float = 0.95,
                  parts: Mapping[str, tuple[RunSeries, RunSummary]] | None = None
                  ) -> tuple[SloResult, ...]:
    """Every rule's verdict: a whole-run rule on `series`/`summary`, a part's rule
    (`rule.part`: a mix's part, `adapter:NAME` a LoRA mix's) on that part's own (`parts`,
    from `series_by_profile` / `series_by_adapter`); a part without measured requests leaves
    its rules INCONCLUSIVE."""
    results = []
    for rule in rules:
        part = rule.part
        if part is None:
            results.append(_evaluate(rule, series, summary, confidence))
        elif parts and part in parts:
            results.append(_evaluate(rule, *parts[part], confidence))
        else:
            results.append(SloResult(
                rule, Estimate(None, None, None, confidence, 0, 0.0, "none",
                               (f"no measured requests of part {part!r}",)),
                Verdict.INCONCLUSIVE, f"no measured requests of part {part!r}"))
    return tuple(results)


def _evaluate(rule: SloRule, series: RunSeries, summary: RunSummary, confidence: float
              ) -> SloResult:
    observed = observed_for(rule, series, summary, confidence)
    if rule.percentile is not None and metric_named(rule.metric).kind is MetricKind.LATENCY:
        known = summary.metrics.get(rule.metric)
        test = percentile_threshold_test(
            series.latency(rule.metric), rule.percentile, rule.comparator, rule.threshold,
            confidence, None if known is None else known.percentiles.get(rule.percentile))
        if test.fraction_below is None:
            part = f" of part {rule.part!r}" if rule.part else ""
            basis = f"no {rule.metric} sample in the measured window{part}"
        else:
            needs = "more" if rule.comparator[0] == "<" else "less"
            unit = f"{metric_named(rule.metric).sampled_per}s"
            basis = (f"{test.fraction_below:.1%} of {test.n} {unit} below the threshold "
                     f"[{test.ci_low:.1%}, {test.ci_high:.1%}] at ~{test.n_effective:.0f} "
                     f"effective samples; needs {needs} than {rule.percentile / 100:.1%}")
        if test.verdict is Verdict.INCONCLUSIVE and observed.method == SECTIONING_METHOD:
            # too few effective samples beyond the percentile for either order-statistic
            # reasoning: the sectioning interval decides what it clearly can
            sectioned = slo_verdict(observed, rule.comparator, rule.threshold)
            if sectioned is not Verdict.INCONCLUSIVE:
                return SloResult(rule, observed, sectioned, (
                    f"{observed.confidence:.0%} CI vs threshold ({SECTIONING_METHOD}: "
                    f"{SECTIONS} time blocks; the share below the threshold, {basis}, "
                    "could not decide)"))
        return SloResult(rule, observed, test.verdict, basis)
    basis = (f"{observed.confidence:.0%} CI vs threshold ({observed.method})"
             if observed.value is not None else "; ".join(observed.warnings))
    return SloResult(rule, observed, slo_verdict(observed, rule.comparator, rule.threshold),
                     basis)



def goodput(rules: Sequence[SloRule], series: RunSeries, confidence: float = 0.95,
            measured_adapter: np.ndarray | None = None) -> tuple[Estimate, str]:
    """Requests per second that met every per-request latency SLO threshold (ttft, tpot, e2e
    rules with < or <=; ITL is per gap, not per request), among the requests request
    throughput counts (successful, completed inside the rate span: `RunSeries.counted_*`),
    over the same span: goodput <= request throughput by construction. A part's rule
    (`slo.by_profile`) holds its own part's requests to it, no others; so does an adapter's
    (`slo.by_adapter`), by each counted request's adapter (`RunSeries.counted_adapter`;
    `measured_adapter` is read only for a series built without rows, where it is aligned
    with the `measured_*` arrays)."""
    counted = series.counted_end_unix_s is not None
    if counted:
        met = np.ones(series.counted_latency_s["e2e"].size, dtype=bool)
        latency, profile = series.counted_latency_s, series.counted_profile
        adapter: np.ndarray | None = series.counted_adapter
    else:
        met = series.measured_ok.copy()
        latency, profile, adapter = (series.measured_latency_s, series.measured_profile,
                                     measured_adapter)
    criteria = []
    for rule in rules:
        if rule.metric in PER_REQUEST_LATENCY_METRICS and rule.comparator in ("<", "<="):
            values = latency[rule.metric]
            with np.errstate(invalid="ignore"):
                within = values < rule.threshold if rule.comparator == "<" else (
                    values <= rule.threshold)
            if rule.profile is not None:
                within |= profile != rule.profile
            if rule.adapter is not None:
                others = (np.ones(met.size, dtype=bool) if adapter is None
                          else adapter != rule.adapter)
                within |= others
            met &= within
            part = f"{rule.part} " if rule.part else ""
            criteria.append(f"{part}{rule.metric} {rule.comparator} {rule.threshold:g}s")
    if counted:
        assert series.counted_end_unix_s is not None
        span_s = float(series.bin_widths().sum())  # the float request throughput divides by
        estimate = goodput_estimate(met, series.counted_end_unix_s, span_s, confidence)
    else:
        estimate = goodput_estimate(met, series.measured_send_unix_s, series.window_s,
                                    confidence)
    described = ("successful requests meeting " + " and ".join(criteria) if criteria
                 else "successful requests (no per-request latency SLO declared)")
    return estimate, described


class Decided(Protocol):
    """Anything carrying an SLO verdict (a run's SloResult, a summary's SloEntry)."""

    @property
    def verdict(self) -> Verdict: ...


def choose_exit_code(results: Sequence[Decided], invalid_reasons: Sequence[str]) -> ExitCode:
    if invalid_reasons:
        return ExitCode.INVALID_MEASUREMENT
    verdicts = {result.verdict for result in results}
    if Verdict.FAIL in verdicts:
        return ExitCode.SLO_FAILED
    if Verdict.INCONCLUSIVE in verdicts:
        return ExitCode.INCONCLUSIVE
    return ExitCode.PASS


def invalid_measurement_reasons(summary: RunSummary, server_failure: str | None,
                                load_generator_failure: str | None,
                                max_client_send_lag_p99_s: float | None = None
                                ) -> tuple[str, ...]:
    reasons = []
    lag = summary.client_send_lag_p99_s
    if max_client_send_lag_p99_s is not None and lag is not None and (
            lag > max_client_send_lag_p99_s):
        reasons.append(
            f"client-limited: p99 send lag {lag * 1e3:.1f} ms exceeds "
            f"{max_client_send_lag_p99_s * 1e3:.0f} ms (the load generator could not send on "
            f"time; use more Locust processes or a lower rate)")
    if server_failure:
        reasons.append(f"server failed during the run: {server_failure.splitlines()[0]}")
    if load_generator_failure:
        reasons.append(f"load generator failed: {load_generator_failure}")
    if summary.ok == 0:
        reasons.append("no successful request in the measured window")
    return tuple(reasons)


def invalid_reasons(summary: RunSummary, status: RunStatus, *,
                    max_client_send_lag_p99_s: float | None, health: ClientHealth,
                    outages: Sequence[Outage], stalls: Sequence[Stall],
                    run_start_unix_s: float, status_damage: str | None, unfinished: bool,
                    prefix_cache: PrefixCacheCheck | None) -> tuple[str, ...]:
    """Every reason the run's measurement is invalid (exit code 4; none: it is valid), in the
    order summary.json lists them: the measurement's own (send lag, server or load generator
    failure, no success), the client's health, the server's outages and stalls, an abort, an
    interruption, a damaged run_status.json or else an unfinished run (`unfinished`: neither
    run_status.json nor samples.parquet was written), a missed prefix-cache target."""
    reasons = [*invalid_measurement_reasons(summary, status.server_failure,
                                            status.load_generator_failure,
                                            max_client_send_lag_p99_s),
               *health.reasons,
               *(outage.reason(run_start_unix_s) for outage in outages),
               # a frozen server refuses nothing: its requests hang until a timeout cuts them
               *(stall.reason(run_start_unix_s) for stall in stalls)]
    if status.aborted:
        reasons.append(f"aborted by abort_on: {status.aborted}")
    if status.interrupted:
        reasons.append(INTERRUPTED_REASON)
    if status_damage is not None:
        reasons.append(status_damage)
    elif unfinished:
        reasons.append(UNFINISHED_REASON)
    if prefix_cache is not None and prefix_cache.missed:
        reasons.append(prefix_cache.reason)
    return tuple(reasons)
