"""Open loop against the known-timing stand-in: the intended request rate is kept however slow
the server is, and the latency of requests that had to wait for an in-flight slot counts from
their intended send time (coordinated-omission-safe)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import run_cli, standin_server

# `timing`: send lags p99 < 50 ms and each queued request's TTFT within 15 ms of its wait plus
# the server's TTFT; three test files at a time on 2 cores missed the 15 ms by 3.6 ms in a CI
# run: tox -e ci runs this file in its serial step
pytestmark = [pytest.mark.integration, pytest.mark.timing]

SLOW_TTFT_S = 0.5
SLOW_ITL_S = 0.05
TOKENS = 8  # e2e ≈ 0.5 + 7 × 0.05 = 0.85 s per request


@pytest.fixture(scope="module")
def slow_standin():
    with standin_server("--ttft", str(SLOW_TTFT_S), "--itl", str(SLOW_ITL_S)) as url:
        yield url


def open_loop_run(url: str, tmp_path: Path, *extra: str):
    return run_cli(["run", "scenario=chat", f"server.url={url}", "traffic.warmup=2s",
                    f"traffic.chat.output_tokens={TOKENS}", "traffic.chat.turns=1",
                    "traffic.chat.system_prompt_tokens=20", "traffic.prefix_cache=keep",
                    "slo.e2e=[\"p50 < 10s\"]", *extra], tmp_path)


def test_intended_rate_is_kept_against_a_slow_server(slow_standin: str, tmp_path: Path) -> None:
    rate = 20.0  # ~17 requests in flight at 0.85 s each: the server never speeds the client up
    result = open_loop_run(slow_standin, tmp_path, "traffic.duration=30s",
                           "traffic.arrival={kind: constant, rate: 20, max_in_flight: 256}")
    assert result.returncode in (0, 1, 3), result.output
    table = pq.read_table(result.run_dir / "samples.parquet").to_pydict()
    measured = [i for i, p in enumerate(table["phase"]) if p == "measure"]
    sent = np.sort(np.asarray([table["send_unix_s"][i] for i in measured]))
    achieved = len(sent) / 30.0
    assert abs(achieved - rate) / rate < 0.02, achieved
    # the gaps between actual sends follow the schedule, not the 0.85 s responses
    assert abs(np.median(np.diff(sent)) - 1 / rate) < 0.005
    lags = np.asarray([table["send_lag_s"][i] for i in measured])
    assert np.percentile(lags, 99) < 0.05
    assert not any(table["queued_for_slot"][i] for i in measured)
    assert all(table["ok"][i] for i in measured)
    summary = result.json("summary.json")
    assert summary["traffic"]["intended_rate_per_s"] == rate
    assert summary["traffic"]["sent_per_s"] == pytest.approx(achieved, rel=1e-6)
    assert summary["traffic"]["queued_for_slot"] == 0


def test_late_requests_include_their_queueing(slow_standin: str, tmp_path: Path) -> None:
    # 10 req/s with at most 4 in flight at 0.85 s each: the client can only send ~4.7 req/s,
    # so arrivals wait for a slot; their TTFT must count that wait
    result = open_loop_run(slow_standin, tmp_path, "traffic.duration=10s",
                           "traffic.arrival={kind: poisson, rate: 10, max_in_flight: 4}")
    table = pq.read_table(result.run_dir / "samples.parquet").to_pydict()
    queued = [i for i, q in enumerate(table["queued_for_slot"]) if q]
    assert len(queued) > 20
    for i in queued:
        lag, ttft = table["send_lag_s"][i], table["ttft_s"][i]
        assert lag > 0.001
        # TTFT from the intended time = time waiting for a slot + the server's own TTFT (the
        # last requests, still streaming when Locust stopped, read 32-67 ms more while its
        # stop blocked the loop: vllm_slo/loadtests/locust_quirks.py; a 2-core host busy with
        # other work added 56 ms of event-loop delay to one): within 0.1 s of seconds of wait
        assert ttft == pytest.approx(lag + SLOW_TTFT_S, abs=0.1)
    lags = sorted(table["send_lag_s"][i] for i in queued)
    assert lags[-1] > 2.0  # the backlog grows: late requests are seconds late
    summary = result.json("summary.json")
    assert summary["traffic"]["queued_for_slot"] > 20
    measured_ttft = [t for t, p in zip(table["ttft_s"], table["phase"], strict=True)
                     if p == "measure"]
    assert np.median(measured_ttft) > 1.0  # queueing dominates: the backlog is in the numbers
    # a growing backlog is a trend, not a stationary series: the observed tail is shown, but
    # its interval cannot be bounded on the tail's side
    p99 = summary["metrics"]["ttft"]["percentiles"]["p99"]
    assert p99["value"] == pytest.approx(np.quantile(measured_ttft, 0.99))
    assert p99["ci_high"] is None and "insufficient samples" in p99["warnings"][0]
