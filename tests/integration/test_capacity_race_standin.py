"""`vllm-slo tune` with `tune.objective: capacity` end to end: the known-timing stand-in behind
vLLM's command line, whose `--max-num-seqs` sets its FIFO's slots (tests/support/fake_vllm.py),
raced at 8 and then 2 slots. Its queue runs twice as fast as the one whose crossings
tests/support/queue_simulation.py `true_crossing` gives (16-token answers, 0.2 s a request:
`ttft p90 < 300ms` crosses near 34 and 6.2 req/s): 8-token answers of 0.1 s (a 30 ms first
token, 7 gaps of 10 ms) against `ttft p90 < 150ms`, so near 68 and 12 req/s, from 8 req/s (60
requests in a 7.5 s window: a p90 can PASS at the step confidence). The 8-slot candidate is
searched first; the 2-slot one probes its lower bound right after its lowest load, is over
capacity there and is raced out (two steps, three if its lowest load stays near)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest import FAKE_VLLM, HEALTH_BOUNDS_OFF, cli_env, run_cli

pytestmark = pytest.mark.integration
LAUNCH = [a for a in FAKE_VLLM if not a.startswith("traffic.chat.output_tokens=")]


def test_a_race_names_the_best_and_races_out_the_other(tmp_path: Path) -> None:
    result = run_cli([
        "tune", "scenario=capacity-cpu", *LAUNCH, *HEALTH_BOUNDS_OFF,
        "traffic.chat.output_tokens=8", "traffic.warmup=1s", "traffic.duration=7.5s",
        "slo.e2e=[]", "slo.ttft=[\"p90 < 150ms\"]", "traffic.max_send_lag_p99=1s",
        "tune={objective: capacity, grid: {max-num-seqs: [8, 2]}}",
        "capacity={low: 8, high: 96, tolerance: 100%, lengthen: 1, budget: 6m}"],
        tmp_path / "runs", timeout_s=900,
        env={**cli_env(), "FAKE_VLLM_TTFT": "0.03", "FAKE_VLLM_ITL": "0.01"})
    assert result.run_dir is not None, result.output
    assert "capacity race: c01 carries the most" in result.output, result.output
    race = json.loads((result.run_dir / "race.json").read_text())
    assert race["best"] == "c01", race
    assert [entry["name"] for entry in race["entries"]] == ["c01", "c02"], race
    c01 = json.loads((result.run_dir / "variants" / "c01" / "capacity.json").read_text())
    c02 = json.loads((result.run_dir / "variants" / "c02" / "capacity.json").read_text())
    floor = c01["capacity"]["interval"][0]
    assert floor > 8, c01["steps"]  # a load above the lowest was under capacity
    loads = [s["load"] for s in c02["steps"]]  # the lowest (once more if near), then the floor
    assert loads[0] == 8 and loads[-1] == pytest.approx(floor) and len(loads) <= 3, loads
    assert c02["status"] == "raced-out", c02["reason"]
    assert race["entries"][1]["versus_best"]["change"] == "lower", race["entries"][1]
    assert result.returncode == (0 if c01["status"] == "bracketed" else 3), result.output
    again = run_cli(["report", str(result.run_dir)], tmp_path / "runs")
    assert again.returncode == result.returncode, again.output
    assert "capacity race: c01 carries the most" in again.output
