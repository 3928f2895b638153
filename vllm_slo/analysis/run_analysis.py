"""A run analysed from what its folder holds (pure; `reports/run_folder_read.py` reads the
folder): the measured window's series and summary, the SLO verdicts, the client's health, the
server's outages and stalls, the prefix-cache and trace checks, why the run is invalid (one
`verdicts.invalid_reasons`), and the typed summary document everything renders from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

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
    invalid_reasons,
)
from vllm_slo.analysis.warmup_sizing import is_unsized, size_rules, unsized_result
from vllm_slo.run_folder.run_status import RunStatus
from vllm_slo.scenarios.metrics import BUILT_IN_METRICS
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.slo import ADAPTER_PART, SloRule
from vllm_slo.scenarios.traffic_spec import TrafficSpec


@dataclass(frozen=True, slots=True)
class RunFolderContents:
    """What a run folder holds, as read (`reports/run_folder_read.py`): `analyse_run`'s whole
    input, built from a folder or in memory."""

    run_id: str  # the folder's name
    scenario: Scenario
    status: RunStatus | None  # None when run_status.json is absent or damaged
    status_damage: str | None  # why run_status.json could not be read (the run is invalid)
    table: pa.Table  # every sample row
    samples_warning: str | None  # samples.parquet damaged: the rows came from the streams
    samples_file_exists: bool  # samples.parquet is on disk (the runner consolidated the rows)
    provenance: dict[str, Any]  # provenance.json's content ({} when damaged)
    provenance_damage: str | None  # why provenance.json was left out
    client_records: tuple[dict[str, Any], ...]  # samples/client-*.jsonl, file then line order
    client_cpu_fractions: tuple[float, ...]  # each Locust process's CPU use, per second
    server_records: tuple[dict[str, Any], ...]  # server_metrics.jsonl's lines (() if none)


@dataclass(frozen=True, slots=True)
class LoadedRun:
    """A run folder read and analysed: the typed summary document plus what the plots need."""

    document: RunSummaryDocument
    series: RunSeries  # the measured window
    table: pa.Table  # every sample row
    server_records: list[dict[str, Any]]  # parsed server_metrics.jsonl lines ([] if none)


def analyse_run(contents: RunFolderContents) -> LoadedRun:
    """The run's typed summary document and what its figures need, from its folder's contents
    alone (no file is read). A damaged run_status.json (`status_damage`) makes the run
    invalid; the contents' read notes (a damaged samples.parquet or provenance.json) are
    warnings."""
    scenario, table = contents.scenario, contents.table
    status = contents.status or RunStatus()
    read_warnings = [w for w in (contents.samples_warning, contents.provenance_damage)
                     if w is not None]
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
    traffic = scenario.traffic
    closed = traffic.arrival.kind == "closed"
    run_start_unix_s = (float(pc.min(table.column("send_unix_s")).as_py()) if table.num_rows
                        else 0.0)
    outages, stalls = table_outages(table), table_stalls(table)
    waits = agent_waits(traffic, table)  # an agent run's tool and sub-agent waits
    health = client_health(
        table, contents.client_records, closed_loop=closed,
        target_users=traffic.arrival.users if closed else None,
        think_time_s=traffic.arrival.think_time_s,
        max_loop_lag_p99_s=traffic.max_loop_lag_p99_s,
        min_held_concurrency=traffic.min_held_concurrency,
        retry_after_max_s=traffic.retry_after_max_s,
        server_gone=bool(outages or stalls),  # users waited on the server, not the client
        session_pauses_s=None if waits is None else waits.pauses_s,
        session_chains=None if waits is None else waits.chains)
    server_records = list(contents.server_records)
    cache_check = prefix_cache_check(traffic, contents.provenance, server_records,
                                     series.window_start_unix_s, summary.rate_span_s)
    cache_warnings = [] if cache_check is None else [w for w in [cache_check.warning()] if w]
    fidelity = trace_check(traffic, contents.provenance, server_records, table,
                           series.window_start_unix_s, summary.rate_span_s)
    if fidelity is not None and fidelity.warning() is not None:
        cache_warnings.append(str(fidelity.warning()))
    invalid = invalid_reasons(
        summary, status, max_client_send_lag_p99_s=traffic.max_send_lag_p99_s,
        health=health, outages=outages, stalls=stalls, run_start_unix_s=run_start_unix_s,
        status_damage=contents.status_damage,
        unfinished=contents.status is None and not contents.samples_file_exists,
        prefix_cache=cache_check)
    document = build_summary(
        run_id=contents.run_id, scenario=scenario, provenance=contents.provenance,
        summary=summary, slo_results=slo_results,
        exit_code=choose_exit_code(slo_results, invalid), invalid_reasons=invalid,
        goodput=goodput(sized, series, measured_adapter=measured_adapters(table)),
        client_cpu=client_cpu_summary(contents.client_cpu_fractions),
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
