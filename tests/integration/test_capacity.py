"""`vllm-slo capacity` end to end: against the stand-in of known capacity (a FIFO of 8 slots).
tests/support/queue_simulation.py's queue, 0.68 s a request, crosses `ttft p90 < 500ms` at
9.84 req/s; here it runs three times faster (0.227 s a request: a 16.7 ms first token and 21
gaps of 10 ms, `ttft p90 < 167ms`), at three times the rates over a third of the windows: the
same queue in units of its service time, the same request counts, a third of the wall time.
On real vLLM (CPU build, tiny model): shared_vllm/test_capacity_vllm_cpu.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import (
    HEALTH_BOUNDS_OFF,
    checked_capacity_folder,
    cli_env,
    run_cli,
    standin_server,
)

pytestmark = pytest.mark.integration

TIME_SCALE = 3  # the queue's service time and windows divided by it, its rates multiplied
# M/D/8, 0.68 s service, TTFT = wait + 50 ms: ttft p90 = 500 ms at 9.84 req/s; time / 3
TRUE_CROSSING_REQ_S = 9.84 * TIME_SCALE


def test_the_interval_covers_the_standins_known_capacity(tmp_path: Path) -> None:
    # far-apart ends and a 100% tolerance, every step away from the crossing (12 under; 60
    # over, its queue growing; then the geometric midpoints 26.8, rho 0.76, and 40.2, rho
    # 1.14, each 9% or more from the crossing's 29.5 req/s, rho 0.84): 5 s windows hold 60
    # requests at 12 req/s, enough for a p90 to PASS at the step confidence (0.99; 51). The
    # interval must hold the crossing whether the search brackets it (exit 0) or ends
    # undecided around it (3)
    step_summary = tmp_path / "step-summary.md"  # GitHub Actions' $GITHUB_STEP_SUMMARY
    with standin_server("--max-concurrency", "8", "--ttft", f"{0.05 / TIME_SCALE:.4f}",
                        "--itl", "0.01") as url:
        result = run_cli([
            "capacity", "scenario=capacity-cpu", f"server.url={url}",
            "traffic.prefix_cache=keep", "traffic.warmup=1s", "traffic.duration=5s",
            "traffic.chat.output_tokens=22", "traffic.chat.system_prompt_tokens=20",
            "traffic.chat.user_tokens=10", "slo.e2e=[]", "slo.ttft=[\"p90 < 167ms\"]",
            "capacity.low=12", "capacity.high=60", "capacity.tolerance=100%",
            "capacity.budget=10m", *HEALTH_BOUNDS_OFF], tmp_path / "runs", timeout_s=900,
            env={**cli_env(), "GITHUB_STEP_SUMMARY": str(step_summary)})
    assert result.returncode in (0, 3), result.output
    # the search's summary once, not one per step
    assert step_summary.read_text().count("## Capacity") == 1, step_summary.read_text()
    assert step_summary.read_text().startswith("## Capacity")
    assert result.run_dir is not None
    data = checked_capacity_folder(result.run_dir)
    low, high = data["capacity"]["interval"]
    assert low <= TRUE_CROSSING_REQ_S <= high, data["capacity"]
    assert data["limiting_slo"] == "ttft p90 < 167ms"
    assert data["status"] == ("bracketed" if result.returncode == 0 else "undecided"), data
    outcomes = {step["load"]: step["outcome"] for step in data["steps"]}
    assert outcomes[12] == "under" and outcomes[60] == "over", outcomes
    over = next(step for step in data["steps"] if step["load"] == 60)
    assert not over["stability"]["stable"], over["stability"]  # the queue grew
    assert "step 60 req/s" in result.output  # a line as each step ends
    again = run_cli(["report", str(result.run_dir)], tmp_path / "runs")
    assert again.returncode == result.returncode, again.output
    assert "capacity" in again.output


def test_a_model_name_the_server_does_not_list_is_exit_2_and_leaves_no_folder(
        tmp_path: Path) -> None:
    with standin_server("--model", "standin") as url:
        result = run_cli(["capacity", "scenario=capacity-cpu", f"server.url={url}",
                          "server.served_model_name=nope"],
                         tmp_path / "runs", timeout_s=120)
    assert result.returncode == 2, result.output
    assert "server.served_model_name = 'nope'" in result.output
    assert result.run_dir is None, result.output  # no half folder left
