"""Plain-text rendering of a run's summary document for the terminal and logs (no colour),
and the small formatters every renderer shares (HTML, Markdown, JUnit, the experiment pages),
so a number reads the same in each."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from vllm_slo.analysis.summary import ReportedEstimate, RunSummaryDocument, SloEntry
from vllm_slo.analysis.verdicts import VerdictScope
from vllm_slo.reports.render.applicable import shown_metrics
from vllm_slo.scenarios.metrics import METRICS, format_per_second
from vllm_slo.scenarios.units import format_duration_s
from vllm_slo.stats.statistics import SECTIONING_METHOD
from vllm_slo.stats.trial_planning import MAX_TRIALS_PER_VARIANT

OUTCOMES = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE", 4: "INVALID"}
Formatter = Callable[[float], str]


#: a valid measurement without any SLO: nothing was judged, so no PASS
NOT_JUDGED = "MEASURED"


def outcome(exit_code: int, slo_count: int | None = None) -> str:
    """PASS | FAIL | INCONCLUSIVE | INVALID from a run's or experiment's exit code (ERROR for
    others); MEASURED for exit code 0 when `slo_count` says no SLO was given."""
    if exit_code == 0 and slo_count == 0:
        return NOT_JUDGED
    return OUTCOMES.get(exit_code, "ERROR")


def format_trials_needed(trials: int | None) -> str:
    """A plan's trials per variant; None means more than the planner looks at."""
    return f"> {MAX_TRIALS_PER_VARIANT}" if trials is None else str(trials)


def format_latency(estimate: ReportedEstimate) -> str:
    if estimate.value is None:
        return "n/a"
    return format_duration_s(estimate.value)


OPEN_BOUND = "–"  # a confidence bound the data cannot give (too few samples beyond it)


OPEN_MARK = "†"
OPEN_FOOTNOTE = (f"{OPEN_MARK} observed value; too few samples beyond that percentile to bound "
                 "it on the tail's side (its interval is open)")


def is_open(estimate: ReportedEstimate) -> bool:
    return estimate.value is not None and (estimate.ci_low is None or estimate.ci_high is None)


def format_latency_marked(estimate: ReportedEstimate) -> str:
    """A table cell: the latency, marked `†` when its interval is open."""
    return format_latency(estimate) + (OPEN_MARK if is_open(estimate) else "")


def format_interval(estimate: ReportedEstimate, formatter: Formatter) -> str:
    """`[1.10s, 1.41s]`; a side the data cannot bound reads `–` (`[76.0ms, –]`: too few
    samples beyond a tail percentile; `[–, –]`: one trial); nothing without a value."""
    low, high = estimate.ci_low, estimate.ci_high
    if estimate.value is None:
        return ""
    shown = [OPEN_BOUND if bound is None else formatter(bound) for bound in (low, high)]
    return f"[{shown[0]}, {shown[1]}]"


def metric_formatter(metric: str) -> Formatter:
    """How a value of `metric` prints (without its unit suffix): its registry entry's."""
    return METRICS[metric].format_value


def format_rate(estimate: ReportedEstimate, unit: str) -> str:
    """`1,234.5 tok/s [1,200.0, 1,270.1]`, or `n/a`."""
    if estimate.value is None:
        return "n/a"
    ci = format_interval(estimate, format_per_second)
    return f"{format_per_second(estimate.value)} {unit} {ci}".strip()


def format_metric_value(metric: str, estimate: ReportedEstimate, decided: bool = False) -> str:
    """A statistic of `metric` with its CI in the metric's unit. Without a value: `not
    estimable` when a verdict was still `decided` (PASS/FAIL from the share of requests below
    the threshold), else `insufficient data`."""
    if estimate.value is None:
        return "not estimable" if decided else "insufficient data"
    fmt = metric_formatter(metric)
    suffix = METRICS[metric].suffix
    return f"{fmt(estimate.value)}{suffix} {format_interval(estimate, fmt)}".strip()


def format_observed(slo: SloEntry) -> str:
    """An SLO's observed statistic with its CI in the metric's unit; an interval from the
    sectioning fallback (not order statistics) says so: `53.9ms [50.2ms, 58.1ms]
    (sectioning-log)`; a rule without a threshold (not sized) is `not judged`."""
    if not slo.rule.sized:
        return "not judged"
    text = format_metric_value(slo.rule.metric, slo.observed,
                               decided=slo.verdict.value in ("PASS", "FAIL"))
    if slo.observed.method == SECTIONING_METHOD:
        text += f" ({SECTIONING_METHOD})"
    return text


def format_threshold(slo: SloEntry) -> str:
    """`< 2.00s`, `< 1.00%`, `> 100.0 tok/s`: comparator and threshold in the metric's unit;
    a warm-up rule that could not be sized as written: `< 3x warmup (not sized)`."""
    rule = slo.rule
    if not rule.sized:
        written = rule.text.partition(rule.comparator)[2].strip()
        return f"{rule.comparator} {written} (not sized)"
    metric = METRICS[rule.metric]
    return f"{rule.comparator} {metric.format_value(rule.threshold)}{metric.suffix}"


def unobserved_basis(slo: SloEntry) -> str | None:
    """The basis of an undecided SLO that observed nothing (a warm-up threshold that could not
    be sized, a part without requests, no sample): the one sentence that says why, which the
    terminal and summary.md show in place of an observation. None for any other SLO."""
    if slo.observed.value is None and slo.verdict.value == "INCONCLUSIVE" and slo.basis:
        return slo.basis
    return None


def basis_warnings(slo: SloEntry) -> list[str]:
    """The observation's warnings that its verdict's basis does not already say: what a page
    shows under the basis (a basis made of the warnings says them once)."""
    return [warning for warning in slo.observed.warnings if warning not in slo.basis]


def verdict_evidence(slo: SloEntry) -> str:
    """What the terminal's verdict line says after the SLO: `observed 101.0ms [95.0ms,
    107.0ms]`, or the basis of an SLO that observed nothing (`unobserved_basis`)."""
    basis = unobserved_basis(slo)
    return basis if basis is not None else f"observed {format_observed(slo)}"


def slo_name(slo: SloEntry) -> str:
    """`ttft p95`, `error_rate`, `output_throughput mean`, `chat: itl p99` (a part's rule),
    `adapter:sql: ttft p95` (an adapter's): what the SLO constrains."""
    part = f"{slo.rule.part}: " if slo.rule.part else ""
    if slo.rule.statistic == "rate":
        return f"{part}{slo.rule.metric}"
    return f"{part}{slo.rule.metric} {slo.rule.statistic}"


def slo_label(slo: SloEntry) -> str:
    """`ttft p95 < 2s`: the SLO as the scenario wrote it, with its metric."""
    return slo.rule.label


def scope_note(slos: Sequence[SloEntry]) -> str:
    """Which variation the verdicts cover (every SLO of one document shares one scope)."""
    scopes = {slo.scope for slo in slos} or {VerdictScope.WITHIN_INSTANCE}
    return "; ".join(scope.note for scope in sorted(scopes))


def verdict_counts(slos: Sequence[SloEntry]) -> str:
    """`4 SLOs: 2 PASS, 1 FAIL, 1 INCONCLUSIVE` (verdicts that occur, in that order)."""
    if not slos:
        return "no SLOs declared"
    verdicts = [s.verdict.value for s in slos]
    counts = [f"{verdicts.count(v)} {v}" for v in ("PASS", "FAIL", "INCONCLUSIVE")
              if v in verdicts]
    noun = "SLO" if len(slos) == 1 else "SLOs"
    return f"{len(slos)} {noun}: {', '.join(counts)}"


def requests_line(summary: RunSummaryDocument) -> str:
    requests = summary.requests
    return (f"requests {requests.measured} (ok {requests.ok}, failed {requests.failed}) "
            f"in {summary.window_s:.0f}s · "
            f"{format_rate(summary.output_tokens_per_s, 'output tok/s')} · "
            f"{format_rate(summary.requests_per_s, 'req/s')} · goodput "
            f"{format_rate(summary.goodput, 'req/s')}")


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.1f}ms"


def stream_line(summary: RunSummaryDocument) -> str | None:
    """`stream: 2.31 tokens/chunk (max 4, 61.0% of 1,204 chunks carry 2+; per-chunk usage) ·
    reasoning in 40 requests (mean 96.0 tokens), 2 without an answer`; None when the
    document has no stream facts or nothing to say."""
    facts = summary.stream
    if facts is None:
        return None
    parts = []
    if facts.tokens_per_chunk_mean is not None and facts.multi_token_chunk_share is not None:
        parts.append(f"{facts.tokens_per_chunk_mean:.2f} tokens/chunk (max "
                     f"{facts.tokens_per_chunk_max}, {facts.multi_token_chunk_share:.1%} of "
                     f"{facts.chunks:,} chunks carry 2+; {facts.chunk_tokens_source})")
    elif facts.requests_without_chunk_tokens:
        parts.append(f"tokens/chunk {facts.chunk_tokens_source}")
    if facts.reasoning_requests:
        tokens = ("" if facts.reasoning_tokens_mean is None
                  else f" (mean {facts.reasoning_tokens_mean:.1f} tokens)")
        parts.append(f"reasoning in {facts.reasoning_requests} requests{tokens}, "
                     f"{facts.reasoning_without_answer} without an answer")
    return "stream: " + " · ".join(parts) if parts else None


def client_line(summary: RunSummaryDocument) -> str | None:
    """`client: busy 99.9% of 8 users (7.26 in flight, min 0) · re-send gap p50/p99 1.2/3.9ms ·
    loop lag p99 2.9ms (max 29.2ms) · CPU p50 4% · 1.02 events/read`: the load generator's
    health (docs/measurement.md); None when the document has none. More requests in flight
    than users (an agent's sub-agents, docs/traffic-agent.md) add the maximum."""
    health = summary.client_health
    if health is None:
        return None
    parts = []
    concurrency = health.concurrency
    if concurrency is not None:
        held = f"{concurrency.in_flight.mean:.2f} in flight, min {concurrency.in_flight.min}"
        users = concurrency.target_users
        if users and concurrency.in_flight.max > users:  # an agent's sub-agents run at once
            held += f", max {concurrency.in_flight.max}: sub-agents in flight besides users"
        if concurrency.busy_share is not None:
            parts.append(f"busy {concurrency.busy_share:.1%} of {concurrency.target_users} users "
                         f"({held})")
        else:
            parts.append(held)
        if concurrency.resend_gaps:
            parts.append(f"re-send gap p50/p99 {_ms(concurrency.resend_gap_p50_s)}/"
                         f"{_ms(concurrency.resend_gap_p99_s)}")
    if health.loop_lag is not None:
        parts.append(f"loop lag p99 {_ms(health.loop_lag.p99_s)} "
                     f"(max {_ms(health.loop_lag.max_s)})")
    cpu = [w.cpu_p50 for w in health.workers if w.cpu_p50 is not None]
    if cpu:
        parts.append(f"CPU p50 {max(cpu):.0%}" + (" (busiest of "
                                                  f"{len(cpu)} workers)" if len(cpu) > 1 else ""))
    if health.events_per_read is not None:
        parts.append(f"{health.events_per_read:.2f} events/read")
    pauses = [w.gc.max_s for w in health.workers if w.gc is not None and w.gc.pauses]
    if pauses:
        parts.append(f"GC pause max {_ms(max(pauses))}")
    if not parts:
        return None
    if not health.monitored:
        parts.append("not judged (no self-monitoring records)")
    return ("client: " if health.healthy else "client (LIMITED): ") + " · ".join(parts)


def prefix_cache_line(summary: RunSummaryDocument) -> str | None:
    """`prefix cache: hit rate 0.584 over the window, target 0.60 ± 0.10 (plan expected
    0.600, phases warm): met`; None when the run set no target."""
    check = summary.traffic.prefix_cache
    if check is None:
        return None
    achieved = ("not measured" if check.achieved_hit_rate is None
                else f"{check.achieved_hit_rate:.3f} over the window")
    expected = ("" if check.expected_hit_rate is None
                else f"plan expected {check.expected_hit_rate:.3f}, ")
    verdict = "MISSED" if check.missed else check.verdict
    return (f"prefix cache: hit rate {achieved}, target {check.target_hit_rate:.2f} "
            f"± {check.tolerance:.2f} ({expected}phases {check.phases}): {verdict}")


def trace_line(summary: RunSummaryDocument) -> str | None:
    """`trace: mooncake replay, prefix-cache hit rate 0.412 counted, 0.430 implied ± 0.05:
    met`; None for a run that replayed no trace."""
    fidelity = summary.traffic.trace
    if fidelity is None:
        return None
    counted = ("not measured" if fidelity.achieved_hit_rate is None
               else f"{fidelity.achieved_hit_rate:.3f} counted")
    implied = ("none implied" if fidelity.implied_hit_rate is None
               else f"{fidelity.implied_hit_rate:.3f} implied")
    verdict = "MISMATCH" if fidelity.verdict == "mismatch" else fidelity.verdict
    return (f"trace: {fidelity.format} replay, prefix-cache hit rate {counted}, {implied} "
            f"± {fidelity.tolerance:.2f}: {verdict}")


def sessions_line(summary: RunSummaryDocument) -> str | None:
    """`sessions: 42 complete, 0 failed, 3 cut · 3.0 turns · duration p50/p90 1.06s/1.07s ·
    ttft p50 by turn 52.0ms 53.1ms 55.0ms`; None for a run without sessions."""
    sessions = summary.sessions
    if sessions is None:
        return None
    line = (f"sessions: {sessions.complete} complete, {sessions.failed} failed, "
            f"{sessions.cut} cut")
    if sessions.turns_mean is not None:
        p = sessions.duration.percentiles
        line += (f" · {sessions.turns_mean:.1f} turns · duration p50/p90 "
                 f"{format_latency(p['p50'])}/{format_latency(p['p90'])}")
    if sessions.ttft_by_turn:
        line += " · ttft p50 by turn " + " ".join(
            format_latency(turn.percentiles["p50"]) for turn in sessions.ttft_by_turn)
    return line


def render_table(summary: RunSummaryDocument) -> str:
    columns = ["metric", "count", "mean", "p50", "p90", "p95", "p99"]
    rows = [columns]
    any_open = False
    for name, metric in shown_metrics(summary).items():
        p = metric.percentiles
        cells = [p[k] for k in ("p50", "p90", "p95", "p99")]
        any_open = any_open or any(is_open(e) for e in cells)
        rows.append([name, str(metric.count), format_latency(metric.mean),
                     *(format_latency_marked(e) for e in cells)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(width) if i else cell.ljust(width)
                       for i, (cell, width) in enumerate(zip(row, widths, strict=True)))
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if any_open:
        lines.append(OPEN_FOOTNOTE)
    lines.append("")
    lines.append(requests_line(summary))
    stream = stream_line(summary)
    if stream is not None:
        lines.append(stream)
    parts = [*(summary.by_profile or {}).items(),  # a mix's parts, a LoRA mix's names
             *((f"adapter {name}", part) for name, part in (summary.by_adapter or {}).items())]
    for name, part in parts:
        tails = [f"{metric} p50/p99 {format_latency(p['p50'])}/{format_latency(p['p99'])}"
                 for metric in ("ttft", "itl", "e2e")
                 for p in [part.metrics[metric].percentiles]]
        lines.append(f"  {name}: {part.requests.measured} requests, " + ", ".join(tails))
    client = client_line(summary)
    if client is not None:
        lines.append(client)
    cache = prefix_cache_line(summary)
    if cache is not None:
        lines.append(cache)
    trace = trace_line(summary)
    if trace is not None:
        lines.append(trace)
    sessions = sessions_line(summary)
    if sessions is not None:
        lines.append(sessions)
    if summary.slos:
        lines.append("")
        width = max(len(slo_label(slo)) for slo in summary.slos)
        for slo in summary.slos:
            lines.append(f"{slo.verdict.value:<12} {slo_label(slo):<{width}}  "
                         f"{verdict_evidence(slo)}")
        lines.append(f"({scope_note(summary.slos)})")
    for reason in summary.invalid_reasons:
        lines.append(f"INVALID      {reason}")
    for warning in summary.warnings:
        lines.append(f"warning: {warning}")
    lines.append("")
    lines.append(f"outcome {outcome(summary.exit_code, len(summary.slos))} "
                 f"({verdict_counts(summary.slos)}; exit code {summary.exit_code})")
    return "\n".join(lines)
