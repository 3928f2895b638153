"""Rebuild every output of a run from its folder alone: samples + resolved scenario +
provenance + run status (+ server_metrics.jsonl when present) -> summary.json, report.html,
junit.xml, summary.md (appended to $GITHUB_STEP_SUMMARY when set), and the text table returned.
The typed summary document is built once (`load_run`), serialised once into summary.json, and
every renderer reads the typed document. Credentials are redacted (reports.redaction) from
everything written.

    vllm-slo report runs/<id>
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import ValidationError

from vllm_slo.analysis.client_health import client_health
from vllm_slo.analysis.outages import table_outages, table_stalls
from vllm_slo.analysis.prefix_cache import (
    PrefixCacheCheck,
    check_prefix_cache,
    window_counters,
)
from vllm_slo.analysis.run_metrics import (
    RunSeries,
    measured_adapters,
    run_parts,
    run_series,
    summarize,
)
from vllm_slo.analysis.server_crosscheck import latency_crosscheck
from vllm_slo.analysis.server_metrics import run_prefix_cache_hit_rate
from vllm_slo.analysis.sessions import agent_waits
from vllm_slo.analysis.summary import (
    RunSummaryDocument,
    build_summary,
    client_cpu_summary,
)
from vllm_slo.analysis.trace_fidelity import TraceFidelity, trace_fidelity
from vllm_slo.analysis.verdicts import (
    choose_exit_code,
    evaluate_slos,
    goodput,
    invalid_measurement_reasons,
)
from vllm_slo.analysis.warmup_sizing import is_unsized, size_rules, unsized_result
from vllm_slo.reports.client_records import read_client_records
from vllm_slo.reports.json_lines import read_json_lines
from vllm_slo.reports.render.html import build_view, render_html
from vllm_slo.reports.render.junit import render_junit
from vllm_slo.reports.render.markdown import render_markdown, step_summary_warning
from vllm_slo.reports.render.text import render_table
from vllm_slo.reports.samples import client_cpu_fractions, read_samples
from vllm_slo.run_folder.file_writes import OutputWriteError, write_atomic
from vllm_slo.run_folder.provenance import Provenance
from vllm_slo.run_folder.run_files import (
    JUNIT_FILE,
    PROVENANCE_FILE,
    REPORT_FILE,
    SCENARIO_FILE,
    SERVER_METRICS_FILE,
    STATUS_FILE,
    SUMMARY_FILE,
    SUMMARY_MD_FILE,
)
from vllm_slo.run_folder.run_status import RunStatus
from vllm_slo.run_folder.samples_format import SAMPLES_FILE
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import format_validation_error, read_scenario_document
from vllm_slo.scenarios.metrics import BUILT_IN_METRICS
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.plugins import unregistered_hint
from vllm_slo.scenarios.slo import ADAPTER_PART, SloRule
from vllm_slo.scenarios.traffic_spec import TrafficSpec
from vllm_slo.serialise import to_json

INTERRUPTED_REASON = "the run was interrupted before its planned end"
# the runner writes run_status.json and samples.parquet on every way out it controls (end,
# failure, Ctrl-C); a folder with neither was cut short (the runner killed hard) or is running
UNFINISHED_REASON = ("the run did not finish (no run_status.json nor samples.parquet: the "
                     "runner was killed or is still running); the rows on disk are reported")


@dataclass(frozen=True, slots=True)
class RenderedRun:
    """What a render wrote. `summary` is summary.json's content as written (the document's
    one serialisation, for callers that want the machine-readable form)."""

    summary: dict[str, Any]
    text: str
    report_path: Path
    summary_path: Path
    junit_path: Path | None = None
    markdown_path: Path | None = None


@dataclass(frozen=True, slots=True)
class LoadedRun:
    """A run folder read and analysed: the typed summary document plus what the plots need."""

    document: RunSummaryDocument
    series: RunSeries  # the measured window
    table: pa.Table  # every sample row
    server_records: list[dict[str, Any]]  # parsed server_metrics.jsonl lines ([] if none)


def read_server_metrics(path: Path) -> list[dict[str, Any]]:
    """The /metrics scrapes, one JSON object a line; a torn or foreign line is skipped (the
    recorder may have died mid-write)."""
    return read_json_lines(path)


def _damage(error: BaseException) -> str:
    """The first line of why a file could not be read, short."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}"


def read_run_scenario(run_dir: Path) -> Scenario:
    """The run folder's resolved scenario; a missing, unreadable or invalid scenario.yaml is a
    ScenarioError naming it (the SLOs come from it: nothing can be judged without it)."""
    path = run_dir / SCENARIO_FILE
    if not path.is_file():
        raise ScenarioError(f"{run_dir} is not a vllm-slo run folder (no {SCENARIO_FILE})")
    document = read_scenario_document(path)
    if not isinstance(document, dict):
        raise ScenarioError(f"{path}: damaged: expected the scenario's mapping, got "
                            f"{type(document).__name__}")
    try:
        return Scenario.model_validate(document)
    except ValidationError as error:
        hint = unregistered_hint(document)  # a run made with plugins, read without them
        raise ScenarioError(f"{path}: {hint}" if hint
                            else format_validation_error(path, error)) from None


def _read_status(run_dir: Path) -> tuple[RunStatus | None, str | None]:
    """run_status.json, or None when the run never wrote one; a damaged one is read as
    unknown, with the reason that makes the run invalid (it may have said "interrupted")."""
    try:
        return RunStatus.read(run_dir), None
    except (OSError, ValueError) as error:  # pydantic's ValidationError, UnicodeDecodeError
        return None, (f"{STATUS_FILE} is damaged ({_damage(error)}): how the run ended is "
                      "unknown")


def _read_provenance(run_dir: Path) -> tuple[dict[str, Any], str | None]:
    """provenance.json's content; a damaged one is left out of the report, with a warning."""
    try:
        return Provenance.read(run_dir).to_json_dict(), None
    except (OSError, ValueError) as error:
        return {}, f"{PROVENANCE_FILE} is damaged ({_damage(error)}); provenance left out"


def load_run(run_dir: Path) -> LoadedRun:
    """Read a run folder and build its typed summary document (nothing is written). A
    damaged samples.parquet is read from the streams, a damaged provenance.json left out (a
    warning each); a damaged run_status.json makes the run invalid (how it ended is unknown);
    a damaged scenario.yaml is a ScenarioError naming it."""
    scenario = read_run_scenario(run_dir)
    written, status_damage = _read_status(run_dir)
    status = written or RunStatus()
    samples = read_samples(run_dir)
    table = samples.table
    provenance, provenance_damage = _read_provenance(run_dir)
    read_warnings = [w for w in (samples.warning, provenance_damage) if w is not None]
    # stopped before its planned end: rates over the span up to when traffic stopped
    cut_short = status.interrupted or bool(status.aborted or status.load_generator_failure)
    series = run_series(table, scenario.traffic.duration_s, cut_short=cut_short)
    summary = summarize(series)
    parts = {name: (part, summarize(part)) for name, part in run_parts(
        table, scenario.traffic.duration_s, scenario.traffic.profile == "mix",
        bool(scenario.traffic.lora), cut_short).items()}
    # `p95 < 3x warmup`: thresholds sized from this run's own warm-up, said in the warnings
    sizing = size_rules(scenario.slo.rules(), table, scenario.traffic.warmup_s)
    sized = [rule for rule in sizing.rules if not is_unsized(rule)]
    evaluated = iter(evaluate_slos(sized, series, summary, parts=parts))
    slo_results = tuple(unsized_result(rule, scenario.traffic.warmup_s) if is_unsized(rule)
                        else next(evaluated)
                        for rule in sizing.rules)
    invalid = invalid_measurement_reasons(summary, status.server_failure,
                                          status.load_generator_failure,
                                          scenario.traffic.max_send_lag_p99_s)
    traffic = scenario.traffic
    closed = traffic.arrival.kind == "closed"
    run_start_unix_s = (float(pc.min(table.column("send_unix_s")).as_py()) if table.num_rows
                        else 0.0)
    outages, stalls = table_outages(table), table_stalls(table)
    waits = agent_waits(traffic, table)  # an agent run's tool and sub-agent waits
    health = client_health(
        table, read_client_records(run_dir), closed_loop=closed,
        target_users=traffic.arrival.users if closed else None,
        think_time_s=traffic.arrival.think_time_s,
        max_loop_lag_p99_s=traffic.max_loop_lag_p99_s,
        min_held_concurrency=traffic.min_held_concurrency,
        retry_after_max_s=traffic.retry_after_max_s,
        server_gone=bool(outages or stalls),  # users waited on the server, not the client
        session_pauses_s=None if waits is None else waits.pauses_s,
        session_chains=None if waits is None else waits.chains)
    invalid = (*invalid, *health.reasons)
    invalid = (*invalid, *(outage.reason(run_start_unix_s) for outage in outages))
    # a frozen server refuses nothing: its requests hang until a timeout cuts them
    invalid = (*invalid, *(stall.reason(run_start_unix_s) for stall in stalls))
    if status.aborted:
        invalid = (*invalid, f"aborted by abort_on: {status.aborted}")
    if status.interrupted:
        invalid = (*invalid, INTERRUPTED_REASON)
    if status_damage is not None:
        invalid = (*invalid, status_damage)
    elif written is None and not (run_dir / SAMPLES_FILE).is_file():
        invalid = (*invalid, UNFINISHED_REASON)
    server_records = read_server_metrics(run_dir / SERVER_METRICS_FILE)
    cache_check = prefix_cache_check(traffic, provenance, server_records,
                                     series.window_start_unix_s, summary.rate_span_s)
    cache_warnings = [] if cache_check is None else [w for w in [cache_check.warning()] if w]
    fidelity = trace_check(traffic, provenance, server_records, table,
                           series.window_start_unix_s, summary.rate_span_s)
    if fidelity is not None and fidelity.warning() is not None:
        cache_warnings.append(str(fidelity.warning()))
    if cache_check is not None and cache_check.missed:
        invalid = (*invalid, cache_check.reason)
    document = build_summary(
        run_id=run_dir.name, scenario=scenario, provenance=provenance,
        summary=summary, slo_results=slo_results,
        exit_code=choose_exit_code(slo_results, invalid), invalid_reasons=invalid,
        goodput=goodput(sized, series, measured_adapter=measured_adapters(table)),
        client_cpu=client_cpu_summary(client_cpu_fractions(run_dir)),
        prefix_cache_hit_rate=run_prefix_cache_hit_rate(server_records),
        prefix_cache=cache_check,
        trace=fidelity,
        client_health=health,
        server_crosscheck=latency_crosscheck(server_records, table),
        by_profile={name: part_summary for name, (_, part_summary) in parts.items()
                    if not name.startswith(ADAPTER_PART)},
        by_adapter={name.removeprefix(ADAPTER_PART): part_summary
                    for name, (_, part_summary) in parts.items()
                    if name.startswith(ADAPTER_PART)},
        sessions=series.sessions,
        warnings=[*status.warnings, *read_warnings, *sizing.notes, *cache_warnings,
                  *_metric_failures(scenario.slo.rules(), series, parts)])
    return LoadedRun(document, series, table, server_records)


def _metric_failures(rules: Sequence[SloRule], series: RunSeries,
                     parts: Mapping[str, tuple[RunSeries, Any]]) -> list[str]:
    """A warning per registered metric the SLOs name whose sample source failed (it raised
    or returned the wrong type), naming plugin and metric: its verdicts are inconclusive,
    everything else of the run is reported."""
    failures = []
    for rule in rules:
        if rule.metric in BUILT_IN_METRICS:
            continue
        where = series if rule.part is None else parts.get(rule.part, (None, None))[0]
        failure = None if where is None else where.metric_failure(rule.metric)
        if failure is not None:
            failures.append(f"{failure}; its SLO is inconclusive")
    return list(dict.fromkeys(failures))


def prefix_cache_check(traffic: TrafficSpec, provenance: Mapping[str, Any],
                       server_records: Sequence[dict[str, Any]],
                       window_start_unix_s: float | None, span_s: float | None
                       ) -> PrefixCacheCheck | None:
    """The hit-rate target's check over the measured window; None when no target is set."""
    setting = traffic.prefix_cache
    if setting.target_hit_rate is None:
        return None
    counters = None
    if window_start_unix_s is not None:
        end = window_start_unix_s + (traffic.duration_s if span_s is None else span_s)
        counters = window_counters(server_records, window_start_unix_s, end)
    plan = provenance.get("plan")
    shaped = plan.get("prefix_cache") if isinstance(plan, Mapping) else None
    expected = shaped.get("expected_hit_rate") if isinstance(shaped, Mapping) else None
    return check_prefix_cache(counters, setting.target_hit_rate, setting.tolerance,
                              setting.phases,
                              float(expected) if isinstance(expected, int | float) else None)


def trace_check(traffic: TrafficSpec, provenance: Mapping[str, Any],
                server_records: Sequence[dict[str, Any]], table: pa.Table,
                window_start_unix_s: float | None, span_s: float | None
                ) -> TraceFidelity | None:
    """A trace replay's fidelity over the measured window (`analysis/trace_fidelity.py`);
    None when the plan recorded no trace."""
    plan = provenance.get("plan")
    facts = plan.get("trace") if isinstance(plan, Mapping) else None
    if not isinstance(facts, Mapping):
        return None
    counters = None
    if window_start_unix_s is not None:
        end = window_start_unix_s + (traffic.duration_s if span_s is None else span_s)
        counters = window_counters(server_records, window_start_unix_s, end)
    columns = {name: table.column(name).to_pylist() if name in table.column_names else []
               for name in ("phase", "send_unix_s", "prompt_tokens_planned", "output_tokens")}
    measured = [i for i, phase in enumerate(columns["phase"]) if phase == "measure"]

    def pick(name: str) -> list[Any]:
        values = columns[name]
        return [values[i] for i in measured] if values else [None] * len(measured)

    return trace_fidelity(facts, pick("send_unix_s"), pick("prompt_tokens_planned"),
                          pick("output_tokens"), counters)


def render_run(run_dir: Path) -> RenderedRun:
    """Every output of a run folder, from the folder alone, each written whole and never
    through a link (`file_writes.write_atomic`). A write that fails is an OutputWriteError
    naming the file and carrying the verdict; a $GITHUB_STEP_SUMMARY that cannot be appended
    is a warning at the end of the text."""
    loaded = load_run(run_dir)
    document = loaded.document
    summary = to_json(document)
    text = render_table(document)
    summary_path = run_dir / SUMMARY_FILE
    report_path = run_dir / REPORT_FILE
    junit_path = run_dir / JUNIT_FILE
    markdown_path = run_dir / SUMMARY_MD_FILE
    markdown = render_markdown(document)
    try:
        write_atomic(summary_path, json.dumps(summary, indent=2) + "\n")
        view = build_view(document, loaded.series, loaded.table, loaded.server_records)
        write_atomic(report_path, render_html(view))
        write_atomic(junit_path, render_junit(document))
        write_atomic(markdown_path, markdown)
    except OutputWriteError as error:
        raise error.with_verdict(text, int(summary["exit_code"])) from None
    warning = step_summary_warning(markdown)
    if warning is not None:
        text += f"\nwarning: {warning}"
    return RenderedRun(summary, text, report_path, summary_path, junit_path, markdown_path)
