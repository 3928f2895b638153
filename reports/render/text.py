"""Plain-text rendering of summary.json for the terminal and logs (no colour), and the small
formatters every renderer shares (HTML, Markdown, JUnit), so a number reads the same in each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vllm_slo.scenarios.units import format_duration_s

OUTCOMES = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE", 4: "INVALID"}
Formatter = Callable[[float], str]


def outcome(summary: dict[str, Any]) -> str:
    """PASS | FAIL | INCONCLUSIVE | INVALID from the run's exit code (ERROR for others)."""
    return OUTCOMES.get(summary["exit_code"], "ERROR")


def format_latency(estimate: dict[str, Any]) -> str:
    if estimate["value"] is None:
        return "n/a"
    return format_duration_s(estimate["value"])


def format_interval(estimate: dict[str, Any], formatter: Formatter) -> str:
    if estimate["ci_low"] is None or estimate["ci_high"] is None:
        return ""
    return f"[{formatter(estimate['ci_low'])}, {formatter(estimate['ci_high'])}]"


def format_latency_ci(estimate: dict[str, Any]) -> str:
    """`1.23s [1.10s, 1.41s]`, or `n/a` when the estimate has no value."""
    return f"{format_latency(estimate)} {format_interval(estimate, format_duration_s)}".strip()


def _percent(value: float) -> str:
    return f"{value * 100:.2f}%"


def _per_second(value: float) -> str:
    return f"{value:,.1f}"


def metric_formatter(metric: str) -> Formatter:
    if metric == "error_rate":
        return _percent
    if metric.endswith("throughput"):
        return _per_second
    return format_duration_s


_RATE_UNITS = {"output_throughput": " tok/s", "request_throughput": " req/s"}


def format_rate(estimate: dict[str, Any], unit: str) -> str:
    """`1,234.5 tok/s [1,200.0, 1,270.1]`, or `n/a`."""
    if estimate["value"] is None:
        return "n/a"
    ci = format_interval(estimate, _per_second)
    return f"{estimate['value']:,.1f} {unit} {ci}".strip()


def format_observed(slo: dict[str, Any]) -> str:
    """An SLO's observed statistic with its CI in the metric's unit."""
    observed = slo["observed"]
    if observed["value"] is None:
        # the point estimate is withheld (too few effective tail samples); a PASS/FAIL can
        # still come from the share of requests below the threshold (see the basis)
        return ("not estimable" if slo.get("verdict") in ("PASS", "FAIL")
                else "insufficient data")
    fmt = metric_formatter(slo["metric"])
    unit = _RATE_UNITS.get(slo["metric"], "")
    return f"{fmt(observed['value'])}{unit} {format_interval(observed, fmt)}".strip()


def format_threshold(slo: dict[str, Any]) -> str:
    """`< 2.00s`, `< 1.00%`, `> 100.0 tok/s`: comparator and threshold in the metric's unit."""
    fmt = metric_formatter(slo["metric"])
    return f"{slo['comparator']} {fmt(slo['threshold'])}{_RATE_UNITS.get(slo['metric'], '')}"


def slo_name(slo: dict[str, Any]) -> str:
    """`ttft p95`, `error_rate`, `output_throughput mean`: what the SLO constrains."""
    if slo["statistic"] == "rate":
        return slo["metric"]
    return f"{slo['metric']} {slo['statistic']}"


def slo_label(slo: dict[str, Any]) -> str:
    """`ttft p95 < 2s`: the SLO as the scenario wrote it, with its metric."""
    return f"{slo['metric']} {slo['text'].strip()}"


def verdict_counts(summary: dict[str, Any]) -> str:
    """`4 SLOs: 2 PASS, 1 FAIL, 1 INCONCLUSIVE` (verdicts that occur, in that order)."""
    slos = summary["slos"]
    if not slos:
        return "no SLOs declared"
    counts = [f"{sum(s['verdict'] == v for s in slos)} {v}"
              for v in ("PASS", "FAIL", "INCONCLUSIVE") if any(s["verdict"] == v for s in slos)]
    noun = "SLO" if len(slos) == 1 else "SLOs"
    return f"{len(slos)} {noun}: {', '.join(counts)}"


def requests_line(summary: dict[str, Any]) -> str:
    requests = summary["requests"]
    throughput = summary["throughput"]
    return (f"requests {requests['measured']} (ok {requests['ok']}, failed {requests['failed']}) "
            f"in {summary['window_s']:.0f}s · "
            f"{format_rate(throughput['output_tokens_per_s'], 'output tok/s')} · "
            f"{format_rate(throughput['requests_per_s'], 'req/s')} · goodput "
            f"{format_rate(summary['goodput']['requests_per_s'], 'req/s')}")


def render_table(summary: dict[str, Any]) -> str:
    columns = ["metric", "count", "mean", "p50", "p90", "p95", "p99"]
    rows = [columns]
    for name, metric in summary["metrics"].items():
        p = metric["percentiles"]
        rows.append([name, str(metric["count"]), format_latency(metric["mean"]),
                     *(format_latency(p[k]) for k in ("p50", "p90", "p95", "p99"))])
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(width) if i else cell.ljust(width)
                       for i, (cell, width) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(requests_line(summary))
    if summary["slos"]:
        lines.append("")
        width = max(len(slo_label(slo)) for slo in summary["slos"])
        for slo in summary["slos"]:
            lines.append(f"{slo['verdict']:<12} {slo_label(slo):<{width}}  "
                         f"observed {format_observed(slo)}")
    for reason in summary["invalid_reasons"]:
        lines.append(f"INVALID      {reason}")
    for warning in summary["warnings"]:
        lines.append(f"warning: {warning}")
    lines.append("")
    lines.append(f"outcome {outcome(summary)} ({verdict_counts(summary)}; "
                 f"exit code {summary['exit_code']})")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# secrets: nothing that looks like a credential reaches an output file
