"""Plain-text rendering of summary.json for the terminal and logs (no colour, no logic beyond
layout)."""

from __future__ import annotations

from typing import Any

from scenarios.units import format_duration_s


def _latency(estimate: dict[str, Any]) -> str:
    if estimate["value"] is None:
        return "n/a"
    return format_duration_s(estimate["value"])


def _interval(estimate: dict[str, Any], formatter) -> str:
    if estimate["ci_low"] is None or estimate["ci_high"] is None:
        return ""
    return f"[{formatter(estimate['ci_low'])}, {formatter(estimate['ci_high'])}]"


def _rate(value: float | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:,.1f} {unit}"


def _observed(slo: dict[str, Any]) -> str:
    observed = slo["observed"]
    if slo["metric"] == "error_rate":
        fmt = (lambda v: f"{v * 100:.2f}%")  # noqa: E731
    elif slo["metric"].endswith("throughput"):
        fmt = (lambda v: f"{v:,.1f}")  # noqa: E731
    else:
        fmt = format_duration_s
    if observed["value"] is None:
        return "insufficient data"
    return f"{fmt(observed['value'])} {_interval(observed, fmt)}".strip()


def render_table(summary: dict[str, Any]) -> str:
    columns = ["metric", "count", "mean", "p50", "p90", "p95", "p99"]
    rows = [columns]
    for name, metric in summary["metrics"].items():
        p = metric["percentiles"]
        rows.append([name, str(metric["count"]), _latency(metric["mean"]),
                     *(_latency(p[k]) for k in ("p50", "p90", "p95", "p99"))])
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(width) if i else cell.ljust(width)
                       for i, (cell, width) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    requests = summary["requests"]
    throughput = summary["throughput"]
    lines.append("")
    lines.append(
        f"requests {requests['measured']} (ok {requests['ok']}, failed {requests['failed']}) "
        f"in {summary['window_s']:.0f}s · "
        f"{_rate(throughput['output_tokens_per_s']['value'], 'output tok/s')} · "
        f"{_rate(throughput['requests_per_s']['value'], 'req/s')}")
    if summary["slos"]:
        lines.append("")
        for slo in summary["slos"]:
            lines.append(f"{slo['verdict']:<12} {slo['metric']} {slo['text']:<14} "
                         f"observed {_observed(slo)}")
    for reason in summary["invalid_reasons"]:
        lines.append(f"INVALID      {reason}")
    for warning in summary["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)
