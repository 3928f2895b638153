"""The prefix-cache hit rate a run achieved over its measured window, against the target its
prompts were shaped to (`traffic.prefix_cache.target_hit_rate`; pure: the caller reads the
files).

Achieved = Δ`vllm:prefix_cache_hits_total` / Δ`vllm:prefix_cache_queries_total` (tokens,
summed over engines) between the first and the last scrape inside the measured window (the
scrapes are 2 s apart, so the span counted is the window less up to 2 s at each end); a
counter that went down (a restart) drops its interval. No such scrapes, no counters, or no
query in the span: the target is **unverified** (a warning; nothing else changes).

**Missed** when |achieved − target| > tolerance. A miss means the load was not the one the
scenario asked for, like a client-limited run: every latency and throughput figure depends on
how much prefill the cache saved, and which SLOs are "cache-dependent" cannot be told in
general (TTFT directly, ITL and TPOT through the batches prefill shares, throughput through
the work left), so a miss makes the measurement invalid (exit code 4, its reason named), not
one SLO's verdict INCONCLUSIVE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_slo.analysis.server_metrics import (
    PREFIX_CACHE_HITS,
    PREFIX_CACHE_QUERIES,
    metric_per_scrape,
    valid_scrapes,
)

WARNING_NAME = "prefix_cache_target_missed"
UNVERIFIED_NAME = "prefix_cache_target_unverified"


@dataclass(frozen=True, slots=True)
class CounterSpan:
    """Counter increments between two scrapes inside the window."""

    hits_tokens: float
    queries_tokens: float
    span_s: float  # seconds between the first and the last scrape used

    @property
    def hit_rate(self) -> float | None:
        return self.hits_tokens / self.queries_tokens if self.queries_tokens > 0 else None


def window_counters(records: Sequence[dict[str, Any]], start_unix_s: float,
                    end_unix_s: float) -> CounterSpan | None:
    """Hits and queries between the first and last scrape in [start, end]; None when fewer
    than two scrapes fall inside or the server exports no prefix-cache counters."""
    inside = [r for r in valid_scrapes(records) if start_unix_s <= r["unix_s"] <= end_unix_s]
    if len(inside) < 2:
        return None
    queries = metric_per_scrape(inside, PREFIX_CACHE_QUERIES, "sum")
    hits = metric_per_scrape(inside, PREFIX_CACHE_HITS, "sum")
    if queries is None or hits is None:
        return None
    d_queries, d_hits = np.diff(queries), np.diff(hits)
    keep = np.isfinite(d_queries) & np.isfinite(d_hits) & (d_queries >= 0) & (d_hits >= 0)
    return CounterSpan(float(d_hits[keep].sum()), float(d_queries[keep].sum()),
                       float(inside[-1]["unix_s"] - inside[0]["unix_s"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixCacheCheck:
    """summary.json `traffic.prefix_cache`: the target, what the plan expected, what the
    server counted, and the verdict (met | missed | unverified)."""

    target_hit_rate: float
    tolerance: float
    phases: str
    expected_hit_rate: float | None  # the shaped plan's, every shared block cached
    achieved_hit_rate: float | None
    hits_tokens: float | None
    queries_tokens: float | None
    span_s: float | None
    verdict: str
    reason: str

    @property
    def missed(self) -> bool:
        return self.verdict == "missed"

    def warning(self) -> str | None:
        """The named warning of a miss or of a target that could not be checked."""
        if self.verdict == "met":
            return None
        name = WARNING_NAME if self.missed else UNVERIFIED_NAME
        return f"{name}: {self.reason}"


def check_prefix_cache(span: CounterSpan | None, target: float, tolerance: float,
                       phases: str, expected: float | None) -> PrefixCacheCheck:
    """The verdict on one run's counters (see the module docstring)."""
    achieved = None if span is None else span.hit_rate
    if span is None or achieved is None:
        why = ("the server exported no prefix-cache counters inside the measured window "
               "(fewer than two /metrics scrapes in it, or no vllm:prefix_cache_* counters)"
               if span is None else "the server counted no prefix-cache query in the window")
        verdict, reason = "unverified", f"target hit rate {target:.2f} not checked: {why}"
    elif abs(achieved - target) > tolerance:
        verdict = "missed"
        reason = (f"prefix-cache hit rate {achieved:.3f} over the measured window is "
                  f"{abs(achieved - target):.3f} from the target {target:.2f} (tolerance "
                  f"{tolerance:.2f}; {span.hits_tokens:.0f} of {span.queries_tokens:.0f} "
                  f"prompt tokens hit, over {span.span_s:.0f} s)")
    else:
        verdict = "met"
        reason = (f"prefix-cache hit rate {achieved:.3f} within {tolerance:.2f} of the "
                  f"target {target:.2f}")
    return PrefixCacheCheck(
        target_hit_rate=target, tolerance=tolerance, phases=phases, expected_hit_rate=expected,
        achieved_hit_rate=achieved, hits_tokens=None if span is None else span.hits_tokens,
        queries_tokens=None if span is None else span.queries_tokens,
        span_s=None if span is None else span.span_s, verdict=verdict, reason=reason)
