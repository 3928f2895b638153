"""summary.json: the run's numbers in one schema-versioned, documented document
(reports/schema/summary.schema.json). Built from typed results; renderers read only this and
the run's series."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from reports.metrics import LATENCY_METRICS, RunSummary
from reports.statistics import Estimate
from reports.verdicts import SloResult

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


def build_summary(
    *,
    run_id: str,
    scenario: dict[str, Any],
    provenance: dict[str, Any],
    summary: RunSummary,
    slo_results: Sequence[SloResult],
    exit_code: int,
    invalid_reasons: Sequence[str],
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
        "send_lag_p99_s": _number(summary.send_lag_p99_s),
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
