"""summary.json: the run's numbers in one schema-versioned, documented document
(reports/schema/summary.schema.json), as a frozen typed value. `build_summary` makes it once
from typed results; `serialise.to_json(document)` is its one serialisation; the renderers
(HTML, text, Markdown, JUnit) read the typed value, never the JSON."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_slo.analysis.chunk_tokens import StreamFacts
from vllm_slo.analysis.client_health import ClientHealth
from vllm_slo.analysis.prefix_cache import PrefixCacheCheck
from vllm_slo.analysis.run_metrics import MetricSummary, RunSummary, summarize_metric
from vllm_slo.analysis.server_crosscheck import LatencyCrosscheck
from vllm_slo.analysis.sessions import SessionSeries
from vllm_slo.analysis.trace_fidelity import TraceFidelity
from vllm_slo.analysis.verdicts import SloResult, VerdictScope
from vllm_slo.redaction import redact_secrets
from vllm_slo.scenarios.metrics import LATENCY_METRICS
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.slo import SloRule
from vllm_slo.scenarios.traffic_spec import OPEN_LOOP_KINDS
from vllm_slo.serialise import json_field
from vllm_slo.stats.statistics import Estimate, Verdict

SUMMARY_SCHEMA_VERSION = 1


def _number(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportedEstimate:
    """An `Estimate` as the reports carry it: non-finite numbers become None (JSON has no NaN),
    so every renderer sees exactly what summary.json holds."""

    value: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    n: int
    n_effective: float | None
    method: str
    warnings: tuple[str, ...]

    @classmethod
    def of(cls, estimate: Estimate) -> ReportedEstimate:
        return cls(value=_number(estimate.value), ci_low=_number(estimate.ci_low),
                   ci_high=_number(estimate.ci_high), confidence=float(estimate.confidence),
                   n=int(estimate.n), n_effective=_number(estimate.n_effective),
                   method=estimate.method, warnings=tuple(estimate.warnings))

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> ReportedEstimate:
        return cls(value=data["value"], ci_low=data["ci_low"], ci_high=data["ci_high"],
                   confidence=data["confidence"], n=data["n"], n_effective=data["n_effective"],
                   method=data["method"], warnings=tuple(data["warnings"]))


@dataclass(frozen=True, slots=True)
class RunRates:
    """The rates a run's summary.json reports, read back typed (what `vllm-slo tune` ranks
    its candidates by); summary.json holds them (RunSummaryDocument)."""

    # requests per second, of those requests_per_s counts, that met every per-request latency
    # SLO, over the same span (rate_span_s): never above requests_per_s
    goodput: ReportedEstimate
    output_tokens_per_s: ReportedEstimate
    requests_per_s: ReportedEstimate

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> RunRates:
        throughput = data["throughput"]
        return cls(
            goodput=ReportedEstimate.from_json_dict(data["goodput"]["requests_per_s"]),
            output_tokens_per_s=ReportedEstimate.from_json_dict(throughput["output_tokens_per_s"]),
            requests_per_s=ReportedEstimate.from_json_dict(throughput["requests_per_s"]))


def rule_json(rule: SloRule) -> dict[str, Any]:
    """An SLO rule as its entry states it (threshold null: a warm-up rule not sized; adapter
    only where the rule names one)."""
    return {"metric": rule.metric, "statistic": rule.statistic, "comparator": rule.comparator,
            "threshold": rule.threshold if rule.sized else None, "text": rule.text,
            "profile": rule.profile,
            **({"adapter": rule.adapter} if rule.adapter is not None else {})}


@dataclass(frozen=True, slots=True, kw_only=True)
class SloEntry:
    """One SLO with its observed statistic, verdict and how the verdict was reached (a run's
    SLO, or an experiment variant's across its trials: the JSON shape is the same)."""

    rule: SloRule = json_field(convert=rule_json, flatten=True)
    observed: ReportedEstimate
    verdict: Verdict
    basis: str
    scope: VerdictScope = VerdictScope.WITHIN_INSTANCE

    @classmethod
    def of(cls, result: SloResult,
           scope: VerdictScope = VerdictScope.WITHIN_INSTANCE) -> SloEntry:
        return cls(rule=result.rule, observed=ReportedEstimate.of(result.observed),
                   verdict=result.verdict, basis=result.basis, scope=scope)

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> SloEntry:
        threshold = data["threshold"]  # null: a warm-up rule that could not be sized
        rule = SloRule(data["metric"], data["statistic"], data["comparator"],
                       math.nan if threshold is None else float(threshold), data["text"],
                       data.get("profile"))
        return cls(rule=rule, observed=ReportedEstimate.from_json_dict(data["observed"]),
                   verdict=Verdict(data["verdict"]), basis=data["basis"],
                   scope=VerdictScope(data.get("scope", VerdictScope.WITHIN_INSTANCE.value)))


def percentile_key(percentile: float) -> str:
    return f"p{percentile:g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricEntry:
    """A latency metric's count, mean and reported percentiles (keys `p50`, `p99.9`, ...)."""

    unit: str = "s"
    count: int
    mean: ReportedEstimate
    percentiles: Mapping[str, ReportedEstimate]


def metric_entry(metric: MetricSummary) -> MetricEntry:
    """A latency metric as reported (count, mean, percentiles)."""
    return MetricEntry(
        count=metric.count, mean=ReportedEstimate.of(metric.mean),
        percentiles={percentile_key(q): ReportedEstimate.of(e)
                     for q, e in metric.percentiles.items()})


def metric_entries(summary: RunSummary) -> dict[str, MetricEntry]:
    """Every latency metric of a run summary as reported (count, mean, percentiles)."""
    return {name: metric_entry(summary.metrics[name]) for name in LATENCY_METRICS}


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionsEntry:
    """The agent profile's sessions that started in the measured window
    (`analysis/sessions.py`): how many completed, failed or were cut by the run's end, and of
    the complete ones their turns, their durations (`session_e2e`) and each turn's TTFT."""

    complete: int
    failed: int
    cut: int
    turns_mean: float | None
    duration: MetricEntry
    ttft_by_turn: tuple[MetricEntry, ...]

    @classmethod
    def of(cls, sessions: SessionSeries, confidence: float = 0.95) -> SessionsEntry | None:
        """None for a run without sessions."""
        if sessions.counted == 0:
            return None
        return cls(
            complete=sessions.complete, failed=sessions.failed, cut=sessions.cut,
            turns_mean=float(sessions.turns.mean()) if sessions.turns.size else None,
            duration=metric_entry(summarize_metric("session_e2e", sessions.e2e_s, confidence)),
            ttft_by_turn=tuple(metric_entry(summarize_metric("ttft", values, confidence))
                               for values in sessions.ttft_by_turn_s))


@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileEntry:
    """One part of a mix (`traffic.profile: mix`), or one name of a LoRA mix
    (`traffic.lora`: base or an adapter), measured on its own requests."""

    requests: RequestCounts
    output_tokens_per_s: ReportedEstimate
    metrics: Mapping[str, MetricEntry]

    @classmethod
    def of(cls, summary: RunSummary) -> ProfileEntry:
        return cls(requests=RequestCounts.of(summary),
                   output_tokens_per_s=ReportedEstimate.of(summary.output_tokens_per_s),
                   metrics=metric_entries(summary))


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestCounts:
    measured: int
    ok: int
    failed: int
    errors_by_kind: Mapping[str, int]

    @classmethod
    def of(cls, summary: RunSummary) -> RequestCounts:
        return cls(measured=summary.requests, ok=summary.ok, failed=summary.failed,
                   errors_by_kind=summary.errors_by_kind)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientCpu:
    """Load-generator CPU per process-second, in % of one core."""

    p50_percent: float
    p99_percent: float
    max_percent: float
    samples: int


def client_cpu_summary(fractions: Sequence[float]) -> ClientCpu | None:
    """From per-process-second CPU fractions (None before it was recorded)."""
    if not fractions:
        return None
    values = np.asarray(fractions) * 100.0
    return ClientCpu(p50_percent=float(np.percentile(values, 50)),
                     p99_percent=float(np.percentile(values, 99)),
                     max_percent=float(values.max()), samples=int(values.size))


@dataclass(frozen=True, slots=True, kw_only=True)
class TrafficFacts:
    """How the load was actually applied: intended vs achieved rate, send lag, in-flight cap
    hits, the request plan (trimmed/rejected/filtered prompts) and the prefix-cache state."""

    profile: str
    endpoint: str
    arrival: str
    intended_rate_per_s: float | None  # None: closed loop (the server sets it) or stages
    sent_per_s: float | None
    send_lag_p50_s: float | None
    send_lag_p99_s: float | None
    client_send_lag_p99_s: float | None
    queued_for_slot: int
    reused_prompts: int
    plan: Mapping[str, Any] | None  # provenance's request-plan facts, as recorded
    prefix_cache_reset: Any
    prefix_cache_hit_rate: float | None
    client_cpu: ClientCpu | None
    # traffic.prefix_cache.target_hit_rate's check; None: no target set
    prefix_cache: PrefixCacheCheck | None = json_field(default=None, omit_none=True)
    # profile trace: the trace's window against what was sent and what vLLM counted
    trace: TraceFidelity | None = json_field(default=None, omit_none=True)


def traffic_facts(scenario: Scenario, provenance: Mapping[str, Any], summary: RunSummary,
                  client_cpu: ClientCpu | None = None,
                  prefix_cache_hit_rate: float | None = None,
                  prefix_cache: PrefixCacheCheck | None = None,
                  trace: TraceFidelity | None = None) -> TrafficFacts:
    traffic = scenario.traffic
    arrival = traffic.arrival
    return TrafficFacts(
        profile=traffic.profile, endpoint=traffic.endpoint, arrival=arrival.kind,
        intended_rate_per_s=arrival.rate if arrival.kind in OPEN_LOOP_KINDS else None,
        sent_per_s=_number(summary.sent_per_s), send_lag_p50_s=_number(summary.send_lag_p50_s),
        send_lag_p99_s=_number(summary.send_lag_p99_s),
        client_send_lag_p99_s=_number(summary.client_send_lag_p99_s),
        queued_for_slot=summary.queued_for_slot, reused_prompts=summary.reused_prompts,
        plan=provenance.get("plan"), prefix_cache_reset=provenance.get("prefix_cache_reset"),
        prefix_cache_hit_rate=_number(prefix_cache_hit_rate),
        client_cpu=client_cpu, prefix_cache=prefix_cache, trace=trace)


class EchoesScenario:
    """A document that echoes its scenario: the name and description renderers show."""

    __slots__ = ()
    scenario: Mapping[str, Any]

    @property
    def scenario_name(self) -> str:
        return str(self.scenario["name"])

    @property
    def description(self) -> str:
        return str(self.scenario.get("description") or "")


def scope_json(scope: VerdictScope) -> dict[str, str]:
    return {"scope": scope.value, "note": scope.note}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummaryDocument(EchoesScenario):
    """Everything summary.json holds, in its documented key order (`serialise.to_json` writes
    it; `by_profile` only for a mix, `by_adapter` only for a LoRA mix). `scenario` and
    `provenance` are the (redacted) echoes of the run folder's files; everything the suite
    computed is typed."""

    schema_version: int = SUMMARY_SCHEMA_VERSION
    run_id: str
    scenario: Mapping[str, Any]
    provenance: Mapping[str, Any]
    window_s: float
    requests: RequestCounts
    error_rate: ReportedEstimate
    output_tokens_per_s: ReportedEstimate = json_field(group="throughput")
    requests_per_s: ReportedEstimate = json_field(group="throughput")
    # the seconds the rates are over: the window, or less for a run cut short
    rate_span_s: float = json_field(group="throughput")
    # req/s: the requests requests_per_s counts that met every per-request SLO, over the same
    # rate_span_s (analysis/verdicts.goodput), so never above requests_per_s
    goodput: ReportedEstimate = json_field(group="goodput", key="requests_per_s")
    goodput_counts: str = json_field(group="goodput", key="counts")  # which requests counted
    send_lag_p99_s: float | None
    traffic: TrafficFacts
    client_health: ClientHealth | None = None  # None: a document built without the rows
    server_crosscheck: LatencyCrosscheck | None = None  # None: no vLLM histograms
    metrics: Mapping[str, MetricEntry]
    # tokens per chunk and reasoning (None: not computed)
    stream: StreamFacts | None = json_field(default=None, omit_none=True)
    # profile agent: the measured window's sessions (None: a run without sessions)
    sessions: SessionsEntry | None = json_field(default=None, omit_none=True)
    # a mix's parts; None: one profile
    by_profile: Mapping[str, ProfileEntry] | None = json_field(default=None, omit_none=True)
    # traffic.lora's names; None: no split
    by_adapter: Mapping[str, ProfileEntry] | None = json_field(default=None, omit_none=True)
    slos: tuple[SloEntry, ...]
    # a run's verdicts are within its one server instance (stated with its note)
    verdict_scope: VerdictScope = json_field(default=VerdictScope.WITHIN_INSTANCE,
                                             init=False, convert=scope_json)
    exit_code: int
    invalid_reasons: tuple[str, ...]
    warnings: tuple[str, ...]


def build_summary(
    *,
    run_id: str,
    scenario: Scenario,
    provenance: Mapping[str, Any],
    summary: RunSummary,
    slo_results: Sequence[SloResult],
    exit_code: int,
    invalid_reasons: Sequence[str],
    goodput: tuple[Estimate, str],
    client_cpu: ClientCpu | None = None,
    prefix_cache_hit_rate: float | None = None,
    prefix_cache: PrefixCacheCheck | None = None,
    trace: TraceFidelity | None = None,
    client_health: ClientHealth | None = None,
    server_crosscheck: LatencyCrosscheck | None = None,
    by_profile: Mapping[str, RunSummary] | None = None,
    by_adapter: Mapping[str, RunSummary] | None = None,
    sessions: SessionSeries | None = None,
    warnings: Sequence[str],
) -> RunSummaryDocument:
    """The run's document. The scenario and provenance echoes are redacted here
    (`redaction.redact_secrets`), so nothing built from the document can show a credential."""
    provenance = redact_secrets(dict(provenance))
    metrics = metric_entries(summary)
    return RunSummaryDocument(
        run_id=run_id,
        scenario=redact_secrets(scenario.to_yaml_dict()),
        provenance=provenance,
        window_s=summary.window_s,
        requests=RequestCounts.of(summary),
        error_rate=ReportedEstimate.of(summary.error_rate),
        output_tokens_per_s=ReportedEstimate.of(summary.output_tokens_per_s),
        requests_per_s=ReportedEstimate.of(summary.requests_per_s),
        goodput=ReportedEstimate.of(goodput[0]), goodput_counts=goodput[1],
        send_lag_p99_s=_number(summary.send_lag_p99_s),
        traffic=traffic_facts(scenario, provenance, summary, client_cpu,
                              prefix_cache_hit_rate, prefix_cache, trace),
        metrics=metrics,
        slos=tuple(SloEntry.of(r) for r in slo_results),
        exit_code=int(exit_code),
        invalid_reasons=tuple(invalid_reasons),
        warnings=(*summary.warnings, *warnings),
        client_health=client_health,
        server_crosscheck=server_crosscheck,
        by_profile=({name: ProfileEntry.of(part) for name, part in by_profile.items()}
                    if by_profile else None),
        by_adapter=({name: ProfileEntry.of(part) for name, part in by_adapter.items()}
                    if by_adapter else None),
        rate_span_s=summary.rate_span_s,
        stream=summary.stream,
        sessions=None if sessions is None else SessionsEntry.of(sessions),
    )
