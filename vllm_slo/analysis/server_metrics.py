"""vLLM's own /metrics over a run, from the scrapes in server_metrics.jsonl (pure: the caller
reads the file): gauges and counter increments per scrape interval, and the run's prefix-cache
hit rate. The one place these are computed; the report's server panel and summary.json's
`traffic.prefix_cache_hit_rate` both come from here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"


@dataclass(frozen=True, slots=True)
class ServerSeries:
    """vLLM `/metrics` over the run, summed over engines (KV-cache usage averaged), time in
    seconds since the run's first intended send. Interval series (preemptions, prefix-cache
    hit rate) are per scrape interval, placed at the interval's end. None = not exported."""

    scrape_s: np.ndarray
    running: np.ndarray | None
    waiting: np.ndarray | None
    kv_cache_usage: np.ndarray | None  # fraction 0..1
    preemptions: np.ndarray | None  # per interval (len = scrapes - 1)
    prefix_cache_hit_rate: np.ndarray | None  # per interval, NaN when no queries

    @property
    def interval_end_s(self) -> np.ndarray:
        return self.scrape_s[1:]


def _metric_name(key: str) -> str:
    return key.split("{", 1)[0]


def metric_per_scrape(records: list[dict[str, Any]], name: str, how: str) -> np.ndarray | None:
    """One metric per scrape over all its label sets (`sum` or `mean`); None if never seen."""
    seen = False
    out = np.full(len(records), np.nan)
    for index, record in enumerate(records):
        values = [float(v) for k, v in record["values"].items() if _metric_name(k) == name]
        if values:
            seen = True
            out[index] = sum(values) if how == "sum" else sum(values) / len(values)
    return out if seen else None


def _increments(counter: np.ndarray | None) -> np.ndarray | None:
    if counter is None or counter.size < 2:
        return None
    delta = np.diff(counter)
    delta[delta < 0] = np.nan  # counter reset (server restart)
    return delta


def build_server_series(records: list[dict[str, Any]], start_unix_s: float
                        ) -> ServerSeries | None:
    """From the parsed lines of server_metrics.jsonl (`{"unix_s": t, "values": {...}}`);
    None when there is nothing to plot."""
    records = valid_scrapes(records)
    if not records:
        return None
    queries = _increments(metric_per_scrape(records, PREFIX_CACHE_QUERIES, "sum"))
    hits = _increments(metric_per_scrape(records, PREFIX_CACHE_HITS, "sum"))
    hit_rate = None
    if queries is not None and hits is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            hit_rate = np.where(queries > 0, hits / queries, np.nan)
    series = ServerSeries(
        scrape_s=np.array([r["unix_s"] for r in records], dtype=np.float64) - start_unix_s,
        running=metric_per_scrape(records, "vllm:num_requests_running", "sum"),
        waiting=metric_per_scrape(records, "vllm:num_requests_waiting", "sum"),
        kv_cache_usage=metric_per_scrape(records, "vllm:kv_cache_usage_perc", "mean"),
        preemptions=_increments(metric_per_scrape(records, "vllm:num_preemptions_total", "sum")),
        prefix_cache_hit_rate=hit_rate)
    present = (series.running, series.waiting, series.kv_cache_usage, series.preemptions,
               series.prefix_cache_hit_rate)
    return series if any(p is not None for p in present) else None


def valid_scrapes(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Well-formed scrapes in time order (a torn or foreign line is skipped)."""
    return sorted((r for r in records if isinstance(r.get("values"), dict)
                   and isinstance(r.get("unix_s"), int | float)), key=lambda r: r["unix_s"])


def run_prefix_cache_hit_rate(records: Sequence[dict[str, Any]]) -> float | None:
    """Hits / queries over the run, from counter increments between scrapes (a counter reset,
    i.e. a server restart, drops that interval); None when the server exports no such counters
    or answered no query."""
    records = valid_scrapes(records)
    queries = _increments(metric_per_scrape(records, PREFIX_CACHE_QUERIES, "sum"))
    hits = _increments(metric_per_scrape(records, PREFIX_CACHE_HITS, "sum"))
    if queries is None or hits is None:
        return None
    both = np.isfinite(queries) & np.isfinite(hits)
    total_queries = float(queries[both].sum())
    return float(hits[both].sum()) / total_queries if total_queries > 0 else None


def run_preemptions(records: Sequence[dict[str, Any]]) -> float | None:
    """Requests vLLM preempted over the run (counter increments between scrapes, a reset
    dropping its interval); None when the server exports no preemption counter."""
    increments = _increments(metric_per_scrape(valid_scrapes(records),
                                               "vllm:num_preemptions_total", "sum"))
    return None if increments is None else float(np.nansum(increments))
