"""Goodput and request throughput count the same requests over the same span: goodput is the
part of request throughput that met every per-request SLO, so it can never exceed it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from vllm_slo.analysis.run_metrics import completion_rate, run_series, summarize
from vllm_slo.analysis.verdicts import goodput
from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA
from vllm_slo.scenarios.slo import SloRule, parse_latency_rule
from vllm_slo.stats.statistics import goodput_estimate

T0 = 1_800_000_000.0


def row(i: int, send_s: float, ttft_s: float, gap_s: float, *, tokens: int = 4,
        ok: bool = True, phase: str = "measure") -> dict:
    """A streamed request sent `send_s` after T0, its chunks `gap_s` apart after `ttft_s`."""
    offsets = [ttft_s + k * gap_s for k in range(tokens)] if ok else []
    return {
        "request_id": f"r{i}", "process_id": 1, "user_id": 0, "conversation_id": i, "turn": 0,
        "phase": phase, "endpoint": "chat", "intended_send_unix_s": T0 + send_s,
        "send_unix_s": T0 + send_s, "send_lag_s": 0.0, "ttft_s": ttft_s if ok else None,
        "e2e_s": offsets[-1] if ok else 0.5, "chunk_offsets_s": offsets,
        "output_tokens": tokens if ok else None, "prompt_tokens": 10, "max_tokens": tokens,
        "status_code": 200 if ok else 503, "ok": ok,
        "error": None if ok else "HTTP 503: busy", "finish_reason": "length" if ok else None}


def table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)


def falling_behind(rate_per_s: float = 12.8, window_s: float = 30.0) -> list[dict]:
    """An open loop sending `rate_per_s` with no warm-up into a server whose latency grows
    from 0.11 s to 0.26 s: the requests sent in the last quarter second are still in flight
    when the window ends."""
    n = int(rate_per_s * window_s)
    return [row(i, i / rate_per_s, 0.05 + 0.005 * i / rate_per_s, 0.02) for i in range(n)]


def test_the_old_definition_put_goodput_above_request_throughput() -> None:
    """The cause of `goodput 12.8 req/s` beside `request throughput 12.7 req/s`: goodput
    counted the measured requests *sent* in the window over the planned window, request
    throughput the requests *completed* in the rate span. Requests still in flight at the
    window's end counted in goodput and not in throughput, so the old goodput (every request
    met its SLO) was the send rate, above the completion rate. Now goodput counts the
    completed ones only."""
    window_s = 30.0
    series = run_series(table(falling_behind(12.8, window_s)), window_s=window_s)
    throughput = summarize(series).requests_per_s.value
    old = goodput_estimate(series.measured_ok, series.measured_send_unix_s, series.window_s)
    assert old.value == pytest.approx(12.8)
    assert throughput is not None and throughput == pytest.approx(381 / 30.0)  # 12.7
    assert old.value > throughput  # the inconsistency, reproduced
    new, _ = goodput([parse_latency_rule("e2e", "p99 < 10s")], series)
    assert new.value == throughput  # every completed request met the SLO: the same number


def test_a_warm_up_request_completed_in_the_window_is_held_to_the_slo() -> None:
    """Request throughput counts a request sent during warm-up that completes inside the
    window; goodput counts it when it met the SLOs, never a request it does not count."""
    rows = [row(0, -0.5, 0.8, 0.02, phase="warmup"),  # ends at 0.36 s: counted
            row(1, -0.4, 3.0, 0.02, phase="warmup"),  # ends at 2.66 s: counted, misses ttft
            *(row(i, float(i - 2), 0.1, 0.02) for i in range(2, 12))]  # sends at 0..9 s
    series = run_series(table(rows), window_s=10.0)
    throughput = summarize(series).requests_per_s
    assert throughput.value == pytest.approx(12 / 10.0)
    estimate, _ = goodput([parse_latency_rule("ttft", "p90 < 1s")], series)
    assert estimate.value == pytest.approx(11 / 10.0) and estimate.n == 12


def _random_run(rng: np.random.Generator) -> tuple[pa.Table, float]:
    window_s = float(rng.uniform(3.0, 40.0))  # mostly a partial last bin
    n = int(rng.integers(0, 120))
    rows = []
    for i in range(n):
        phase = rng.choice(["warmup", "measure", "measure", "measure", "cooldown"])
        send_s = (float(rng.uniform(-3.0, 0.0)) if phase == "warmup" else
                  float(rng.uniform(window_s, window_s + 3.0)) if phase == "cooldown" else
                  float(rng.uniform(0.0, window_s)))
        rows.append(row(i, send_s, float(rng.exponential(0.6)), float(rng.exponential(0.05)),
                        tokens=int(rng.integers(1, 8)), ok=bool(rng.random() > 0.15),
                        phase=str(phase)))
    return table(rows), window_s


def _random_rules(rng: np.random.Generator) -> list[SloRule]:
    rules = [parse_latency_rule("ttft", f"p90 < {rng.uniform(0.05, 2.0):.3f}s"),
             parse_latency_rule("e2e", f"p99 <= {rng.uniform(0.2, 4.0):.3f}s"),
             parse_latency_rule("tpot", f"p50 < {rng.uniform(0.01, 0.2):.3f}s")]
    return [rule for rule in rules if rng.random() < 0.7]


def test_goodput_never_exceeds_request_throughput_over_random_runs() -> None:
    """150 seeded random runs (warm-up, measured and cool-down rows; failures; latencies that
    end past the window; windows of fractional length; runs cut short; any subset of per-
    request rules): goodput <= request throughput exactly, never to a tolerance, and both
    count the same requests. The throughput is summarize's (`completion_rate`, checked equal
    on the first seeds: summarize's percentile intervals were most of this test's time)."""
    checked = 0
    for seed in range(150):
        rng = np.random.default_rng(seed)
        samples, window_s = _random_run(rng)
        for cut_short in (False, True):
            series = run_series(samples, window_s=window_s, cut_short=cut_short)
            throughput = completion_rate(series)
            if seed < 5:
                assert summarize(series).requests_per_s == throughput, (seed, cut_short)
            estimate, _ = goodput(_random_rules(rng), series)
            if throughput.value is None or estimate.value is None:
                assert estimate.value is None or estimate.value == 0.0
                continue
            assert estimate.value <= throughput.value, (seed, cut_short)
            everyone, _ = goodput([], series)
            assert everyone.value == throughput.value, (seed, cut_short)
            checked += 1
    assert checked > 200
