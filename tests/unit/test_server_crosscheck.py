"""vLLM's own TTFT / ITL histograms against the client's rows (vllm_slo/analysis/
server_crosscheck.py): agreement, each flag, and when no comparison is made. The scrape values
are in the form server_metrics.jsonl keeps (`_sum` / `_count` per label set); the family
names are checked against a real vLLM CPU /metrics (tests/unit/data/vllm_metrics.txt)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from vllm_slo.analysis.server_crosscheck import (
    ITL_HISTOGRAM,
    TTFT_HISTOGRAM,
    latency_crosscheck,
)
from vllm_slo.servers.metrics_scrape import parse_vllm_metrics

DATA = Path(__file__).parent / "data"

LABELS = '{engine="0",model_name="tiny"}'


def scrape(unix_s: float, ttft_sum: float, ttft_count: float, itl_sum: float,
           itl_count: float) -> dict:
    return {"unix_s": unix_s, "values": {
        f"{TTFT_HISTOGRAM}_sum{LABELS}": ttft_sum, f"{TTFT_HISTOGRAM}_count{LABELS}": ttft_count,
        f"{ITL_HISTOGRAM}_sum{LABELS}": itl_sum, f"{ITL_HISTOGRAM}_count{LABELS}": itl_count}}


def rows(n: int, ttft_s: float, itl_s: float, tokens: int, send_lag_s: float = 0.0
         ) -> pa.Table:
    """n requests, each with its first content chunk at ttft_s and one chunk per token."""
    offsets = [[ttft_s + k * itl_s for k in range(tokens)] for _ in range(n)]
    return pa.table({
        "ttft_s": pa.array([ttft_s + send_lag_s] * n, pa.float64()),
        "send_lag_s": pa.array([send_lag_s] * n, pa.float64()),
        "output_tokens": pa.array([tokens] * n, pa.int64()),
        "chunk_offsets_s": pa.array(offsets, pa.list_(pa.float32()))})


def server_scrapes(n: int, ttft_s: float, itl_s: float, tokens: int) -> list[dict]:
    before = scrape(100.0, 5.0, 10, 2.0, 100)  # an earlier run on the same server
    return [before, scrape(130.0, 5.0 + n * ttft_s, 10 + n, 2.0 + n * (tokens - 1) * itl_s,
                           100 + n * (tokens - 1))]


def test_agreeing_views_give_no_flag() -> None:
    # the client's TTFT 8 ms above the server's (transport): within max(20 ms, 20%)
    check = latency_crosscheck(server_scrapes(50, 0.100, 0.020, 64), rows(50, 0.108, 0.020, 64))
    assert check is not None and check.compared
    assert check.server_requests == check.client_requests == 50
    assert check.server_ttft_mean_s == pytest.approx(0.100)
    assert check.ttft_excess_s == pytest.approx(0.008, abs=1e-6)
    assert check.itl_ratio == pytest.approx(1.0, abs=1e-5)
    assert check.flags == ()


def test_send_lag_is_not_counted_against_the_server() -> None:
    # open loop: TTFT counts from the intended send; 300 ms of it was the client's own lag
    check = latency_crosscheck(server_scrapes(20, 0.100, 0.020, 16),
                               rows(20, 0.100, 0.020, 16, send_lag_s=0.300))
    assert check is not None
    assert check.client_ttft_mean_s == pytest.approx(0.100) and check.flags == ()


def test_a_client_ttft_far_above_the_servers_is_flagged() -> None:
    check = latency_crosscheck(server_scrapes(50, 0.100, 0.020, 64), rows(50, 0.160, 0.020, 64))
    assert check is not None and len(check.flags) == 1
    assert "exceeds vLLM's own 100.0 ms by 60.0 ms" in check.flags[0]


def test_a_client_ttft_below_the_servers_is_flagged() -> None:
    check = latency_crosscheck(server_scrapes(50, 0.100, 0.020, 64), rows(50, 0.080, 0.020, 64))
    assert check is not None and len(check.flags) == 1
    assert "below vLLM's own" in check.flags[0] and "impossible" in check.flags[0]


def test_per_token_itl_counts_tokens_not_chunks() -> None:
    # 2 tokens per chunk: gaps between chunks are twice the server's per-token ITL, yet the
    # per-token means agree (the span over tokens - 1)
    table = rows(30, 0.100, 0.040, 32)
    table = table.set_column(2, "output_tokens", pa.array([63] * 30, pa.int64()))
    check = latency_crosscheck(server_scrapes(30, 0.100, 0.020, 63), table)
    assert check is not None and check.itl_ratio == pytest.approx(1.0, abs=0.01)
    assert check.flags == ()


def test_an_itl_disagreement_is_flagged() -> None:
    check = latency_crosscheck(server_scrapes(30, 0.100, 0.020, 64), rows(30, 0.100, 0.025, 64))
    assert check is not None and len(check.flags) == 1
    assert "ITL per token" in check.flags[0] and "x1.250" in check.flags[0]


def test_other_traffic_on_the_server_means_no_comparison() -> None:
    # the server saw 80 requests, the client sent 50: not the same requests, no verdict
    check = latency_crosscheck(server_scrapes(80, 0.300, 0.020, 64), rows(50, 0.100, 0.020, 64))
    assert check is not None and not check.compared and check.flags == ()


@pytest.mark.parametrize("records", [
    [],  # never scraped
    [scrape(1.0, 0, 0, 0, 0)],  # scraped once
    [{"unix_s": 1.0, "values": {"vllm:num_requests_running": 1.0}},
     {"unix_s": 2.0, "values": {"vllm:num_requests_running": 0.0}}],  # no TTFT histogram
    [scrape(1.0, 50.0, 100, 1.0, 10), scrape(2.0, 1.0, 3, 0.1, 2)],  # restarted: went back
])
def test_no_crosscheck_without_two_comparable_scrapes(records: list[dict]) -> None:
    assert latency_crosscheck(records, rows(5, 0.1, 0.02, 8)) is None


def test_real_vllm_family_names() -> None:
    """The names this module reads are the ones vLLM CPU exports (a recorded /metrics)."""
    values = parse_vllm_metrics((DATA / "vllm_metrics.txt").read_text())
    names = {key.split("{", 1)[0] for key in values}
    for family in (TTFT_HISTOGRAM, ITL_HISTOGRAM):
        assert f"{family}_sum" in names and f"{family}_count" in names
