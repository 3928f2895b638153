"""`vllm-slo capacity` over a replayed trace (`capacity.load: traffic.trace.speedup`) against
the stand-in of known capacity: a trace written here sends 8 req/s at exactly even gaps, the
stand-in serves 4 at a time, each 0.05 s + 29 x 0.01 s = 0.34 s, so it carries 11.8 req/s: at
1x (8 req/s) no request waits (ttft p50 50 ms, UNDER); at 2x (16 req/s) its queue grows by
about 4 requests a second (OVER, unstable). The SLO is a median: at 1x the window's 80
requests, autocorrelated on a busy box, can leave fewer effective samples than a p90 needs to
PASS at the step confidence (seen: ~38 of 80, a p90 needing 51). The search brackets the
capacity in [1, 2] x trace in its two steps (tolerance 100%), and each step achieved the
speedup it asked for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest import (
    HEALTH_BOUNDS_OFF,
    checked_capacity_folder,
    run_cli,
    standin_server,
)

pytestmark = pytest.mark.integration

TRACE_RATE_PER_S = 8
BLOCK = 32


def write_trace(path: Path, seconds: float) -> None:
    """Records at exactly 1/TRACE_RATE_PER_S s apart, 40 input tokens (one shared block and
    their own), 30 output tokens."""
    rows = [{"timestamp": round(i * 1000 / TRACE_RATE_PER_S), "input_length": 40,
             "output_length": 30, "hash_ids": [1, 100 + i]}
            for i in range(int(seconds * TRACE_RATE_PER_S))]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_a_speedup_search_brackets_the_standins_capacity(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    write_trace(trace, 30)  # the 2x step's 2 s warm-up and 10 s window need 24 s
    with standin_server("--max-concurrency", "4", "--ttft", "0.05", "--itl", "0.01") as url:
        result = run_cli([
            "capacity", "scenario=trace-replay", f"server.url={url}",
            f"traffic.trace.path={trace}", f"traffic.trace.block_tokens={BLOCK}",
            "traffic.prefix_cache=keep", "traffic.warmup=2s", "traffic.duration=10s",
            "traffic.arrival.max_in_flight=256",  # the 2x backlog (~55) never waits for a slot
            "slo={ttft: [\"p50 < 500ms\"]}", *HEALTH_BOUNDS_OFF,
            "capacity={load: traffic.trace.speedup, low: 1, high: 2, tolerance: 100%, "
            "lengthen: 0, require: \">= 1x\", budget: 3m}"], tmp_path / "runs", timeout_s=240)
    assert result.returncode == 0, result.output
    assert result.run_dir is not None
    data = checked_capacity_folder(result.run_dir)
    assert data["load"] == "traffic.trace.speedup" and data["unit"] == "× trace"
    assert data["status"] == "bracketed", data["reason"]
    assert data["capacity"]["interval"] == [1, 2], data["capacity"]
    assert data["limiting_slo"] == "ttft p50 < 500ms"
    steps = {step["load"]: step for step in data["steps"]}
    assert sorted(steps) == [1, 2], steps.keys()
    assert steps[1]["outcome"] == "under" and steps[2]["outcome"] == "over", data["steps"]
    for load, step in steps.items():  # the client kept to the trace's times
        assert step["achieved"] == pytest.approx(load, rel=0.05), step
        assert step["invalid_reasons"] == [], step
        summary = json.loads((result.run_dir / step["run_dir"] / "summary.json").read_text())
        assert summary["traffic"]["trace"]["speedup"] == load
    assert not steps[2]["stability"]["stable"], steps[2]["stability"]  # the queue grew
    assert "step 1 × trace (achieved 1" in result.output
    assert "× trace" in (result.run_dir / "report.html").read_text()
