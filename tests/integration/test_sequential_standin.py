"""A sequential experiment end to end against launched stand-ins with known timings (behind
vLLM's command line, tests/support/fake_vllm.py; a fresh one per trial): ITL 15 ms against
45 ms with TTFT equal stops `decided` before trials.max — ITL changed (×3), TTFT equivalent
within ±10% — and an A/A of the same kind stops at its max or equivalent, never changed.
What is tested is the runner's rounds, looks and stopping record; the procedure's error rates
are calibrated in benchmarks/ (docs/statistics.md)."""

from __future__ import annotations

import json

import pytest

from tests.integration.conftest import FAKE_VLLM, HEALTH_BOUNDS_OFF, run_cli

pytestmark = pytest.mark.integration

SHORT = ["traffic.duration=2s", "traffic.warmup=1s", "traffic.arrival.users=4",
         "traffic.arrival.spawn_rate=100", "traffic.arrival.think_time=0s",
         "compare.cells=[itl.p50, ttft.p50]", "slo={}", *HEALTH_BOUNDS_OFF]


def variants(itl_a_s: float, itl_b_s: float) -> str:
    return ("variants={"
            f"a: {{server: {{env: {{FAKE_VLLM_ITL: '{itl_a_s}', FAKE_VLLM_TTFT: '0.05'}}}}}}, "
            f"b: {{server: {{env: {{FAKE_VLLM_ITL: '{itl_b_s}', FAKE_VLLM_TTFT: '0.05'}}}}}}}}")


def decisions(summary: dict) -> dict[str, dict]:
    return {cell["cell"]: cell["decision"] for cell in summary["comparisons"][0]["cells"]}


def test_itl_x3_is_decided_changed_and_ttft_equivalent_before_max(tmp_path) -> None:
    runs = tmp_path / "runs"
    result = run_cli(["run", "scenario=chat", *FAKE_VLLM, *SHORT, variants(0.015, 0.045),
                      "trials={min: 3, max: 10}"], runs, timeout_s=300)
    assert result.run_dir is not None, result.output
    summary = json.loads((result.run_dir / "summary.json").read_text())
    stopping = summary["stopping"]
    assert stopping["reason"] == "decided", result.output
    assert 3 <= stopping["rounds"] < 10
    assert stopping["looks"] == stopping["rounds"] - 3 + 1
    trials = sorted(p.name for p in (result.run_dir / "trials").iterdir())
    assert len(trials) == 2 * stopping["rounds"]  # one trial per variant per round, no more
    decided = decisions(summary)
    assert decided["itl.p50"]["decision"] == "changed", decided
    assert decided["itl.p50"]["ratio"]["value"] == pytest.approx(3.0, rel=0.1)
    assert decided["ttft.p50"]["decision"] == "equivalent", decided
    assert "expected server time: 6-20 server start(s)" in result.output
    assert "look 1 after round 3" in result.output
    assert f"stop after round {stopping['rounds']}: decided" in result.output
    assert "stopped: decided after" in result.output


def test_an_a_a_is_never_changed(tmp_path) -> None:
    runs = tmp_path / "runs"
    result = run_cli(["run", "scenario=chat", *FAKE_VLLM, *SHORT, variants(0.015, 0.015),
                      "trials={min: 3, max: 4}"], runs, timeout_s=300)
    assert result.run_dir is not None, result.output
    summary = json.loads((result.run_dir / "summary.json").read_text())
    reason = summary["stopping"]["reason"]
    decided = decisions(summary)
    assert reason in ("max_trials", "decided"), result.output
    assert all(d["decision"] != "changed" for d in decided.values()), decided
    if reason == "decided":
        assert all(d["decision"] == "equivalent" for d in decided.values()), decided
    else:
        assert summary["stopping"]["rounds"] == 4
