"""summary.json: the run's numbers in one schema-versioned, documented document
(reports/schema/summary.schema.json). Built from typed results; renderers read only this and
the run's series."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from vllm_slo.reports.analysis.run_metrics import LATENCY_METRICS, RunSummary
from vllm_slo.reports.analysis.statistics import Estimate
from vllm_slo.reports.analysis.verdicts import SloResult

SUMMARY_SCHEMA_VERSION = 1


def _number(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    return float(value)


def estimate_dict(estimate: Estimate) -> dict[str, Any]:
    return {
        "value": _number(estimate.value),
        "ci_low": _number(estimate.ci_low),
        "ci_high": _number(estimate.ci_high),
        "confidence": estimate.confidence,
        "n": estimate.n,
        "n_effective": _number(estimate.n_effective),
        "method": estimate.method,
        "warnings": list(estimate.warnings),
    }


def percentile_key(percentile: float) -> str:
    return f"p{percentile:g}"


def traffic_facts(scenario: dict[str, Any], provenance: dict[str, Any], summary: RunSummary,
                  client_cpu: dict[str, float] | None = None) -> dict[str, Any]:
    """How the load was actually applied: intended vs achieved rate, send lag, in-flight cap
    hits, the request plan (trimmed/rejected/filtered prompts) and the prefix-cache state."""
    traffic = scenario["traffic"]
    arrival = traffic["arrival"]
    if arrival["kind"] in ("poisson", "gamma", "constant"):
        intended = arrival["rate"]
    elif arrival["kind"] == "stages" and arrival["stages"][0].get("rate") is not None:
        intended = None  # varies by stage
    else:
        intended = None  # closed loop: the server's speed sets the rate
    return {
        "profile": traffic["profile"],
        "endpoint": traffic["endpoint"],
        "arrival": arrival["kind"],
        "intended_rate_per_s": intended,
        "sent_per_s": _number(summary.sent_per_s),
        "send_lag_p50_s": _number(summary.send_lag_p50_s),
        "send_lag_p99_s": _number(summary.send_lag_p99_s),
        "client_send_lag_p99_s": _number(summary.client_send_lag_p99_s),
        "queued_for_slot": summary.queued_for_slot,
        "reused_prompts": summary.reused_prompts,
        "plan": provenance.get("plan"),
        "prefix_cache_reset": provenance.get("prefix_cache_reset"),
        "prefix_cache_hit_rate": _number(provenance.get("prefix_cache_hit_rate")),
        "client_cpu": client_cpu,
    }


def build_summary(
    *,
    run_id: str,
    scenario: dict[str, Any],
    provenance: dict[str, Any],
    summary: RunSummary,
    slo_results: Sequence[SloResult],
    exit_code: int,
    invalid_reasons: Sequence[str],
    goodput: tuple[Estimate, str],
    client_cpu: dict[str, float] | None = None,
    warnings: Sequence[str],
) -> dict[str, Any]:
    metrics = {}
    for name in LATENCY_METRICS:
        metric = summary.metrics[name]
        metrics[name] = {
            "unit": "s",
            "count": metric.count,
            "mean": estimate_dict(metric.mean),
            "percentiles": {percentile_key(q): estimate_dict(e)
                            for q, e in metric.percentiles.items()},
        }
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "run_id": run_id,
        "scenario": scenario,
        "provenance": provenance,
        "window_s": summary.window_s,
        "requests": {"measured": summary.requests, "ok": summary.ok, "failed": summary.failed,
                     "errors_by_kind": summary.errors_by_kind},
        "error_rate": estimate_dict(summary.error_rate),
        "throughput": {
            "output_tokens_per_s": estimate_dict(summary.output_tokens_per_s),
            "requests_per_s": estimate_dict(summary.requests_per_s),
        },
        "goodput": {"requests_per_s": estimate_dict(goodput[0]), "counts": goodput[1]},
        "send_lag_p99_s": _number(summary.send_lag_p99_s),
        "traffic": traffic_facts(scenario, provenance, summary, client_cpu),
        "metrics": metrics,
        "slos": [
            {"metric": r.rule.metric, "statistic": r.rule.statistic,
             "comparator": r.rule.comparator, "threshold": r.rule.threshold,
             "text": r.rule.text, "observed": estimate_dict(r.observed),
             "verdict": r.verdict.value, "basis": r.basis}
            for r in slo_results
        ],
        "exit_code": int(exit_code),
        "invalid_reasons": list(invalid_reasons),
        "warnings": [*summary.warnings, *warnings],
    }
