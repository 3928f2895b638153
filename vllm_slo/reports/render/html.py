"""The self-contained HTML report: a `ReportView` value is built first (all formatting and every
decision here), then a logic-free Jinja2 template (autoescape, StrictUndefined) lays it out.
plotly.js (the basic partial bundle, `plotly_bundle`) is inlined, so the file opens offline.

Safety: every string reaches the page through Jinja2's autoescape; Plotly specs travel as JSON
inside `<script type="application/json">` with `<`, `>`, `&` and U+2028/9 escaped
(`script_json`), and are read with `JSON.parse`, never evaluated; user text put into Plotly
labels is entity-escaped (`figures.plot_text`); credentials are redacted
(`redaction.redact_secrets`) before anything is shown. The experiment and comparison pages
(`experiment_html`) share the template environment, the figure macro and the loader.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jinja2
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml
from markupsafe import Markup

from vllm_slo.analysis.chunk_tokens import StreamFacts
from vllm_slo.analysis.client_health import ClientHealth
from vllm_slo.analysis.run_metrics import RunSeries, failure_kinds
from vllm_slo.analysis.server_crosscheck import LatencyCrosscheck
from vllm_slo.analysis.server_metrics import build_server_series
from vllm_slo.analysis.summary import (
    MetricEntry,
    ProfileEntry,
    ReportedEstimate,
    RequestCounts,
    RunSummaryDocument,
    SloEntry,
    TrafficFacts,
)
from vllm_slo.redaction import redact_secrets, redact_text
from vllm_slo.reports.render.applicable import shown_latency_metrics, shown_metrics
from vllm_slo.reports.render.figures import (
    build_health,
    build_timeline,
    health_figure,
    latency_ecdf_figure,
    server_metrics_figure,
    server_panels,
    throughput_figure,
    timeline_figure,
)
from vllm_slo.reports.render.plotly_bundle import plotly_js
from vllm_slo.reports.render.text import (
    basis_warnings,
    format_interval,
    format_latency,
    format_metric_value,
    format_observed,
    format_rate,
    format_threshold,
    outcome,
    scope_note,
    sessions_line,
    slo_name,
    verdict_counts,
)
from vllm_slo.resources import user_folder
from vllm_slo.scenarios.metrics import METRICS
from vllm_slo.scenarios.units import format_duration_s

TEMPLATES = user_folder("reports") / "templates"
MAX_ERROR_EXAMPLE_CHARS = 300


@dataclass(frozen=True, slots=True)
class FigureView:
    element_id: str
    title: str
    plotly_json: str


@dataclass(frozen=True, slots=True)
class SloRow:
    verdict: str
    verdict_class: str
    name: str  # "ttft p95"
    objective: str  # as written: "p95 < 2s"
    threshold: str  # "< 2.00s"
    observed: str  # "1.23s [1.10s, 1.41s]"
    basis: str
    warnings: list[str]


@dataclass(frozen=True, slots=True)
class Cell:
    value: str  # "80.8ms" or "n/a"
    interval: str  # "[78.1ms, 83.7ms]" or ""
    note: str  # why there is no value (tooltip), or ""


@dataclass(frozen=True, slots=True)
class MetricRow:
    metric: str
    count: str
    cells: list[Cell]  # one per SUMMARY_COLUMNS


SUMMARY_COLUMNS = ("mean", "p50", "p90", "p95", "p99")


@dataclass(frozen=True, slots=True)
class ProfileTable:
    """One part of a mix: its requests, throughput and latency rows."""

    name: str
    totals: str
    metric_rows: list[MetricRow]


def profile_tables(summary: RunSummaryDocument, parts: Mapping[str, ProfileEntry] | None
                   ) -> list[ProfileTable]:
    """A mix's parts (`by_profile`) or a LoRA mix's names (`by_adapter`), a table each, with
    the rows that apply to the run (`applicable.shown_metrics`)."""
    return [ProfileTable(
        name, f"{part.requests.measured:,} requests ({part.requests.ok:,} ok, "
              f"{part.requests.failed:,} failed), output "
              f"{format_rate(part.output_tokens_per_s, 'tok/s')}",
        metric_rows(shown_metrics(summary, part.metrics))) for name, part in (parts or {}).items()]


@dataclass(frozen=True, slots=True)
class ErrorRow:
    kind: str
    count: str
    share: str
    status_codes: str
    example: str


@dataclass(frozen=True, slots=True)
class HealthView:
    load: list[tuple[str, str]]  # how the load was applied (summary.json "traffic"), or []
    send_lag: list[tuple[str, str]]
    chunks: list[tuple[str, str]]
    errors: list[ErrorRow]
    figure: FigureView
    notes: list[str]
    client: list[tuple[str, str]] = field(default_factory=list)  # the load generator's health
    client_reasons: list[str] = field(default_factory=list)  # why it was the bottleneck
    panel_class: str = "healthy"  # "client-limited": the panel turns red
    server: list[tuple[str, str]] = field(default_factory=list)  # vLLM's own latency vs ours
    server_flags: list[str] = field(default_factory=list)  # where they disagree


@dataclass(frozen=True, slots=True)
class ServerView:
    figure: FigureView | None
    note: str  # what was plotted, or why nothing was


@dataclass(frozen=True, slots=True)
class ReportView:
    title: str
    run_id: str
    description: str
    outcome: str  # PASS | FAIL | INCONCLUSIVE | INVALID
    outcome_class: str
    verdict_summary: str
    slo_rows: list[SloRow]
    verdict_scope: str  # which variation the verdicts cover
    summary_columns: list[str]
    metric_rows: list[MetricRow]
    profile_tables: list[ProfileTable]  # a mix's parts; empty for one profile
    adapter_tables: list[ProfileTable]  # traffic.lora's names (base, adapters); empty: none
    totals: list[tuple[str, str]]
    distribution_figures: list[FigureView]
    time_figures: list[FigureView]
    server: ServerView
    health: HealthView
    provenance: list[tuple[str, str]]
    scenario_yaml: str
    warnings: list[str]
    invalid_reasons: list[str]
    plotly_js: str

    def all_figures(self) -> list[FigureView]:
        extra = [self.server.figure] if self.server.figure is not None else []
        return [*self.distribution_figures, *self.time_figures, *extra, self.health.figure]


def slo_rows(slos: Sequence[SloEntry]) -> list[SloRow]:
    return [SloRow(verdict=s.verdict.value, verdict_class=s.verdict.value.lower(),
                   name=slo_name(s), objective=s.rule.text, threshold=format_threshold(s),
                   observed=format_observed(s), basis=s.basis, warnings=basis_warnings(s))
            for s in slos]


def latency_cell(estimate: ReportedEstimate) -> Cell:
    return Cell(format_latency(estimate), format_interval(estimate, format_duration_s),
                "; ".join(estimate.warnings))


def metric_rows(metrics: Mapping[str, MetricEntry]) -> list[MetricRow]:
    rows = []
    for name, metric in metrics.items():
        estimates = {"mean": metric.mean, **metric.percentiles}
        rows.append(MetricRow(METRICS[name].title, f"{metric.count:,}",
                              [latency_cell(estimates[k]) for k in SUMMARY_COLUMNS]))
    return rows


def totals(summary: RunSummaryDocument) -> list[tuple[str, str]]:
    requests = summary.requests
    return [
        ("measured window", f"{summary.window_s:.0f} s"),
        ("requests", f"{requests.measured:,} ({requests.ok:,} ok, "
                     f"{requests.failed:,} failed)"),
        ("error rate", format_metric_value("error_rate", summary.error_rate)),
        ("output throughput", format_rate(summary.output_tokens_per_s,
                                          METRICS["output_throughput"].unit)),
        ("request throughput", format_rate(summary.requests_per_s,
                                           METRICS["request_throughput"].unit)),
        ("goodput", f"{format_rate(summary.goodput, 'req/s')} ({summary.goodput_counts})"),
        ("send lag p99", "n/a" if summary.send_lag_p99_s is None
         else format_duration_s(summary.send_lag_p99_s)),
    ]


def _flatten(prefix: str, value: Any, out: list[tuple[str, str]]) -> None:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        out.append((prefix, " ".join(value)))
    else:
        out.append((prefix, value if isinstance(value, str) else json.dumps(value)))


_PROVENANCE_FIRST = ("vllm_version", "model_id", "platform", "host", "suite_version",
                     "suite_git_commit", "seed", "locust_version")


def provenance_rows(provenance: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Flattened `a.b.c -> value` rows, the facts people look for first."""
    ordered = {k: provenance[k] for k in _PROVENANCE_FIRST if k in provenance}
    ordered.update({k: v for k, v in provenance.items() if k not in ordered})
    rows: list[tuple[str, str]] = []
    _flatten("", redact_secrets(ordered), rows)
    return rows


def _percentile_rows(values: np.ndarray, fmt: Callable[[float], str], percentiles: Sequence[float]
                     ) -> list[tuple[str, str]]:
    if values.size == 0:
        return [("requests", "0")]
    rows = [(f"p{q:g}", fmt(float(np.percentile(values, q)))) for q in percentiles]
    return [*rows, ("max", fmt(float(values.max()))), ("requests", f"{values.size:,}")]


def load_rows(traffic: TrafficFacts, measured: int) -> list[tuple[str, str]]:
    """How the load was actually applied (summary.json's "traffic" facts); `measured` is the
    number of measured requests (for the share that waited for a slot)."""
    rows = [("profile / endpoint", f"{traffic.profile} / {traffic.endpoint}")]
    arrival = traffic.arrival
    if traffic.intended_rate_per_s is not None:
        arrival += f" at {traffic.intended_rate_per_s:g} req/s intended"
    rows.append(("arrival", arrival))
    if traffic.sent_per_s is not None:
        rows.append(("sent (measured window)", f"{traffic.sent_per_s:.2f} req/s"))
    if traffic.client_send_lag_p99_s is not None:
        rows.append(("client send lag p99 (not queued)",
                     format_duration_s(traffic.client_send_lag_p99_s)))
    queued = traffic.queued_for_slot
    share = f" ({queued / measured:.1%})" if measured else ""
    rows.append(("waited for an in-flight slot", f"{queued:,}{share}"))
    if traffic.reused_prompts:
        rows.append(("prompts reused (plan cycled)", f"{traffic.reused_prompts:,}"))
    plan = traffic.plan
    if isinstance(plan, Mapping):
        facts = [f"{k} {v}" for k, v in plan.items()
                 if k in ("requests", "trimmed", "rejected", "filtered") and v not in ({}, [])]
        rows.append(("request plan", ", ".join(facts)))
    if traffic.prefix_cache_reset is not None:
        rows.append(("prefix cache before the run", str(traffic.prefix_cache_reset)))
    if traffic.prefix_cache_hit_rate is not None:
        rows.append(("prefix-cache hit rate (run)", f"{traffic.prefix_cache_hit_rate:.1%}"))
    check = traffic.prefix_cache
    if check is not None:
        expected = ("" if check.expected_hit_rate is None
                    else f", plan expected {check.expected_hit_rate:.1%}")
        rows.append(("prefix-cache hit rate target",
                     f"{check.target_hit_rate:.1%} ± {check.tolerance:.1%} "
                     f"(phases {check.phases}{expected})"))
        achieved = ("not measured" if check.achieved_hit_rate is None
                    else f"{check.achieved_hit_rate:.1%} "
                    f"({check.hits_tokens:,.0f} of {check.queries_tokens:,.0f} tokens, "
                    f"{check.span_s:.0f} s)")
        rows.append(("prefix-cache hit rate (measured window)",
                     f"{achieved}: {'MISSED' if check.missed else check.verdict}"))
    fidelity = traffic.trace
    if fidelity is not None:
        rows.append(("trace replayed",
                     f"{fidelity.format} {fidelity.file} (speedup {fidelity.speedup:g}, "
                     f"rate scale {fidelity.rate_scale:g})"))
        for row in fidelity.rows:
            rows.append((f"trace vs sent: {row.statistic}",
                         f"{_trace_value(row.trace)} scheduled, {_trace_value(row.sent)} sent"))
        rows.append(("trace prefix reuse (measured window)",
                     f"{fidelity.reason}: "
                     f"{'MISMATCH' if fidelity.verdict == 'mismatch' else fidelity.verdict}"))
    cpu = traffic.client_cpu
    if cpu is not None:
        rows.append(("load generator CPU (% of a core, per process-second)",
                     f"p50 {cpu.p50_percent:.0f}%, p99 {cpu.p99_percent:.0f}%, "
                     f"max {cpu.max_percent:.0f}%"))
    return [(key, redact_text(value)) for key, value in rows]


def _trace_value(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.4g}"


def session_rows(summary: RunSummaryDocument) -> list[tuple[str, str]]:
    """The agent profile's sessions (summary.json "sessions"), as the terminal says them."""
    line = sessions_line(summary)
    return [] if line is None else [("sessions (measured window)",
                                      line.removeprefix("sessions: "))]


def stream_rows(facts: StreamFacts | None) -> list[tuple[str, str]]:
    """What the streams carried (summary.json "stream"): tokens per chunk and reasoning."""
    if facts is None:
        return []
    rows = [("tokens per chunk (source)", facts.chunk_tokens_source)]
    if facts.tokens_per_chunk_mean is not None and facts.multi_token_chunk_share is not None:
        rows.append(("tokens per chunk", f"mean {facts.tokens_per_chunk_mean:.2f}, max "
                     f"{facts.tokens_per_chunk_max}, {facts.multi_token_chunk_share:.1%} of "
                     f"{facts.chunks:,} chunks carry 2+"))
    if facts.requests_without_chunk_tokens:
        rows.append(("requests without per-chunk usage",
                     f"{facts.requests_without_chunk_tokens:,}"))
    if facts.reasoning_requests:
        tokens = ("" if facts.reasoning_tokens_mean is None
                  else f", mean {facts.reasoning_tokens_mean:.1f} reasoning tokens")
        rows.append(("reasoning requests", f"{facts.reasoning_requests:,} "
                     f"({facts.reasoning_without_answer:,} without an answer{tokens})"))
    return rows


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else format_duration_s(seconds)


def client_rows(health: ClientHealth | None) -> list[tuple[str, str]]:
    """The load generator's own health (summary.json "client_health") as label/value rows."""
    if health is None:
        return []
    rows = []
    concurrency = health.concurrency
    if concurrency is not None:
        ramp = (f"; ramp-up into the window cut off: {concurrency.ramp_in_window_s:.1f} s"
                if concurrency.ramp_in_window_s > 0 else "")
        rows.append(("judged window", f"{concurrency.window_s:.1f} s (first measured send to "
                                      f"the last one − 1 s{ramp})"))
        flight = concurrency.in_flight
        share = concurrency.in_flight_share
        rows.append(("requests in flight (time-weighted)",
                     f"mean {flight.mean:.2f}, min {flight.min}, max {flight.max}"
                     + ("" if share is None else
                        f" ({share:.1%} of {concurrency.target_users} users)")))
        if concurrency.busy is not None and concurrency.busy_share is not None:
            rows.append(("users busy (in flight or thinking)",
                         f"{concurrency.busy_share:.2%} of {concurrency.target_users} users "
                         f"(mean {concurrency.busy.mean:.2f}, min {concurrency.busy.min}); "
                         f"criterion ≥ {health.min_held_concurrency:.0%}"))
        if concurrency.resend_gaps:
            rows.append(("re-send gap beyond think time",
                         f"p50 {_ms(concurrency.resend_gap_p50_s)}, "
                         f"p99 {_ms(concurrency.resend_gap_p99_s)}, "
                         f"max {_ms(concurrency.resend_gap_max_s)} "
                         f"({concurrency.resend_gaps:,} re-sends)"))
    if health.loop_lag is not None:
        lag = health.loop_lag
        rows.append(("event-loop lag (10 ms timer, all workers)",
                     f"p50 {_ms(lag.p50_s)}, p99 {_ms(lag.p99_s)}, max {_ms(lag.max_s)}; "
                     f"criterion p99 ≤ {_ms(health.max_loop_lag_p99_s)}"))
    elif not health.monitored:
        rows.append(("self-monitoring", "no monitor records (imported results or an older "
                                        "run): not judged"))
    if health.events_per_read is not None:
        rows.append(("SSE events per socket read", f"{health.events_per_read:.3f}"))
    if health.chunks_per_token is not None:
        rows.append(("content chunks per output token", f"{health.chunks_per_token:.3f}"))
    for worker in health.workers:
        cpu = ("n/a" if worker.cpu_p50 is None
               else f"CPU p50 {worker.cpu_p50:.0%}, max {worker.cpu_max:.0%} of a core")
        worker_lag = ("" if worker.loop_lag is None
                      else f"; loop lag p99 {_ms(worker.loop_lag.p99_s)}")
        pauses = ("" if worker.gc is None else
                  f"; GC pauses {worker.gc.pauses}, longest {_ms(worker.gc.max_s)}, "
                  f"{_ms(worker.gc.total_s)} in all")
        rows.append((f"worker {worker.process_id}", f"{cpu}{worker_lag}{pauses}"))
    return rows


def crosscheck_rows(check: LatencyCrosscheck | None) -> list[tuple[str, str]]:
    """vLLM's own TTFT / ITL means against the client's (summary.json "server_crosscheck")."""
    if check is None:
        return []
    rows = [("requests (server / client)",
             f"{check.server_requests:,} / {check.client_requests:,}"
             + ("" if check.compared else
                " — not the same requests (other traffic, a restart or a late scrape): "
                "not compared"))]
    excess = check.ttft_excess_s  # None unless both means are known
    if (check.server_ttft_mean_s is not None and check.client_ttft_mean_s is not None
            and excess is not None):
        rows.append(("TTFT mean (server / client)",
                     f"{_ms(check.server_ttft_mean_s)} / {_ms(check.client_ttft_mean_s)} "
                     f"(client {excess * 1e3:+.1f} ms)"))
    if check.server_itl_mean_s is not None and check.client_itl_mean_s is not None:
        rows.append(("ITL per token, mean (server / client)",
                     f"{_ms(check.server_itl_mean_s)} / {_ms(check.client_itl_mean_s)} "
                     f"(x{check.itl_ratio:.3f})"))
    return rows


def error_rows(requests: RequestCounts, table: pa.Table) -> list[ErrorRow]:
    """Failed measured requests by kind (summary.json's counts), with their status codes and
    the first error text of each kind (redacted, truncated; escaped by the template)."""
    by_kind = requests.errors_by_kind
    failed = requests.failed
    if not by_kind:
        return []
    measured_failed = table.filter(pc.and_(
        pc.equal(table.column("phase"), "measure"),
        pc.invert(table.column("ok"))))
    statuses: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    examples: dict[str, str] = {}
    kinds = failure_kinds(measured_failed, np.arange(measured_failed.num_rows))
    for kind, error, status in zip(kinds, measured_failed.column("error").to_pylist(),
                                   measured_failed.column("status_code").to_pylist(),
                                   strict=True):
        statuses[kind][status] += 1
        examples.setdefault(kind, error or "")
    rows = []
    for kind, count in sorted(by_kind.items(), key=lambda item: -item[1]):
        example = redact_text(examples.get(kind, ""))
        if len(example) > MAX_ERROR_EXAMPLE_CHARS:
            example = example[:MAX_ERROR_EXAMPLE_CHARS] + " …"
        codes = ", ".join(f"{code} ×{n}" for code, n in sorted(statuses[kind].items()))
        rows.append(ErrorRow(redact_text(kind), f"{count:,}",
                             f"{count / failed:.0%}" if failed else "", codes, example))
    return rows


def build_view(summary: RunSummaryDocument, series: RunSeries, table: pa.Table,
               server_records: list[dict[str, Any]] | None = None) -> ReportView:
    """The whole report as values. `summary` is the run's summary document, `series` the
    measured window's series, `table` all sample rows, `server_records` the parsed lines of
    server_metrics.jsonl (None or [] when the run has none)."""
    label = "run"
    scenario = redact_secrets(dict(summary.scenario))
    timeline = build_timeline(table, float(scenario["traffic"]["duration"]))
    distribution_figures = [
        FigureView("fig-ecdf", "Latency distributions", latency_ecdf_figure(
            {label: series}, shown_latency_metrics(summary)))]
    time_figures = [
        FigureView("fig-timeline", "Latency over time", timeline_figure({label: timeline})),
        FigureView("fig-throughput", "Throughput over time",
                   throughput_figure({label: timeline})),
    ]
    server_series = build_server_series(server_records or [], timeline.phases.start_unix_s)
    if server_series is None:
        server = ServerView(None, "No vLLM /metrics series in this run folder "
                                  "(server_metrics.jsonl missing or empty), so nothing to plot.")
    else:
        server_json = server_metrics_figure({label: server_series}, timeline.phases)
        server = ServerView(
            FigureView("fig-server", "Server metrics", server_json) if server_json else None,
            f"{server_series.scrape_s.size} scrapes; panels: "
            f"{', '.join(server_panels(server_series))}.")
    health = build_health(table, series)
    chunks = health.chunks_per_token
    chunk_rows = _percentile_rows(chunks, lambda v: f"{v:.3f}", (1, 50))
    notes = []
    if chunks.size:
        several = float((chunks < 1).mean())
        chunk_rows.insert(0, ("requests with several tokens in one chunk", f"{several:.1%}"))
        if several > 0:
            notes.append("Several tokens arrived in one chunk for some requests (normal under "
                         "load); ITL counts gaps between chunks, token counts come from usage.")
    lag_p99 = summary.send_lag_p99_s
    if lag_p99 is not None and lag_p99 > 0.01:
        notes.append(f"Send lag p99 is {format_duration_s(lag_p99)}: the client started requests "
                     f"late; open-loop TTFT includes this lag (it is measured from the "
                     f"intended send time).")
    health_view = HealthView(
        load=[*load_rows(summary.traffic, summary.requests.measured),
              *stream_rows(summary.stream), *session_rows(summary)],
        send_lag=_percentile_rows(health.send_lag_s, format_duration_s, (50, 90, 99)),
        chunks=chunk_rows, errors=error_rows(summary.requests, table),
        figure=FigureView("fig-health", "Measurement health", health_figure({label: health})),
        notes=notes, client=client_rows(summary.client_health),
        client_reasons=[] if summary.client_health is None
        else [redact_text(r) for r in summary.client_health.reasons],
        panel_class="client-limited" if summary.client_health is not None
        and not summary.client_health.healthy else "healthy",
        server=crosscheck_rows(summary.server_crosscheck),
        server_flags=[] if summary.server_crosscheck is None
        else [redact_text(flag) for flag in summary.server_crosscheck.flags])
    verdict = outcome(summary.exit_code, len(summary.slos))
    return ReportView(
        title=f"vllm-slo · {summary.scenario_name}", run_id=summary.run_id,
        description=summary.description, outcome=verdict,
        outcome_class=verdict.lower(), verdict_summary=verdict_counts(summary.slos),
        slo_rows=slo_rows(summary.slos), verdict_scope=scope_note(summary.slos),
        summary_columns=list(SUMMARY_COLUMNS),
        metric_rows=metric_rows(shown_metrics(summary)),
        profile_tables=profile_tables(summary, summary.by_profile),
        adapter_tables=profile_tables(summary, summary.by_adapter),
        totals=totals(summary),
        distribution_figures=distribution_figures, time_figures=time_figures, server=server,
        health=health_view,
        provenance=provenance_rows(summary.provenance),
        scenario_yaml=yaml.safe_dump(scenario, sort_keys=False, allow_unicode=True),
        warnings=[redact_text(w) for w in summary.warnings],
        invalid_reasons=[redact_text(r) for r in summary.invalid_reasons],
        plotly_js=plotly_js())


@functools.cache
def template_environment() -> jinja2.Environment:
    """Jinja2 for every page: autoescape on, StrictUndefined, and `script_json` for Plotly
    specs (templates/_plots.html.j2 places them and loads them with JSON.parse)."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
        undefined=jinja2.StrictUndefined)
    environment.filters["script_json"] = script_json
    return environment


def render_template(name: str, view: object) -> str:
    return template_environment().get_template(name).render(view=view)


def render_html(view: ReportView) -> str:
    return render_template("report.html.j2", view)


_SCRIPT_ESCAPES = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026",
                                 "\u2028": "\\u2028", "\u2029": "\\u2029"})


def script_json(text: str) -> Markup:
    """JSON placed inside a <script> element: '<', '>', '&' and U+2028/9 become \\u escapes, so
    no data can close the element or open a comment; JSON.parse reads it back unchanged."""
    return Markup(text.translate(_SCRIPT_ESCAPES))
