"""The self-contained HTML report: a `ReportView` value is built first (all formatting here),
then a logic-free Jinja2 template (autoescape, StrictUndefined) lays it out. Plotly's JS is
inlined, so the file opens offline."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pyarrow as pa
from plotly.offline import get_plotlyjs

from reports.figures import latency_ecdf_figure, throughput_figure, timeline_figure
from reports.metrics import METRIC_TITLES, RunSeries
from reports.text import _interval, _latency, _observed
from scenarios.units import format_duration_s

TEMPLATES = Path(__file__).resolve().parent / "templates"


@dataclass(frozen=True, slots=True)
class FigureView:
    element_id: str
    title: str
    plotly_json: str


@dataclass(frozen=True, slots=True)
class ReportView:
    title: str
    run_id: str
    outcome: str  # PASS | FAIL | INCONCLUSIVE | INVALID
    outcome_class: str
    slo_rows: list[dict[str, str]]
    metric_rows: list[dict[str, str]]
    totals: list[tuple[str, str]]
    provenance: list[tuple[str, str]]
    scenario_yaml: str
    figures: list[FigureView]
    warnings: list[str]
    invalid_reasons: list[str]
    plotly_js: str


_OUTCOMES = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE", 4: "INVALID"}


def _cell(estimate: dict[str, Any]) -> str:
    return f"{_latency(estimate)} {_interval(estimate, format_duration_s)}".strip()


def build_view(summary: dict[str, Any], series: RunSeries, table: pa.Table,
               scenario_yaml: str) -> ReportView:
    outcome = _OUTCOMES.get(summary["exit_code"], "ERROR")
    slo_rows = [{"verdict": s["verdict"], "metric": s["metric"], "rule": s["text"],
                 "observed": _observed(s),
                 "notes": "; ".join([s["basis"], *s["observed"]["warnings"]])}
                for s in summary["slos"]]
    metric_rows = []
    for name, metric in summary["metrics"].items():
        p = metric["percentiles"]
        metric_rows.append({
            "metric": METRIC_TITLES[name], "count": str(metric["count"]),
            "mean": _cell(metric["mean"]),
            **{k: _cell(p[k]) for k in ("p50", "p90", "p95", "p99")}})
    requests, throughput = summary["requests"], summary["throughput"]

    def rate(estimate: dict[str, Any], unit: str) -> str:
        if estimate["value"] is None:
            return "n/a"
        ci = _interval(estimate, lambda v: f"{v:,.1f}")
        return f"{estimate['value']:,.1f} {unit} {ci}".strip()

    totals = [
        ("measured window", f"{summary['window_s']:.0f} s"),
        ("requests", f"{requests['measured']} ({requests['ok']} ok, {requests['failed']} failed)"),
        ("error rate", _observed({"metric": "error_rate", "observed": summary["error_rate"]})),
        ("output throughput", rate(throughput["output_tokens_per_s"], "tok/s")),
        ("request throughput", rate(throughput["requests_per_s"], "req/s")),
        ("send lag p99", "n/a" if summary["send_lag_p99_s"] is None
         else format_duration_s(summary["send_lag_p99_s"])),
        *((f"errors: {kind}", str(count)) for kind, count in requests["errors_by_kind"].items()),
    ]
    provenance = [(key, value if isinstance(value, str) else json.dumps(value))
                  for key, value in summary["provenance"].items()]
    warmup_s = float(summary["scenario"]["traffic"]["warmup"])
    figures = [
        FigureView("fig-ecdf", "Latency distributions", latency_ecdf_figure({"run": series})),
        FigureView("fig-timeline", "Latency over time", timeline_figure(table, warmup_s)),
        FigureView("fig-throughput", "Throughput", throughput_figure(series)),
    ]
    return ReportView(
        title=f"vllm-slo · {summary['scenario']['name']}", run_id=summary["run_id"],
        outcome=outcome, outcome_class=outcome.lower(), slo_rows=slo_rows,
        metric_rows=metric_rows, totals=totals, provenance=provenance,
        scenario_yaml=scenario_yaml, figures=figures, warnings=summary["warnings"],
        invalid_reasons=summary["invalid_reasons"], plotly_js=get_plotlyjs())


def render_html(view: ReportView) -> str:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
        undefined=jinja2.StrictUndefined)
    environment.filters["script_json"] = _script_json
    return environment.get_template("report.html.j2").render(view=view)


def _script_json(text: str) -> str:
    """JSON placed inside <script>: escape '<', '>' and '&' so no data can end the tag."""
    from markupsafe import Markup

    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))
