"""From sample rows to per-run metric series and their summary (pure; no I/O).

Definitions (docs/measurement.md):
- TTFT: first content chunk − intended send. E2E: end of response − intended send.
- ITL: gaps between successive content chunks of a request, pooled over requests (vLLM's), in
  the order the gaps ended (wall clock): a stall that hits every stream at once is then one
  cluster of gaps, and the percentile interval's effective sample size sees it as such.
- TPOT: (E2E − TTFT) / (output tokens − 1), per request with ≥ 2 output tokens (usage count).
- Chunks are token chunks of any kind (reasoning and answer); TTFT is the first of them.
  ITL_TOKEN: each gap g ending in a chunk of k tokens as k gaps of g/k (`chunk_tokens`).
  TTFT_ANSWER: first answer (content) chunk − intended send; REASONING_TIME: first answer
  chunk − first token chunk, for requests that reasoned and answered. A request that
  reasoned and never answered is a success without a TTFT_ANSWER, counted in `StreamFacts`.
- Only rows in the `measure` phase count; warm-up and cool-down rows are kept on disk.
- Output throughput: output tokens of successful requests whose chunks *arrived* inside the
  measured window, per second (a request straddling a boundary counts partly; a chunk carrying
  several tokens counts its share of the request's usage count), so it can never exceed what
  the server emitted. Request throughput: successful requests *completed* inside the window.
- Goodput: of the requests request throughput counts (`counted_*`, in completion order), those
  that met every per-request latency SLO, over the same span: goodput <= request throughput
  by construction (`verdicts.goodput`; docs/statistics.md "Goodput").
- Both rates are counts over the span they were measured over (`rate_span_s`): the scenario's
  window, or, for a run cut short (Ctrl-C, abort, a dead load generator), the window up to the
  last thing any request did. Never a mean of whole-second bins: a 12.97 s window is not 13 s,
  and an interrupted 10 s run did not measure for 10 s. Their CIs come from the 1-s bins of
  that span (the last one partial, weighted by its length) as a ratio estimator with an
  autocorrelation-aware effective size (`span_rate_estimate`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy import stats

from vllm_slo.analysis.chunk_times import gaps_in_arrival_order, tokens_by_arrival
from vllm_slo.analysis.chunk_tokens import (
    StreamFacts,
    stream_facts,
    token_gaps_in_arrival_order,
)
from vllm_slo.analysis.sessions import EMPTY as EMPTY_SESSIONS
from vllm_slo.analysis.sessions import SessionSeries, session_series
from vllm_slo.run_folder.samples_format import ROW_ORDER
from vllm_slo.scenarios.metrics import (
    LATENCY_METRICS,
    METRICS,
    MetricSourceError,
    metric_samples,
)
from vllm_slo.scenarios.slo import ADAPTER_PART
from vllm_slo.stats.effective_size import effective_sample_size
from vllm_slo.stats.inputs import check_confidence
from vllm_slo.stats.statistics import (
    Estimate,
    mean_estimate,
    percentile_estimates,
    rate_estimate,
)

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
    window_s: float  # the scenario's measured window (planned)
    requests: int
    failed: int
    # per second in each 1-s bin of the rate span, by chunk arrival time (the last bin may be
    # partial: its count over its own length, `bin_widths_s`)
    output_tokens_per_bin: np.ndarray
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
    # the span the rates are over (None: window_s) and each bin's length (empty: 1 s each)
    rate_span_s: float | None = None
    # the requests request throughput counts (successful, completed inside the rate span, of
    # any phase), in completion order: their end times, latencies, profiles and adapters, for
    # goodput over the same requests and span (None: a series built without rows)
    counted_end_unix_s: np.ndarray | None = None
    counted_latency_s: dict[str, np.ndarray] = field(default_factory=dict)
    counted_profile: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=object))
    counted_adapter: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=object))
    bin_widths_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    # multi-token chunks and reasoning (schema 6; empty for older runs where unknown)
    itl_token_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    ttft_answer_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    reasoning_time_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    stream: StreamFacts | None = None
    # the agent profile's sessions (analysis/sessions.py; EMPTY for other profiles)
    sessions: SessionSeries = EMPTY_SESSIONS

    @property
    def session_e2e_s(self) -> np.ndarray:
        """Complete measured sessions' durations, in the order they started."""
        return self.sessions.e2e_s

    @property
    def span_s(self) -> float:
        """Seconds the rates were measured over: the window, or less for a run cut short."""
        return self.window_s if self.rate_span_s is None else self.rate_span_s

    def bin_widths(self) -> np.ndarray:
        """Each rate bin's length in seconds (the last bin of a span may be partial)."""
        if self.bin_widths_s.size == self.output_tokens_per_bin.size:
            return self.bin_widths_s
        return np.ones(self.output_tokens_per_bin.size)

    def rate_per_s(self, metric: str) -> float | None:
        """A rate metric's point value: its count over the span (None: no span, or a
        registered metric whose source failed: `metric_failure` says why)."""
        try:
            per_bin = self.samples(metric)
        except MetricSourceError:
            return None
        widths = self.bin_widths()
        span_s = float(widths.sum())
        return float(np.dot(per_bin, widths)) / span_s if span_s > 0 else None

    def rate_estimate(self, metric: str, confidence: float = 0.95) -> Estimate:
        """A rate metric's count over the span with its interval (`span_rate_estimate`); a
        registered metric whose source failed: no value, the failure as its warning."""
        try:
            per_bin = self.samples(metric)
        except MetricSourceError as error:
            return Estimate(None, None, None, confidence, 0, 0.0, "none", (str(error),))
        return span_rate_estimate(per_bin, self.bin_widths(), confidence)

    def metric_failure(self, metric: str) -> str | None:
        """Why a registered metric has no values in this run (its sample source raised or
        returned the wrong type), naming plugin and metric; None when it has them."""
        try:
            self.samples(metric)
        except MetricSourceError as error:
            return str(error)
        return None

    def samples(self, metric: str) -> np.ndarray:
        """A metric's values in this run, from its registry entry's sample source: per
        request or gap (latency), per second in each bin of the rate span (rate)."""
        return metric_samples(METRICS[metric], self)

    def latency(self, metric: str) -> np.ndarray:
        """A latency metric's values (its registry entry's sample source)."""
        return self.samples(metric)


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
    sent_per_s: float  # measured requests by intended send time / rate span
    window_s: float
    errors_by_kind: dict[str, int]
    warnings: tuple[str, ...]
    rate_span_s: float = 0.0  # the seconds every rate above is over (window_s unless cut short)
    stream: StreamFacts | None = None  # tokens per chunk and reasoning (None: not computed)


def error_kind(text: str) -> str:
    head = text.split(":", 1)[0].strip()
    return head[:60] or "unknown"


def failure_kinds(table: pa.Table, rows: np.ndarray) -> list[str]:
    """What became of each of these failed rows: its status (schema 3: one word of
    run_folder.samples_format.REQUEST_STATUSES), else — rows written before statuses, imported
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


def traffic_stopped_unix_s(table: pa.Table) -> float | None:
    """The last moment any row (any phase, any outcome) shows the client and server at work:
    its actual send, its first chunk or its end (a request cut at the stop ends there).
    None for an empty table."""
    if table.num_rows == 0:
        return None
    intended = _column(table, "intended_send_unix_s")
    events = [_column(table, "send_unix_s"), intended + _column(table, "ttft_s"),
              intended + _column(table, "e2e_s")]
    latest = np.fmax.reduce(np.vstack(events), axis=0)
    return float(np.nanmax(latest)) if np.isfinite(latest).any() else None


def rate_span_s(window_start_unix_s: float | None, window_s: float,
                stopped_unix_s: float | None) -> float:
    """The seconds a run's rates are over: the window, or for a run cut short (`stopped_unix_s`
    given: `traffic_stopped_unix_s`) the window up to that moment (an interrupted 10 s run that
    stopped at 3.2 s measured 3.2 s). A run that went the whole way keeps its window even when
    its last request ended early (an open loop's idle tail is part of what it measured)."""
    if stopped_unix_s is None or window_start_unix_s is None:
        return window_s
    if stopped_unix_s <= window_start_unix_s:
        return window_s
    return min(window_s, stopped_unix_s - window_start_unix_s)


def span_bins(span_s: float, bin_s: float) -> np.ndarray:
    """The lengths of the bins covering a span: whole `bin_s` bins, the last one partial
    (a span within 1 ns of a whole number of bins gets no sliver of a last bin)."""
    n_bins = max(1, math.ceil(span_s / bin_s - 1e-9))
    widths = np.full(n_bins, float(bin_s))
    widths[-1] = span_s - (n_bins - 1) * bin_s
    return widths


def span_rate_estimate(per_bin: np.ndarray, widths_s: np.ndarray, confidence: float = 0.95
                       ) -> Estimate:
    """A count over the span it was measured in, per second, with a ratio-estimator interval
    (``method="ratio-t-ess"``).

    ``per_bin``: the rate in each bin (count / its length), time-ordered; ``widths_s``: the
    bins' lengths. Value ``R = sum(count) / sum(width)``, exactly the count over the span.
    Interval ``R ± t(n_eff - 1) * n * sd(e) / (sqrt(n_eff) * span)`` with residuals
    ``e = count - R * width`` (a partial bin weighs by its length) and ``n_eff`` their
    effective size: with whole bins it is `mean_estimate`'s t-ess interval. It is zero-wide
    only when every bin holds the same rate. Cut at 0 as the mean's is."""
    check_confidence(confidence)
    rates = np.asarray(per_bin, dtype=np.float64)
    widths = np.asarray(widths_s, dtype=np.float64)
    method = "ratio-t-ess"
    span_s = float(widths.sum())
    if rates.size == 0 or rates.size != widths.size or not span_s > 0.0:
        return Estimate(None, None, None, confidence, 0, 0.0, method,
                        ("no measured span for a rate",))
    counts = rates * widths
    value = float(counts.sum()) / span_s
    n = rates.size
    residuals = counts - value * widths
    n_eff = effective_sample_size(residuals)
    if n < 2 or n_eff < 2.0:
        return Estimate(value, None, None, confidence, n, n_eff, method,
                        (f"no interval for a rate over {span_s:.3g} s (need >= 2 effective "
                         f"bins, have {n_eff:.1f} of {n})",))
    half = (float(stats.t.ppf(0.5 + confidence / 2.0, n_eff - 1.0))
            * n * float(residuals.std(ddof=1)) / (math.sqrt(n_eff) * span_s))
    low = value - half
    warnings: tuple[str, ...] = ()
    if low < 0.0 <= float(counts.min()):
        low = 0.0
        warnings = ("the interval of the rate reached below 0 and was cut there: the series "
                    "is too erratic for a symmetric interval",)
    return Estimate(value, low, value + half, confidence, n, n_eff, method, warnings)


def run_series(table: pa.Table, window_s: float, bin_s: float = 1.0,
               cut_short: bool = False) -> RunSeries:
    """Series of the `measure` rows of a samples table (any row order on input). `cut_short`:
    the run stopped before its planned end (interrupted, aborted, the load generator died),
    so its rates are over the span up to when traffic stopped (`rate_span_s`)."""
    return _series(table, window_s, bin_s,
                   traffic_stopped_unix_s(table) if cut_short else None)


def _series(table: pa.Table, window_s: float, bin_s: float, stopped_unix_s: float | None
            ) -> RunSeries:
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
    tokens_column = table.column("chunk_tokens")
    chunk_tokens = (tokens_column.chunk(0) if tokens_column.num_chunks == 1
                    else tokens_column.combine_chunks())
    itl_token = token_gaps_in_arrival_order(chunk_offsets, chunk_tokens, intended, good)
    reasoning_column = table.column("reasoning_chunks")
    before_schema_6 = ~reasoning_column.is_valid().to_numpy(zero_copy_only=False)
    reasoning_chunks = _column(table, "reasoning_chunks").copy()
    reasoning_chunks[before_schema_6] = 0.0
    ttft_answer_all = _column(table, "ttft_answer_s").copy()
    ttft_answer_all[before_schema_6] = ttft_all[before_schema_6]  # content chunks only then
    answered = ~np.isnan(ttft_answer_all)
    with np.errstate(invalid="ignore"):
        reasoning_time_all = np.where(reasoning_chunks > 0, ttft_answer_all - ttft_all, 0.0)
    reasoned = good & (reasoning_chunks > 0) & answered
    facts = stream_facts(chunk_tokens, good, reasoning_chunks, answered,
                         _column(table, "reasoning_tokens"))
    window_start = float(intended[measured].min()) if measured.any() else None
    span_s = rate_span_s(window_start, window_s, stopped_unix_s)
    widths = span_bins(span_s, bin_s)
    n_bins = widths.size
    tokens_per_bin = np.zeros(n_bins)
    completions_per_bin = np.zeros(n_bins)
    end_unix = intended + np.nan_to_num(e2e_all, nan=np.inf)
    inside = np.zeros(table.num_rows, dtype=bool)
    if window_start is not None:
        span_end = window_start + span_s
        inside = ok & (end_unix >= window_start) & (end_unix < span_end)
        index = np.minimum((end_unix[inside] - window_start) // bin_s, n_bins - 1).astype(int)
        np.add.at(completions_per_bin, index, 1.0)
        tokens_per_bin = tokens_by_arrival(chunk_offsets, intended, tokens_all, ok,
                                           window_start, bin_s, n_bins, end_unix_s=span_end)
    queued = _mask(table, "queued_for_slot")
    plan_index = table.column("plan_index").drop_null().to_numpy()
    reused = int(plan_index.size - np.unique(plan_index).size)
    failed_rows = np.flatnonzero(measured & ~ok)
    kinds = Counter(failure_kinds(table, failed_rows))
    latency_all = {"ttft": ttft_all, "tpot": tpot_all, "e2e": e2e_all,
                   "ttft_answer": ttft_answer_all, "reasoning_time": reasoning_time_all}
    counted = np.flatnonzero(inside)
    counted = counted[np.argsort(end_unix[counted], kind="stable")]
    return RunSeries(
        ttft_s=ttft, itl_s=itl, tpot_s=tpot_all[tpot_mask], e2e_s=floats("e2e_s", good),
        send_lag_s=floats("send_lag_s", measured), window_start_unix_s=window_start,
        window_s=float(window_s), requests=int(measured.sum()),
        failed=int((measured & ~ok).sum()), output_tokens_per_bin=tokens_per_bin / widths,
        completions_per_bin=completions_per_bin / widths, errors_by_kind=dict(kinds),
        queued_for_slot=int(np.count_nonzero(measured & queued)),
        client_send_lag_s=floats("send_lag_s", measured & ~queued),
        reused_prompts=reused, prompt_tokens=floats("prompt_tokens", good),
        ok_without_usage=int(np.count_nonzero(
            good & ~table.column("output_tokens").is_valid().to_numpy(zero_copy_only=False))),
        output_tokens=floats("output_tokens", good),
        measured_ok=ok[measured], measured_send_unix_s=intended[measured],
        measured_latency_s={name: values[measured] for name, values in latency_all.items()},
        measured_profile=_profiles(table)[measured], rate_span_s=span_s, bin_widths_s=widths,
        counted_end_unix_s=end_unix[counted],
        counted_latency_s={name: values[counted] for name, values in latency_all.items()},
        counted_profile=_profiles(table)[counted], counted_adapter=_adapters(table)[counted],
        itl_token_s=itl_token, ttft_answer_s=ttft_answer_all[good & answered],
        reasoning_time_s=reasoning_time_all[reasoned], stream=facts,
        sessions=session_series(table))


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
    facts = series.stream
    if facts is not None and facts.requests_without_chunk_tokens:
        warnings.append(f"{facts.requests_without_chunk_tokens} successful request(s) came "
                        "without per-chunk usage (continuous_usage_stats): their tokens per "
                        "chunk are unknown and itl_token leaves them out")
    if facts is not None and facts.reasoning_without_answer:
        warnings.append(f"{facts.reasoning_without_answer} successful request(s) reasoned and "
                        "never answered (no content chunk): ttft_answer and reasoning_time "
                        "leave them out")
    span_s = series.span_s
    if span_s < series.window_s:
        warnings.append(f"traffic stopped {span_s:.2f} s into the {series.window_s:g} s "
                        f"window: every rate is over the {span_s:.2f} s measured")
    lag = series.send_lag_s
    client_lag = series.client_send_lag_s
    widths = series.bin_widths()
    return RunSummary(
        metrics={m: summarize_metric(m, series.latency(m), confidence) for m in LATENCY_METRICS},
        requests=series.requests, ok=ok, failed=series.failed,
        error_rate=rate_estimate(series.failed, series.requests, confidence),
        output_tokens_per_s=span_rate_estimate(series.output_tokens_per_bin, widths,
                                               confidence),
        requests_per_s=completion_rate(series, confidence),
        send_lag_p99_s=float(np.percentile(lag, 99)) if lag.size else None,
        send_lag_p50_s=float(np.percentile(lag, 50)) if lag.size else None,
        client_send_lag_p99_s=(float(np.percentile(client_lag, 99)) if client_lag.size
                               else None),
        queued_for_slot=series.queued_for_slot, reused_prompts=series.reused_prompts,
        sent_per_s=series.requests / span_s if span_s else 0.0,
        window_s=series.window_s, errors_by_kind=series.errors_by_kind,
        warnings=tuple(warnings), rate_span_s=span_s, stream=facts)


def completion_rate(series: RunSeries, confidence: float = 0.95) -> Estimate:
    """Request throughput: `span_rate_estimate` of the completions per bin, its value the
    count of counted requests over the span (`len(counted_end_unix_s) / sum(bin widths)`,
    the very float goodput scales by, so goodput <= it holds exactly, not to a rounding of
    count/width*width); a series without counted rows keeps the per-bin value."""
    widths = series.bin_widths()
    estimate = span_rate_estimate(series.completions_per_bin, widths, confidence)
    if series.counted_end_unix_s is None or estimate.value is None:
        return estimate
    value = series.counted_end_unix_s.size / float(widths.sum())
    low = None if estimate.ci_low is None else min(estimate.ci_low, value)
    high = None if estimate.ci_high is None else max(estimate.ci_high, value)
    return dataclasses.replace(estimate, value=value, ci_low=low, ci_high=high)


def measured_profiles(table: pa.Table) -> list[str]:
    """The profiles of the measured rows (a mix has two or more), in first-seen order."""
    return measured_names(table, "profile")


def measured_names(table: pa.Table, column: str) -> list[str]:
    """The distinct non-null values of `column` (profile, adapter) among the measured rows,
    in first-seen order; [] when the table has no such column."""
    if column not in table.column_names:
        return []
    measured = pc.equal(table.column("phase"), "measure").fill_null(False)
    names = table.column(column).filter(measured).drop_null().unique().to_pylist()
    return [str(name) for name in names]


def series_by_profile(table: pa.Table, window_s: float, is_mix: bool = False,
                      cut_short: bool = False) -> dict[str, RunSeries]:
    """A mix's parts, each a series of its own rows over the same window (throughput: the
    part's tokens by arrival); {} for a run of one profile. `is_mix` (the scenario's traffic
    is a mix): every part with measured rows, also when only one of them had any. A run cut
    short: every part over the whole run's span (traffic stopped for all of them at once)."""
    return _series_by(table, "profile", window_s, is_mix, cut_short)


def series_by_adapter(table: pa.Table, window_s: float, is_lora: bool = False,
                      cut_short: bool = False) -> dict[str, RunSeries]:
    """A LoRA mix's names (`base` and each adapter, traffic.lora), each a series of its own
    rows, as `series_by_profile` makes a mix's parts; keyed by the traffic.lora name."""
    return _series_by(table, "adapter", window_s, is_lora, cut_short)


def _series_by(table: pa.Table, column: str, window_s: float, declared: bool,
               cut_short: bool) -> dict[str, RunSeries]:
    """Each value of `column` a series of its own rows over the same window; {} unless the
    scenario declared the split (`declared`: then even one value) or two values occur."""
    names = measured_names(table, column)
    if len(names) < (1 if declared else 2):
        return {}
    values = table.column(column)
    stopped = traffic_stopped_unix_s(table) if cut_short else None
    return {name: _series(table.filter(pc.equal(values, name).fill_null(False)), window_s,
                          1.0, stopped)
            for name in names}


def run_parts(table: pa.Table, window_s: float, is_mix: bool = False, is_lora: bool = False,
              cut_short: bool = False) -> dict[str, RunSeries]:
    """Every part a rule can judge, keyed as `SloRule.part`: a mix's parts by profile, a LoRA
    mix's names as `adapter:NAME`."""
    adapters = series_by_adapter(table, window_s, is_lora, cut_short)
    return {**series_by_profile(table, window_s, is_mix, cut_short),
            **{f"{ADAPTER_PART}{name}": series for name, series in adapters.items()}}


def measured_adapters(table: pa.Table) -> np.ndarray:
    """Each measured row's traffic.lora name ("" without one), in the order of the series'
    `measured_*` arrays (for goodput's per-adapter rules)."""
    if not _in_row_order(table):
        table = table.sort_by(ROW_ORDER)
    measured = np.asarray(pc.equal(table.column("phase"), "measure").fill_null(False)
                          .to_numpy(zero_copy_only=False), dtype=bool)
    adapters: np.ndarray = _adapters(table)[measured]
    return adapters


def _adapters(table: pa.Table) -> np.ndarray:
    """Each row's traffic.lora name ("" without one), in the table's order."""
    if "adapter" not in table.column_names:
        return np.full(table.num_rows, "", dtype=object)
    return np.asarray(table.column("adapter").fill_null("").to_numpy(zero_copy_only=False),
                      dtype=object)
