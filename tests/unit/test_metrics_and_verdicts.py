"""From rows to metrics and verdicts, on hand-built samples with known answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from vllm_slo.analysis.run_metrics import run_series, summarize
from vllm_slo.analysis.verdicts import (
    choose_exit_code,
    evaluate_slos,
    goodput,
    invalid_measurement_reasons,
    percentile_threshold_test,
)
from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.scenarios.slo import parse_fraction_rule, parse_latency_rule, parse_rate_rule
from vllm_slo.stats.statistics import (
    MIN_EFFECTIVE_TAIL_SAMPLES,
    SECTIONING_METHOD,
    Verdict,
    percentile_estimate,
)

T0 = 1_800_000_000.0
DATA = Path(__file__).parent / "data"


def row(i: int, *, phase: str = "measure", ok: bool = True, ttft: float = 0.1,
        gaps: tuple[float, ...] = (0.02, 0.02, 0.02), tokens: int = 4,
        send: float | None = None) -> dict:
    offsets = list(np.cumsum([ttft, *gaps])) if ok else []
    return {
        "request_id": f"r{i}", "process_id": 1, "user_id": 0, "conversation_id": i, "turn": 0,
        "phase": phase, "endpoint": "chat",
        "intended_send_unix_s": T0 + (i if send is None else send), "send_unix_s": T0 + i,
        "send_lag_s": 0.0, "ttft_s": ttft if ok else None,
        "e2e_s": (offsets[-1] if ok else 0.5), "chunk_offsets_s": offsets,
        "output_tokens": tokens if ok else None, "prompt_tokens": 10, "max_tokens": tokens,
        "status_code": 200 if ok else 503, "ok": ok,
        "error": None if ok else "HTTP 503: busy", "finish_reason": "length" if ok else None}


def table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)


def test_definitions_on_known_rows() -> None:
    rows = [row(0, phase="warmup", ttft=9.0),
            row(1, ttft=0.1, gaps=(0.02, 0.04, 0.06)),
            row(2, ttft=0.3, gaps=(0.01,), tokens=2),
            row(3, ok=False)]
    series = run_series(table(rows), window_s=10.0)
    assert series.requests == 3 and series.failed == 1  # warm-up excluded
    assert list(series.ttft_s) == [0.1, 0.3]
    assert list(series.itl_s) == pytest.approx([0.02, 0.04, 0.06, 0.01])  # pooled gaps
    # TPOT = (E2E - TTFT) / (tokens - 1)
    assert list(series.tpot_s) == pytest.approx([0.12 / 3, 0.01 / 1])
    assert list(series.e2e_s) == pytest.approx([0.22, 0.31])
    assert series.errors_by_kind == {"HTTP 503": 1}
    # throughput: tokens of successful requests by the second their chunks arrived within the
    # window; the warm-up request's chunks arrive at 9.00-9.06 s, inside [1 s, 11 s): counted.
    # Request throughput counts completions.
    assert list(series.output_tokens_per_bin) == [4, 2, 0, 0, 0, 0, 0, 0, 4, 0]
    assert list(series.completions_per_bin) == [1, 1, 0, 0, 0, 0, 0, 0, 1, 0]


def test_output_tokens_count_when_their_chunks_arrive() -> None:
    """A request straddling bins counts partly in each; a chunk carrying several tokens
    counts its share; no bin can exceed what the streams emitted."""
    rows = [row(0, ttft=0.5, gaps=(1.0, 1.0, 1.0), tokens=8),  # chunks at 0.5 1.5 2.5 3.5 s
            row(1, ttft=0.2, gaps=(0.1,), tokens=2, send=0.0)]  # chunks at 0.2 0.3 s
    series = run_series(table(rows), window_s=3.0)
    # request 0: 8 tokens over 4 chunks = 2 per chunk, the last one (3.5 s) after the window
    assert list(series.output_tokens_per_bin) == [2 + 2, 2, 2]
    assert list(series.completions_per_bin) == [1, 0, 0]  # request 0 ends after the window


def test_itl_gaps_are_in_the_order_they_ended() -> None:
    """Two concurrent streams: gaps pooled by wall-clock end time, not request by request."""
    rows = [row(0, ttft=0.1, gaps=(0.2, 0.2, 0.2)),  # gaps end at 0.3 0.5 0.7 s
            row(1, ttft=0.1, gaps=(0.05, 0.3, 0.05), send=0.1)]  # end at 0.25 0.55 0.6 s
    series = run_series(table(rows), window_s=2.0)
    assert list(series.itl_s) == pytest.approx([0.05, 0.2, 0.2, 0.3, 0.05, 0.2])


def test_empty_and_all_failed_give_warnings_not_zeros() -> None:
    empty = summarize(run_series(table([]), window_s=5.0))
    assert empty.metrics["ttft"].percentiles[50.0].value is None
    assert "no requests in the measured window" in empty.warnings
    assert empty.error_rate.value is None
    failed = summarize(run_series(table([row(i, ok=False) for i in range(5)]), window_s=5.0))
    assert failed.metrics["e2e"].mean.value is None
    assert "every measured request failed" in failed.warnings
    assert failed.error_rate.value == 1.0
    assert invalid_measurement_reasons(failed, None, None) == (
        "no successful request in the measured window",)


def test_threshold_test_against_known_binomial_bounds() -> None:
    rng = np.random.default_rng(1)
    independent = rng.exponential(0.1, 2000)  # iid: effective size ~ n
    clear_pass = percentile_threshold_test(independent, 95.0, "<", 1.0)
    assert clear_pass.verdict is Verdict.PASS
    clear_fail = percentile_threshold_test(independent, 50.0, "<", 0.01)
    assert clear_fail.verdict is Verdict.FAIL
    # the true median of Exp(0.1) is 0.0693: a threshold right there cannot be decided
    borderline = percentile_threshold_test(independent, 50.0, "<", 0.1 * np.log(2))
    assert borderline.verdict is Verdict.INCONCLUSIVE
    assert 0.45 < borderline.fraction_below < 0.55
    assert percentile_threshold_test(np.array([]), 50.0, "<", 1.0).verdict is (
        Verdict.INCONCLUSIVE)
    # ">" mirrors: the median is above 0.01 for sure
    assert percentile_threshold_test(independent, 50.0, ">", 0.01).verdict is Verdict.PASS


@pytest.mark.parametrize("percentile", [50.0, 90.0, 99.0, 99.9])
@pytest.mark.parametrize("comparator", ["<", "<=", ">", ">="])
def test_threshold_test_reusing_the_summary_estimate_is_identical(percentile: float,
                                                                  comparator: str) -> None:
    """The summary's effective size at the percentile, reused, gives the very same test as
    computing it again (the verdict stage no longer analyses a long series twice)."""
    rng = np.random.default_rng(7)
    clustered = np.repeat(rng.lognormal(-3.0, 0.5, 900), rng.integers(1, 6, 900))
    threshold = float(np.quantile(clustered, 0.93))
    observed = percentile_estimate(clustered, percentile)
    assert percentile_threshold_test(clustered, percentile, comparator, threshold,
                                     observed=observed) == percentile_threshold_test(
        clustered, percentile, comparator, threshold)
    # an infinite value: the summary (NaNs dropped) saw one value more than the test (every
    # non-finite value dropped), so its effective size is not the test's and is not reused
    with_inf = np.concatenate([clustered, [np.inf]])
    stale = percentile_estimate(with_inf, percentile)
    assert percentile_threshold_test(with_inf, percentile, comparator, threshold,
                                     observed=stale) == percentile_threshold_test(
        with_inf, percentile, comparator, threshold)


def test_clustered_requests_are_less_decisive_than_independent_ones() -> None:
    rng = np.random.default_rng(2)
    values = rng.exponential(0.1, 200)
    clustered = np.repeat(values[:20], 10)  # 20 batches of 10 identical latencies
    threshold = float(np.quantile(values, 0.97))
    independent_test = percentile_threshold_test(values, 90.0, "<", threshold)
    clustered_test = percentile_threshold_test(clustered, 90.0, "<", threshold)
    assert clustered_test.n_effective < independent_test.n_effective / 3


def test_verdicts_and_exit_codes() -> None:
    rows = [row(i, ttft=0.05 + 0.001 * (i % 7)) for i in range(400)]
    series = run_series(table(rows), window_s=400.0)
    summary = summarize(series)
    rules = [parse_latency_rule("ttft", "p50 < 1s"), parse_latency_rule("ttft", "p50 < 10ms"),
             parse_latency_rule("itl", "p99 < 1s"), parse_fraction_rule("error_rate", "< 5%"),
             parse_rate_rule("request_throughput", "> 100 req/s")]
    results = evaluate_slos(rules, series, summary)
    assert [r.verdict for r in results] == [Verdict.PASS, Verdict.FAIL, Verdict.PASS,
                                            Verdict.PASS, Verdict.FAIL]
    assert all(r.basis for r in results)
    assert choose_exit_code(results, ()) is ExitCode.SLO_FAILED
    assert choose_exit_code(results[:1], ()) is ExitCode.PASS
    assert choose_exit_code(results[:1], ("server died",)) is ExitCode.INVALID_MEASUREMENT
    inconclusive = evaluate_slos([parse_latency_rule("ttft", "p99 < 1s")],
                                 run_series(table(rows[:20]), 20.0),
                                 summarize(run_series(table(rows[:20]), 20.0)))
    assert inconclusive[0].verdict is Verdict.INCONCLUSIVE
    assert choose_exit_code(inconclusive, ()) is ExitCode.INCONCLUSIVE


def test_a_clear_single_run_p99_passes_despite_clustered_requests() -> None:
    # the recorded stand-in run (TTFT 50 ms configured; chat, 64 users, 20 s, 1,472 requests)
    # whose `ttft p99 < 5s` was INCONCLUSIVE: ~56 effective samples, under one beyond p99
    recorded = json.loads((DATA / "standin_chat64_ttft.json").read_text())["ttft_s"]
    rows = [row(i, ttft=ttft, send=i * 0.0136) for i, ttft in enumerate(recorded)]
    series = run_series(table(rows), window_s=20.0)
    summary = summarize(series)
    p99 = summary.metrics["ttft"].percentiles[99.0]
    assert series.ttft_s.size == 1472 and p99.method == SECTIONING_METHOD
    assert p99.value is not None and p99.ci_low is not None and p99.ci_high is not None
    assert p99.n_effective * 0.01 < MIN_EFFECTIVE_TAIL_SAMPLES  # why order statistics can't
    clear, inside, below = evaluate_slos(
        [parse_latency_rule("ttft", "p99 < 5s"),
         parse_latency_rule("ttft", f"p99 < {p99.value * 1e3:.3f}ms"),  # inside the interval
         parse_latency_rule("ttft", f"p99 < {p99.ci_low * 0.5 * 1e3:.3f}ms")], series, summary)
    assert clear.verdict is Verdict.PASS and SECTIONING_METHOD in clear.basis
    assert clear.observed.method == SECTIONING_METHOD
    assert inside.verdict is Verdict.INCONCLUSIVE
    assert below.verdict is Verdict.FAIL  # every request above it: the share test decides
    assert choose_exit_code([clear], ()) is ExitCode.PASS


def test_goodput_counts_requests_meeting_every_per_request_threshold() -> None:
    # 100 requests over 100 s: 60 fast (ttft 0.1 s), 30 slow (ttft 2 s), 10 failed
    rows = [row(i, ttft=0.1 if i % 10 < 6 else 2.0, ok=i % 10 != 9) for i in range(100)]
    series = run_series(table(rows), window_s=100.0)
    rules = [parse_latency_rule("ttft", "p90 < 1s"), parse_latency_rule("itl", "p99 < 1ms")]
    estimate, described = goodput(rules, series)
    assert estimate.value == pytest.approx(60 / 100.0)  # ITL (per gap) is not a per-request cut
    assert estimate.ci_low < 0.6 < estimate.ci_high
    assert described == "successful requests meeting ttft < 1s"
    everything, described = goodput([], series)
    # 90 succeeded, but request 98 (sent at 98 s, ttft 2 s) ends at 100.06 s, after the
    # 100 s window: request throughput does not count it, so neither does goodput
    assert everything.value == pytest.approx(89 / 100.0)
    assert everything.value == summarize(series).requests_per_s.value
    assert "no per-request latency SLO" in described


def test_row_order_does_not_depend_on_how_streams_were_concatenated() -> None:
    """Two Locust processes' rows with equal intended send times: any concatenation order
    gives the same series and the same effective sample sizes."""
    rows = [row(i, send=float(i // 2), ttft=0.1 + 0.01 * (i % 7)) for i in range(60)]
    rows = [{**r, "request_id": f"p{i % 2}-{i:03d}"} for i, r in enumerate(rows)]
    forward = run_series(table(rows), window_s=40.0)
    backward = run_series(table(rows[1::2] + rows[0::2]), window_s=40.0)
    assert list(forward.ttft_s) == list(backward.ttft_s)
    assert summarize(forward).metrics["ttft"].percentiles == \
        summarize(backward).metrics["ttft"].percentiles
