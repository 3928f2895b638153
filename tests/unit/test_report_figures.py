"""Plot-only series on known inputs (server /metrics, timeline bins, ECDF thinning, health),
and the report view built around them."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pyarrow as pa
import pytest
from test_report_outputs import make_run, synthesis

from vllm_slo.analysis.run_metrics import run_series
from vllm_slo.analysis.server_metrics import build_server_series
from vllm_slo.reports.render.figures import (
    MAX_ECDF_POINTS,
    MAX_SCATTER_POINTS,
    MAX_TIME_BINS,
    build_health,
    build_timeline,
    ecdf_points,
    nice_bin_s,
    server_metrics_figure,
    server_panels,
)
from vllm_slo.reports.render.html import build_view, render_html
from vllm_slo.reports.run_folder_read import read_server_metrics
from vllm_slo.reports.run_report import render_run
from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA

T0 = 1_800_000_000.0


def scrape(t: float, **values: float) -> dict:
    return {"unix_s": T0 + t, "values": values}


def test_server_series_sums_engines_and_differences_counters() -> None:
    running = 'vllm:num_requests_running{engine="%s",model_name="m"}'
    kv = 'vllm:kv_cache_usage_perc{engine="%s",model_name="m"}'
    records = [
        {"unix_s": T0 + 4.0, "values": {running % 0: 3, running % 1: 4, kv % 0: 0.5, kv % 1: 0.7,
                                        "vllm:prefix_cache_queries_total": 150,
                                        "vllm:prefix_cache_hits_total": 60,
                                        "vllm:num_preemptions_total": 2}},
        {"unix_s": T0 + 0.0, "values": {running % 0: 0, running % 1: 0, kv % 0: 0, kv % 1: 0,
                                        "vllm:prefix_cache_queries_total": 100,
                                        "vllm:prefix_cache_hits_total": 10,
                                        "vllm:num_preemptions_total": 0}},  # out of order
        {"unix_s": T0 + 2.0, "values": {running % 0: 1, running % 1: 1, kv % 0: 0.1, kv % 1: 0.3,
                                        "vllm:prefix_cache_queries_total": 100,
                                        "vllm:prefix_cache_hits_total": 10,
                                        "vllm:num_preemptions_total": 2}},
        {"unix_s": T0 + 6.0, "values": {running % 0: 0, running % 1: 0, kv % 0: 0, kv % 1: 0,
                                        "vllm:prefix_cache_queries_total": 10,  # restarted
                                        "vllm:prefix_cache_hits_total": 1,
                                        "vllm:num_preemptions_total": 0}},
    ]
    series = build_server_series(records, start_unix_s=T0 + 1.0)
    assert series is not None
    assert list(series.scrape_s) == [-1.0, 1.0, 3.0, 5.0]
    assert list(series.running) == [0, 2, 7, 0]
    assert list(series.kv_cache_usage) == pytest.approx([0.0, 0.2, 0.6, 0.0])
    assert series.waiting is None  # not exported: its panel is skipped
    assert list(series.preemptions[:2]) == [2, 0] and math.isnan(series.preemptions[2])
    hit = series.prefix_cache_hit_rate
    # no queries in the first interval -> no rate; then 50 hits of 50 queries; reset -> NaN
    assert math.isnan(hit[0]) and hit[1] == pytest.approx(1.0) and math.isnan(hit[2])
    assert server_panels(series) == ["Requests running / waiting", "KV-cache usage",
                                     "Preemptions per scrape interval",
                                     "Prefix-cache hit rate per scrape interval"]


def test_server_series_absent_or_irrelevant_gives_nothing_to_plot() -> None:
    assert build_server_series([], T0) is None
    assert build_server_series([scrape(0, **{"vllm:generation_tokens_total": 5.0})], T0) is None
    assert build_server_series([{"garbage": True}, {"unix_s": "x", "values": {}}], T0) is None
    only_kv = build_server_series(
        [scrape(0, **{"vllm:kv_cache_usage_perc": 0.2}),
         scrape(2, **{"vllm:kv_cache_usage_perc": 0.4})], T0)
    assert only_kv is not None and server_panels(only_kv) == ["KV-cache usage"]
    figure = json.loads(server_metrics_figure({"run": only_kv}) or "{}")
    assert [trace["name"] for trace in figure["data"]] == ["KV-cache %"]


def test_read_server_metrics_skips_torn_lines(tmp_path) -> None:
    path = tmp_path / "server_metrics.jsonl"
    path.write_text('{"unix_s": 1, "values": {}}\n{"unix_s": 2, "val\n[1, 2]\n')
    assert read_server_metrics(path) == [{"unix_s": 1, "values": {}}]
    assert read_server_metrics(tmp_path / "absent.jsonl") == []


def rows(specs: list[tuple[float, str, bool, float]]) -> pa.Table:
    """(send offset s, phase, ok, e2e s) -> sample rows with 4 tokens in 4 chunks."""
    out = []
    for i, (send, phase, ok, e2e) in enumerate(specs):
        out.append({
            "request_id": f"r{i}", "process_id": 1, "phase": phase, "endpoint": "chat",
            "intended_send_unix_s": T0 + send, "send_unix_s": T0 + send,
            "send_lag_s": 0.001 * i, "ttft_s": 0.1 if ok else None, "e2e_s": e2e,
            "chunk_offsets_s": [0.1, 0.2, 0.3, e2e] if ok else [],
            "output_tokens": 4 if ok else None, "status_code": 200 if ok else 503, "ok": ok,
            "error": None if ok else "HTTP 503: busy"})
    return pa.Table.from_pylist(out, schema=SAMPLE_SCHEMA)


def test_timeline_phases_bins_and_throughput_on_known_rows() -> None:
    table = rows([(0.0, "warmup", True, 0.5), (1.2, "warmup", True, 0.5),
                  (2.0, "measure", True, 0.5), (2.5, "measure", False, 0.1),
                  (3.1, "measure", True, 1.4), (5.0, "cooldown", True, 0.5)])
    timeline = build_timeline(table, window_s=2.5)
    phases = timeline.phases
    assert phases.start_unix_s == T0
    assert (phases.measure_start_s, phases.measure_end_s, phases.end_s) == (2.0, 4.5, 5.5)
    assert phases.regions() == [("warm-up", 0.0, 2.0), ("cool-down", 4.5, 5.5)]
    assert build_timeline(table).phases.measure_end_s == 5.0  # the first cool-down send
    assert timeline.bin_s == 1.0 and list(timeline.bin_start_s) == [0, 1, 2, 3, 4, 5]
    # completions at 0.5, 1.7, 2.5, 4.5, 5.5 (ok); the failure ends at 2.6
    assert list(timeline.output_tokens_per_s) == [4, 4, 4, 0, 4, 4]
    assert list(timeline.completed_per_s) == [1, 1, 1, 0, 1, 1]
    assert list(timeline.failed_per_s) == [0, 0, 1, 0, 0, 0]
    e2e_p50 = timeline.latency_bins["e2e"]["p50"]  # by send time; bin 4 has no request
    assert list(e2e_p50[[0, 1, 2, 3, 5]]) == [0.5, 0.5, 0.5, 1.4, 0.5] and math.isnan(e2e_p50[4])
    assert list(timeline.failed_points_s) == [2.5]


def test_timeline_without_warmup_shades_nothing() -> None:
    timeline = build_timeline(rows([(0.0, "measure", True, 0.5), (1.0, "measure", True, 0.5)]))
    assert timeline.phases.regions() == []


def test_plots_aggregate_big_runs() -> None:
    table = synthesis.synthetic_table(30_000, chunks=4, warmup_s=10.0, duration_s=570.0)
    timeline = build_timeline(table)
    assert timeline.points_s.size <= MAX_SCATTER_POINTS
    assert timeline.bin_start_s.size <= MAX_TIME_BINS + 1 and timeline.bin_s == 2.0
    assert nice_bin_s(86_400.0) == 300.0


def test_ecdf_points_are_exact_when_small_and_keep_the_extremes_when_thinned() -> None:
    x, y = ecdf_points(np.array([3.0, 1.0, 2.0, np.nan]))
    assert list(x) == [1.0, 2.0, 3.0] and list(y) == pytest.approx([1 / 3, 2 / 3, 1.0])
    values = np.random.default_rng(0).lognormal(size=100_000)
    x, y = ecdf_points(values)
    assert x.size <= MAX_ECDF_POINTS
    assert x[0] == values.min() and x[-1] == values.max() and y[-1] == 1.0
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(y) > 0)
    # the upper tail keeps resolution: points beyond p99 exist
    assert (y > 0.99).sum() >= 50
    assert ecdf_points(np.empty(0))[0].size == 0


def test_health_chunks_per_token_on_known_rows() -> None:
    table = rows([(0.0, "measure", True, 0.5), (1.0, "measure", False, 0.1),
                  (2.0, "warmup", True, 0.5)])
    table = table.set_column(table.schema.get_field_index("output_tokens"), "output_tokens",
                             pa.array([8, None, 4], pa.int32()))
    health = build_health(table, run_series(table, window_s=3.0))
    assert list(health.chunks_per_token) == [0.5]  # 4 chunks / 8 tokens; measured, ok only
    assert list(health.send_lag_s) == pytest.approx([0.0, 0.001])


def test_view_and_html_for_a_run_without_server_metrics(tmp_path) -> None:
    result = render_run(make_run(tmp_path, server=False))
    html = result.report_path.read_text(encoding="utf-8")
    assert "server_metrics.jsonl missing or empty" in html
    assert 'id="fig-server"' not in html
    assert len(re.findall(r"data-plot=", html)) == 4


def test_every_figure_of_the_view_is_placed_once(tmp_path) -> None:
    from vllm_slo.reports.run_report import load_run

    loaded = load_run(make_run(tmp_path))
    view = build_view(loaded.document, loaded.series, loaded.table, loaded.server_records)
    figures = view.all_figures()
    assert [f.element_id for f in figures] == ["fig-ecdf", "fig-timeline", "fig-throughput",
                                               "fig-server", "fig-health"]
    html = render_html(view)
    for figure in figures:
        assert html.count(f'id="{figure.element_id}"') == 1
        spec = json.loads(figure.plotly_json)
        assert spec["data"], figure.element_id
    assert [row.verdict for row in view.slo_rows] == [
        s.verdict.value for s in loaded.document.slos]
    assert view.outcome == "FAIL" and view.outcome_class == "fail"


def test_load_rows_from_the_traffic_facts() -> None:
    from vllm_slo.analysis.summary import TrafficFacts
    from vllm_slo.reports.render.html import load_rows

    traffic = TrafficFacts(
        profile="chat", endpoint="chat", arrival="poisson", intended_rate_per_s=4.0,
        sent_per_s=3.95, send_lag_p50_s=0.001, send_lag_p99_s=0.003,
        client_send_lag_p99_s=0.0021, queued_for_slot=10, reused_prompts=0,
        plan={"requests": 300, "sha256": "ab", "trimmed": 2, "rejected": 0, "filtered": 1},
        prefix_cache_reset="reset", prefix_cache_hit_rate=0.5, client_cpu=None)
    assert load_rows(traffic, 200) == [
        ("profile / endpoint", "chat / chat"), ("arrival", "poisson at 4 req/s intended"),
        ("sent (measured window)", "3.95 req/s"), ("client send lag p99 (not queued)", "2.1ms"),
        ("waited for an in-flight slot", "10 (5.0%)"),
        ("request plan", "requests 300, trimmed 2, rejected 0, filtered 1"),
        ("prefix cache before the run", "reset"), ("prefix-cache hit rate (run)", "50.0%")]
    closed = dataclasses.replace(traffic, arrival="closed", intended_rate_per_s=None,
                                 queued_for_slot=0, plan=None, prefix_cache_reset=None,
                                 prefix_cache_hit_rate=None)
    assert load_rows(closed, 0)[1:3] == [("arrival", "closed"),
                                         ("sent (measured window)", "3.95 req/s")]


def test_run_prefix_cache_hit_rate_from_counter_increments() -> None:
    from vllm_slo.analysis.server_metrics import run_prefix_cache_hit_rate

    def scrape_at(t: float, queries: float, hits: float) -> dict:
        return {"unix_s": T0 + t, "values": {
            'vllm:prefix_cache_queries_total{engine="0"}': queries,
            'vllm:prefix_cache_hits_total{engine="0"}': hits}}

    # 100 queries / 60 hits, then a restart (counters reset: that interval is dropped),
    # then 50 queries / 10 hits: 70 / 150
    records = [scrape_at(0, 0, 0), scrape_at(2, 100, 60), scrape_at(4, 20, 5),
               scrape_at(6, 70, 15)]
    assert run_prefix_cache_hit_rate(records) == pytest.approx(70 / 150)
    assert run_prefix_cache_hit_rate(list(reversed(records))) == pytest.approx(70 / 150)
    assert run_prefix_cache_hit_rate(records[:1]) is None  # one scrape: no interval
    assert run_prefix_cache_hit_rate([scrape_at(0, 5, 0), scrape_at(2, 5, 0)]) is None
    assert run_prefix_cache_hit_rate([{"unix_s": T0, "values": {}}]) is None
