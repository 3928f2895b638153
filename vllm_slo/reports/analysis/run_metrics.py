"""From sample rows to per-run metric series and their summary (pure; no I/O).

Definitions (README "Measurement definitions"):
- TTFT: first content chunk − intended send. E2E: end of response − intended send.
- ITL: gaps between successive content chunks of a request, pooled over requests (vLLM's), in
  the order the gaps ended (wall clock): a stall that hits every stream at once is then one
  cluster of gaps, and the percentile interval's effective sample size sees it as such.
- TPOT: (E2E − TTFT) / (output tokens − 1), per request with ≥ 2 output tokens.
- Only rows in the `measure` phase count; warm-up and cool-down rows are kept on disk.
- Output throughput: output tokens of successful requests whose chunks *arrived* inside the
  measured window, per second (a request straddling a boundary counts partly; a chunk carrying
  several tokens counts its share of the request's usage count), so it can never exceed what
  the server emitted. Request throughput: successful requests *completed* inside the window.
  Both CIs come from per-second bins (autocorrelation-aware).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vllm_slo.reports.analysis.chunk_times import gaps_in_arrival_order, tokens_by_arrival
from vllm_slo.reports.analysis.statistics import (
    Estimate,
    mean_estimate,
    percentile_estimates,
    rate_estimate,
)
from vllm_slo.scenarios.metrics import LATENCY_METRICS, METRICS
from vllm_slo.scenarios.samples_format import ROW_ORDER

REPORTED_PERCENTILES = (50.0, 90.0, 95.0, 99.0)


@dataclass(frozen=True, slots=True)
class RunSeries:
    """Time-ordered per-request series of the measured window (seconds)."""

    ttft_s: np.ndarray
    itl_s: np.ndarray
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    send_lag_s: np.ndarray
    window_start_unix_s: float | None
    window_s: float
    requests: int
    failed: int
    output_tokens_per_bin: np.ndarray  # per 1-s bin of the window, by chunk arrival time
    completions_per_bin: np.ndarray
    errors_by_kind: dict[str, int] = field(default_factory=dict)
    queued_for_slot: int = 0  # open loop: measured requests that waited for an in-flight slot
    client_send_lag_s: np.ndarray = field(default_factory=lambda: np.empty(0))  # not queued
    reused_prompts: int = 0  # requests that repeated an earlier plan entry (plan cycled)
    ok_without_usage: int = 0  # successful measured requests whose stream had no usage chunk
    prompt_tokens: np.ndarray = field(default_factory=lambda: np.empty(0))  # server-counted
    output_tokens: np.ndarray = field(default_factory=lambda: np.empty(0))
    # every measured request in send order (failures included: NaN latencies), for goodput
    measured_ok: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=bool))
    measured_send_unix_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    measured_latency_s: dict[str, np.ndarray] = field(default_factory=dict)
    # each measured request's profile (a mix's part; "" without the column), for goodput
    measured_profile: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=object))

    def latency(self, metric: str) -> np.ndarray:
        """A latency metric's values (its registry entry names the field above)."""
        series: np.ndarray = getattr(self, METRICS[metric].series_field)
        return series


@dataclass(frozen=True, slots=True)
class MetricSummary:
    metric: str
    count: int
    mean: Estimate
    percentiles: dict[float, Estimate]


@dataclass(frozen=True, slots=True)
class RunSummary:
    metrics: dict[str, MetricSummary]
    requests: int
    ok: int
    failed: int
    error_rate: Estimate
    output_tokens_per_s: Estimate
    requests_per_s: Estimate
    send_lag_p99_s: float | None
    send_lag_p50_s: float | None
    client_send_lag_p99_s: float | None  # lag of requests that did not wait for a slot
    queued_for_slot: int
    reused_prompts: int
    sent_per_s: float  # measured requests by intended send time / window
    window_s: float
    errors_by_kind: dict[str, int]
    warnings: tuple[str, ...]


def error_kind(text: str) -> str:
    head = text.split(":", 1)[0].strip()
    return head[:60] or "unknown"


def failure_kinds(table: pa.Table, rows: np.ndarray) -> list[str]:
    """What became of each of these failed rows: its status (schema 3: one word of
    scenarios.samples_format.REQUEST_STATUSES), else — rows written before statuses, imported
    ones — the head of its error text."""
    take = pa.array(rows, type=pa.int64())
    errors = table.column("error").take(take).to_pylist()
    statuses = (table.column("status").take(take).to_pylist()
                if "status" in table.column_names else [None] * len(errors))
    return [status or error_kind(error or "")
            for status, error in zip(statuses, errors, strict=True)]


def pooled_gaps(offset_lists: pa.ListArray, send_unix_s: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray]:
    """Gaps between successive chunk offsets within each request, pooled in row order, and
    when each gap ended (the request's intended send + the later chunk's offset, Unix
    seconds). The run's series take them in arrival order from
    `chunk_times.gaps_in_arrival_order`, which equals `time_ordered(*pooled_gaps(...))`."""
    flat = np.asarray(offset_lists.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    if flat.size < 2:
        return np.empty(0), np.empty(0)
    offsets = offset_lists.offsets.to_numpy()
    keep = np.ones(flat.size - 1, dtype=bool)
    starts = (offsets - offsets[0])[1:-1]
    keep[starts[(starts > 0) & (starts < flat.size)] - 1] = False  # no gap across requests
    ends = np.repeat(np.asarray(send_unix_s, dtype=np.float64), np.diff(offsets)) + flat
    return np.diff(flat)[keep], ends[1:][keep]


def _in_row_order(table: pa.Table) -> bool:
    """Whether the rows already are in ROW_ORDER (samples.parquet is written so)."""
    if table.num_rows < 2:
        return True
    sent = table.column("intended_send_unix_s").to_numpy()
    step = np.diff(sent)
    if not (step >= 0).all():
        return False
    ties = np.flatnonzero(step == 0)
    if not ties.size:
        return True
    ids = table.column("request_id")
    return bool(pc.all(pc.less_equal(ids.take(pa.array(ties)),
                                     ids.take(pa.array(ties + 1)))).as_py())


def _column(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def _mask(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).fill_null(False).to_numpy(zero_copy_only=False),
                      dtype=bool)


def run_series(table: pa.Table, window_s: float, bin_s: float = 1.0) -> RunSeries:
    """Series of the `measure` rows of a samples table (any row order on input)."""
    if not _in_row_order(table):
        table = table.sort_by(ROW_ORDER)
    measured = np.asarray(pc.equal(table.column("phase"), "measure").fill_null(False)
                          .to_numpy(zero_copy_only=False), dtype=bool)
    ok = _mask(table, "ok")
    good = measured & ok

    def floats(name: str, mask: np.ndarray) -> np.ndarray:
        values = _column(table, name)[mask]
        kept: np.ndarray = values[~np.isnan(values)]
        return kept

    ttft = floats("ttft_s", good)
    e2e_all = _column(table, "e2e_s")
    ttft_all = _column(table, "ttft_s")
    tokens_all = _column(table, "output_tokens")
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot_all = (e2e_all - ttft_all) / (tokens_all - 1.0)
    tpot_mask = good & (tokens_all >= 2) & np.isfinite(tpot_all)
    intended = _column(table, "intended_send_unix_s")
    column = table.column("chunk_offsets_s")  # one chunk: no copy of 250 M offsets
    chunk_offsets = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    itl = gaps_in_arrival_order(chunk_offsets, intended, good)
    window_start = float(intended[measured].min()) if measured.any() else None
    n_bins = max(1, int(np.ceil(window_s / bin_s)))
    tokens_per_bin = np.zeros(n_bins)
    completions_per_bin = np.zeros(n_bins)
    if window_start is not None:
        end_unix = intended + np.nan_to_num(e2e_all, nan=np.inf)
        inside = ok & (end_unix >= window_start) & (end_unix < window_start + n_bins * bin_s)
        index = ((end_unix[inside] - window_start) // bin_s).astype(int)
        np.add.at(completions_per_bin, index, 1.0)
        tokens_per_bin = tokens_by_arrival(chunk_offsets, intended, tokens_all, ok,
                                           window_start, bin_s, n_bins)
    queued = _mask(table, "queued_for_slot")
    plan_index = table.column("plan_index").drop_null().to_numpy()
    reused = int(plan_index.size - np.unique(plan_index).size)
    failed_rows = np.flatnonzero(measured & ~ok)
    kinds = Counter(failure_kinds(table, failed_rows))
    return RunSeries(
        ttft_s=ttft, itl_s=itl, tpot_s=tpot_all[tpot_mask], e2e_s=floats("e2e_s", good),
        send_lag_s=floats("send_lag_s", measured), window_start_unix_s=window_start,
        window_s=float(n_bins * bin_s), requests=int(measured.sum()),
        failed=int((measured & ~ok).sum()), output_tokens_per_bin=tokens_per_bin / bin_s,
        completions_per_bin=completions_per_bin / bin_s, errors_by_kind=dict(kinds),
        queued_for_slot=int(np.count_nonzero(measured & queued)),
        client_send_lag_s=floats("send_lag_s", measured & ~queued),
        reused_prompts=reused, prompt_tokens=floats("prompt_tokens", good),
        ok_without_usage=int(np.count_nonzero(
            good & ~table.column("output_tokens").is_valid().to_numpy(zero_copy_only=False))),
        output_tokens=floats("output_tokens", good),
        measured_ok=ok[measured], measured_send_unix_s=intended[measured],
        measured_latency_s={"ttft": ttft_all[measured], "tpot": tpot_all[measured],
                            "e2e": e2e_all[measured]},
        measured_profile=_profiles(table)[measured])


def _profiles(table: pa.Table) -> np.ndarray:
    if "profile" not in table.column_names:
        return np.full(table.num_rows, "", dtype=object)
    return np.asarray(table.column("profile").fill_null("").to_numpy(zero_copy_only=False),
                      dtype=object)


def summarize_metric(metric: str, values: np.ndarray, confidence: float = 0.95
                     ) -> MetricSummary:
    return MetricSummary(
        metric=metric, count=int(values.size),
        mean=mean_estimate(values, confidence),
        percentiles=percentile_estimates(values, REPORTED_PERCENTILES, confidence))


def summarize(series: RunSeries, confidence: float = 0.95) -> RunSummary:
    warnings: list[str] = []
    if series.requests == 0:
        warnings.append("no requests in the measured window")
    ok = series.requests - series.failed
    if series.requests and ok == 0:
        warnings.append("every measured request failed")
    if series.ok_without_usage:
        warnings.append(f"{series.ok_without_usage} successful request(s) carried no usage "
                        "chunk: their output tokens are unknown and count in no throughput")
    lag = series.send_lag_s
    client_lag = series.client_send_lag_s
    return RunSummary(
        metrics={m: summarize_metric(m, series.latency(m), confidence) for m in LATENCY_METRICS},
        requests=series.requests, ok=ok, failed=series.failed,
        error_rate=rate_estimate(series.failed, series.requests, confidence),
        output_tokens_per_s=mean_estimate(series.output_tokens_per_bin, confidence),
        requests_per_s=mean_estimate(series.completions_per_bin, confidence),
        send_lag_p99_s=float(np.percentile(lag, 99)) if lag.size else None,
        send_lag_p50_s=float(np.percentile(lag, 50)) if lag.size else None,
        client_send_lag_p99_s=(float(np.percentile(client_lag, 99)) if client_lag.size
                               else None),
        queued_for_slot=series.queued_for_slot, reused_prompts=series.reused_prompts,
        sent_per_s=series.requests / series.window_s if series.window_s else 0.0,
        window_s=series.window_s, errors_by_kind=series.errors_by_kind,
        warnings=tuple(warnings))


def measured_profiles(table: pa.Table) -> list[str]:
    """The profiles of the measured rows (a mix has two or more), in first-seen order."""
    if "profile" not in table.column_names:
        return []
    measured = pc.equal(table.column("phase"), "measure").fill_null(False)
    names = table.column("profile").filter(measured).drop_null().unique().to_pylist()
    return [str(name) for name in names]


def series_by_profile(table: pa.Table, window_s: float, is_mix: bool = False
                      ) -> dict[str, RunSeries]:
    """A mix's parts, each a series of its own rows over the same window (throughput: the
    part's tokens by arrival); {} for a run of one profile. `is_mix` (the scenario's traffic
    is a mix): every part with measured rows, also when only one of them had any."""
    names = measured_profiles(table)
    if len(names) < (1 if is_mix else 2):
        return {}
    profile = table.column("profile")
    return {name: run_series(table.filter(pc.equal(profile, name).fill_null(False)), window_s)
            for name in names}
