"""How faithfully a trace replay (`traffic.profile: trace`) reproduced its trace, over the
measured window (pure: the caller reads the files).

The plan records what the trace asks of the window (provenance `plan.trace.measured_window`:
the requests it schedules there, their inter-arrival gaps, lengths, block reuse and the
prefix-cache hit rate they imply with an unbounded cache, `loadtests/trace_replay.py`); the run
measures what was sent (the measured rows' send times, planned prompt tokens and the output
tokens the server counted) and what vLLM's prefix cache counted (Δ hits / Δ queries between
the first and last /metrics scrape in the window, as `analysis/prefix_cache.py` reads them).

**trace_hit_rate_mismatch** (a named warning) when |counted − implied| > the stated tolerance
(`traffic.trace.hit_rate_tolerance`, 0.05 by default). A warning, not an invalid run: a
server whose cache is smaller than the trace's working set evicts blocks the trace reuses,
and that hit rate is the server's answer to the trace, not a replay that went wrong; the
warning says the measured load had less (or more) prefix reuse than the trace. No counters in
the window: **trace_hit_rate_unverified**.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vllm_slo.analysis.prefix_cache import CounterSpan

MISMATCH_NAME = "trace_hit_rate_mismatch"
UNVERIFIED_NAME = "trace_hit_rate_unverified"
DEFAULT_TOLERANCE = 0.05

# (statistic, its key in the plan's statistics) as the report's rows list them
_ROWS = (("requests", "requests"), ("rate (req/s)", "rate_per_s"),
         ("inter-arrival mean (s)", "gap_s_mean"), ("inter-arrival p50 (s)", "gap_s_p50"),
         ("inter-arrival p99 (s)", "gap_s_p99"), ("inter-arrival CV", "gap_cv"),
         ("input tokens mean", "input_tokens_mean"), ("input tokens p99", "input_tokens_p99"),
         ("output tokens mean", "output_tokens_mean"),
         ("output tokens p99", "output_tokens_p99"), ("prefix-cache hit rate", "hit_rate"))


@dataclass(frozen=True, slots=True)
class FidelityRow:
    """One statistic: what the trace scheduled in the window, and what the run sent (for the
    hit rate: implied by the trace, and counted by vLLM)."""

    statistic: str
    trace: float | None
    sent: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceFidelity:
    """summary.json `traffic.trace`."""

    format: str
    file: str
    speedup: float
    rate_scale: float
    implied_hit_rate: float | None
    achieved_hit_rate: float | None
    tolerance: float
    hits_tokens: float | None
    queries_tokens: float | None
    verdict: str  # met | mismatch | unverified
    reason: str
    rows: tuple[FidelityRow, ...]

    def warning(self) -> str | None:
        if self.verdict == "met":
            return None
        name = MISMATCH_NAME if self.verdict == "mismatch" else UNVERIFIED_NAME
        return f"{name}: {self.reason}"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if np.isfinite(value) else None


def sent_statistics(send_unix_s: Sequence[float], input_tokens: Sequence[int | None],
                    output_tokens: Sequence[int | None]) -> dict[str, float | None]:
    """The measured rows described as the plan describes the trace's window."""
    times = np.sort(np.asarray(send_unix_s, dtype=float))
    gaps = np.diff(times) if times.size > 1 else np.empty(0)
    span = float(times[-1] - times[0]) if times.size > 1 else 0.0

    def spread(values: Sequence[int | None], prefix: str) -> dict[str, float | None]:
        kept = np.asarray([v for v in values if v is not None], dtype=float)
        if kept.size == 0:
            return {f"{prefix}_mean": None, f"{prefix}_p99": None}
        return {f"{prefix}_mean": float(kept.mean()),
                f"{prefix}_p99": float(np.percentile(kept, 99))}

    return {
        "requests": float(times.size),
        "rate_per_s": (times.size - 1) / span if span > 0 else None,
        "gap_s_mean": float(gaps.mean()) if gaps.size else None,
        "gap_s_p50": float(np.percentile(gaps, 50)) if gaps.size else None,
        "gap_s_p99": float(np.percentile(gaps, 99)) if gaps.size else None,
        "gap_cv": float(gaps.std() / gaps.mean()) if gaps.size > 1 and gaps.mean() > 0
        else None,
        **spread(input_tokens, "input_tokens"), **spread(output_tokens, "output_tokens")}


def trace_fidelity(facts: Mapping[str, Any], send_unix_s: Sequence[float],
                   input_tokens: Sequence[int | None], output_tokens: Sequence[int | None],
                   span: CounterSpan | None) -> TraceFidelity:
    """The replay's check (see the module docstring). `facts`: provenance's `plan.trace`;
    the sequences: the measured rows' send times, planned prompt tokens and counted output
    tokens; `span`: vLLM's prefix-cache counters over the window."""
    planned = facts.get("measured_window")
    planned = planned if isinstance(planned, Mapping) else {}
    implied = _finite(planned.get("implied_hit_rate"))
    tolerance = _finite(facts.get("hit_rate_tolerance")) or DEFAULT_TOLERANCE
    achieved = None if span is None else span.hit_rate
    sent = sent_statistics(send_unix_s, input_tokens, output_tokens)
    sent["hit_rate"] = achieved
    trace_side = {key: _finite(planned.get(key)) for _, key in _ROWS}
    trace_side["hit_rate"] = implied
    rows = tuple(FidelityRow(name, trace_side[key], sent.get(key)) for name, key in _ROWS)
    if implied is None or achieved is None:
        why = ("the plan recorded no implied hit rate for the window (no request scheduled "
               "in it)" if implied is None else
               "the server exported no prefix-cache counters inside the measured window "
               "(fewer than two /metrics scrapes in it, or no vllm:prefix_cache_* counters)"
               if span is None else "the server counted no prefix-cache query in the window")
        verdict, reason = "unverified", f"the trace's prefix reuse not checked: {why}"
    elif abs(achieved - implied) > tolerance:
        assert span is not None
        verdict = "mismatch"
        reason = (f"vLLM counted a prefix-cache hit rate of {achieved:.3f} over the measured "
                  f"window, {abs(achieved - implied):.3f} from the {implied:.3f} the trace "
                  f"implies (tolerance {tolerance:.2f}; {span.hits_tokens:.0f} of "
                  f"{span.queries_tokens:.0f} prompt tokens hit): "
                  + ("less reuse than the trace has (a cache smaller than the trace's working "
                     "set, requests sent before an earlier one's prefill finished, or prefix "
                     "caching off)" if achieved < implied else
                     "more reuse than the trace has (the chat template's shared tokens, or a "
                     "cache warm from earlier traffic: prefix_cache: keep)"))
    else:
        verdict = "met"
        reason = (f"prefix-cache hit rate {achieved:.3f} within {tolerance:.2f} of the "
                  f"trace's {implied:.3f}")
    return TraceFidelity(
        format=str(facts.get("format", "")), file=str(facts.get("file", "")),
        speedup=_finite(facts.get("speedup")) or 1.0,
        rate_scale=_finite(facts.get("rate_scale")) or 1.0,
        implied_hit_rate=implied, achieved_hit_rate=achieved, tolerance=tolerance,
        hits_tokens=None if span is None else span.hits_tokens,
        queries_tokens=None if span is None else span.queries_tokens,
        verdict=verdict, reason=reason, rows=rows)
