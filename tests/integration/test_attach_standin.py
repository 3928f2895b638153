"""Attach mode against the known-timing stand-in: what the suite reports equals what the
stand-in was configured to do (within a stated tolerance), and injected faults become rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import HEALTH_BOUNDS_OFF, run_cli, standin_server

pytestmark = pytest.mark.integration

TTFT_S = 0.080
ITL_S = 0.020
MAX_TOKENS = 10
# client + scheduling slack on a busy 2-core box; never earlier than configured
TOLERANCE_S = 0.015


@pytest.fixture
def timed_standin() -> Iterator[str]:
    with standin_server("--ttft", str(TTFT_S), "--itl", str(ITL_S)) as url:
        yield url


@pytest.fixture
def faulty_standin() -> Iterator[str]:
    with standin_server("--ttft", "0.01", "--itl", "0.005", "--fault", "sse_error",
                       "--fault-rate", "0.3", "--seed", "3") as url:
        yield url


ATTACH = ["traffic.duration=6s", "traffic.warmup=1s", "traffic.arrival.users=4",
          "traffic.arrival.spawn_rate=100", f"traffic.chat.output_tokens={MAX_TOKENS}",
          *HEALTH_BOUNDS_OFF]  # the timings are asserted against the configured ones


@pytest.mark.timing
def test_measured_timings_equal_the_configured_ones(timed_standin: str, tmp_path: Path) -> None:
    result = run_cli(["run", "scenario=chat", f"server.url={timed_standin}", *ATTACH,
                      "slo.ttft=[\"p50 < 200ms\"]", "slo.e2e=[\"p50 < 50ms\"]",
                      "slo.itl=[\"p50 < 100ms\"]", "slo.error_rate=\"< 20%\""], tmp_path)
    summary = result.json("summary.json")
    ttft = summary["metrics"]["ttft"]["percentiles"]
    assert TTFT_S <= ttft["p50"]["value"] <= TTFT_S + TOLERANCE_S
    itl = summary["metrics"]["itl"]["percentiles"]
    assert ITL_S - 0.005 <= itl["p50"]["value"] <= ITL_S + TOLERANCE_S
    tpot = summary["metrics"]["tpot"]["percentiles"]["p50"]["value"]
    assert ITL_S - 0.002 <= tpot <= ITL_S + TOLERANCE_S
    expected_e2e = TTFT_S + (MAX_TOKENS - 1) * ITL_S
    e2e = summary["metrics"]["e2e"]["percentiles"]["p50"]["value"]
    assert expected_e2e <= e2e <= expected_e2e + TOLERANCE_S
    verdicts = {s["metric"]: s["verdict"] for s in summary["slos"]}
    assert verdicts == {"ttft": "PASS", "itl": "PASS", "e2e": "FAIL", "error_rate": "PASS"}
    assert result.returncode == 1, result.output
    provenance = result.json("provenance.json")
    assert provenance["server_url"] == timed_standin
    assert provenance["model_id"] == "standin"
    assert "launch" not in provenance  # attached, not launched


def test_faults_are_failed_rows_with_their_error(faulty_standin: str, tmp_path: Path) -> None:
    result = run_cli(["run", "scenario=chat", f"server.url={faulty_standin}", *ATTACH], tmp_path)
    table = pq.read_table(result.run_dir / "samples.parquet").to_pydict()
    # (a request the run's end cut short is a `cancelled` row, not one of the faults)
    failed = [e for ok, e, status in zip(table["ok"], table["error"], table["status"],
                                         strict=True) if not ok and status != "cancelled"]
    share = len(failed) / len(table["ok"])
    assert 0.15 < share < 0.45, share
    assert all("error event" in e and "503" in e for e in failed)
    summary = result.json("summary.json")
    assert summary["requests"]["failed"] > 0
    assert sum(summary["requests"]["errors_by_kind"].values()) == summary["requests"]["failed"]
    error_rate = next(s for s in summary["slos"] if s["metric"] == "error_rate")
    assert error_rate["verdict"] == "FAIL"  # < 5% while ~30% fail
    assert result.returncode == 1


def test_attach_to_nothing_fails_readiness_clearly(tmp_path: Path) -> None:
    result = run_cli(["run", "scenario=chat", "server.url=http://127.0.0.1:9",
                      "server.ready_timeout=2s"], tmp_path)
    assert result.returncode == 4
    assert "not ready after 2s" in result.output
