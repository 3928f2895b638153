"""A single run's percentile verdict decides a clear case: against the stand-in with known
timings (TTFT 50 ms, ITL 10 ms), chat at 64 users for 20 s gives ~1,500 requests whose TTFTs
cluster in time, too few effective samples beyond p99 for an order-statistic bound; the
sectioning interval (docs/statistics.md "Per-run percentiles") still bounds p99 near 50 ms, so
`ttft p99 < 5s` (met ~90x over) is PASS and the run exits 0, not INCONCLUSIVE (exit 3)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import HEALTH_BOUNDS_OFF, run_cli, standin_server

pytestmark = pytest.mark.integration

TTFT_S = 0.050
ITL_S = 0.010


@pytest.fixture
def timed_standin() -> Iterator[str]:
    with standin_server("--ttft", str(TTFT_S), "--itl", str(ITL_S)) as url:
        yield url


# 64 users' TTFT tail is the box's: four tests at a time on two cores widened the p99
# interval to 7.96 s (fresh-clone CI at cf8213b); alone it bounds p99 near 50 ms
@pytest.mark.timing
def test_a_p99_met_ninety_times_over_passes(timed_standin: str, tmp_path: Path) -> None:
    result = run_cli(["run", "scenario=chat", f"server.url={timed_standin}",
                      "traffic.duration=20s", "traffic.arrival.users=64",
                      "traffic.arrival.spawn_rate=1000", *HEALTH_BOUNDS_OFF,
                      # the ttft bound alone (and the error rate): chat's own itl and e2e SLOs,
                      # 3x the warm-up's, are the loaded box's to keep, not this test's
                      "slo.ttft=[\"p99 < 5s\"]", "slo.itl=[]", "slo.e2e=[]"], tmp_path)
    summary = result.json("summary.json")
    assert [s["metric"] for s in summary["slos"]] == ["ttft", "error_rate"], summary["slos"]
    (slo,) = [s for s in summary["slos"] if s["metric"] == "ttft"]
    observed = slo["observed"]
    assert summary["requests"]["ok"] >= 900, summary["requests"]  # p99 sectioning's minimum
    assert TTFT_S <= observed["value"] < 5.0
    assert observed["ci_low"] is not None and observed["ci_high"] is not None, observed
    assert observed["ci_low"] <= observed["value"] <= observed["ci_high"] < 5.0
    assert slo["verdict"] == "PASS", slo
    assert all(s["verdict"] == "PASS" for s in summary["slos"]), summary["slos"]
    assert result.returncode == 0, result.output
    if observed["method"] == "sectioning-log":  # the bound came from the fallback: it says so
        assert "sectioning-log" in result.output and "sectioning-log" in slo["basis"]
