"""invalid_reasons: every reason a run is invalid, one function, in summary.json's order."""

from __future__ import annotations

import pytest

from tests.support.synthetic import T0_UNIX_S, synthetic_table
from vllm_slo.analysis.client_health import ClientHealth
from vllm_slo.analysis.outages import Outage, Stall
from vllm_slo.analysis.prefix_cache import PrefixCacheCheck
from vllm_slo.analysis.run_metrics import RunSummary, run_series, summarize
from vllm_slo.analysis.verdicts import (
    INTERRUPTED_REASON,
    UNFINISHED_REASON,
    invalid_reasons,
)
from vllm_slo.run_folder.run_status import RunStatus

DAMAGE = "run_status.json is damaged (ValueError: x): how the run ended is unknown"
OUTAGE = Outage(T0_UNIX_S + 12.0, T0_UNIX_S + 15.5, 7, "connection refused", False)
STALL = Stall(T0_UNIX_S + 30.0, T0_UNIX_S + 41.0, 12, 2)
MISSED = PrefixCacheCheck(target_hit_rate=0.8, tolerance=0.05, phases="measure",
                          expected_hit_rate=0.8, achieved_hit_rate=0.2, hits_tokens=20.0,
                          queries_tokens=100.0, span_s=60.0, verdict="missed",
                          reason="prefix-cache hit rate 20% misses the target 80% +- 5%")


@pytest.fixture(scope="module")
def summary() -> RunSummary:
    table = synthetic_table(200, chunks=4, warmup_s=0.0, duration_s=30.0, seed=2)
    return summarize(run_series(table, 30.0))


def health(*reasons: str) -> ClientHealth:
    return ClientHealth(reasons=reasons, max_loop_lag_p99_s=0.05, min_held_concurrency=0.9,
                        concurrency=None, loop_lag=None, chunks_per_token=None, workers=())


def test_a_clean_run_has_no_reason(summary: RunSummary) -> None:
    assert invalid_reasons(summary, RunStatus(), max_client_send_lag_p99_s=None,
                           health=health(), outages=(), stalls=(), run_start_unix_s=T0_UNIX_S,
                           status_damage=None, unfinished=False, prefix_cache=None) == ()


def test_every_reason_in_order(summary: RunSummary) -> None:
    status = RunStatus(server_failure="EngineCore died\nlog tail", load_generator_failure="rc 1",
                       aborted="ttft p99 over 2s", interrupted=True)
    reasons = invalid_reasons(
        summary, status, max_client_send_lag_p99_s=1e-9, health=health("client-limited: x"),
        outages=(OUTAGE,), stalls=(STALL,), run_start_unix_s=T0_UNIX_S,
        status_damage=DAMAGE, unfinished=True, prefix_cache=MISSED)
    assert reasons[0].startswith("client-limited: p99 send lag ")
    assert reasons[1:] == (
        "server failed during the run: EngineCore died",
        "load generator failed: rc 1",
        "client-limited: x",
        OUTAGE.reason(T0_UNIX_S),
        STALL.reason(T0_UNIX_S),
        "aborted by abort_on: ttft p99 over 2s",
        INTERRUPTED_REASON,
        DAMAGE,  # a damaged status says why; "unfinished" would repeat it
        MISSED.reason)
    assert "+12.0 s into the run" in reasons[4] and "from 30.0 s to 41.0 s" in reasons[5]


def test_unfinished_only_without_a_damaged_status(summary: RunSummary) -> None:
    def reasons(status_damage: str | None, unfinished: bool) -> tuple[str, ...]:
        return invalid_reasons(summary, RunStatus(), max_client_send_lag_p99_s=None,
                               health=health(), outages=(), stalls=(),
                               run_start_unix_s=T0_UNIX_S, status_damage=status_damage,
                               unfinished=unfinished, prefix_cache=None)

    assert reasons(None, True) == (UNFINISHED_REASON,)
    assert reasons(DAMAGE, True) == reasons(DAMAGE, False) == (DAMAGE,)


def test_a_met_prefix_cache_target_is_no_reason(summary: RunSummary) -> None:
    met = PrefixCacheCheck(target_hit_rate=0.8, tolerance=0.05, phases="measure",
                           expected_hit_rate=0.8, achieved_hit_rate=0.79, hits_tokens=79.0,
                           queries_tokens=100.0, span_s=60.0, verdict="met", reason="")
    assert invalid_reasons(summary, RunStatus(), max_client_send_lag_p99_s=None,
                           health=health(), outages=(), stalls=(), run_start_unix_s=T0_UNIX_S,
                           status_damage=None, unfinished=False, prefix_cache=met) == ()
