"""`vllm-slo capacity` end to end: against the stand-in of known capacity (a FIFO of 8 slots,
0.68 s a request: its steady state crosses `ttft p90 < 500ms` at 9.84 req/s,
tests/support/queue_simulation.py), and against real vLLM (CPU build, tiny model)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.integration.conftest import REPO, cli_env, requires_vllm, run_cli, standin_server

pytestmark = pytest.mark.integration

SCHEMA = json.loads((REPO / "reports" / "schema" / "capacity.schema.json").read_text())
TRUE_CROSSING_REQ_S = 9.84  # M/D/8, 0.68 s service, TTFT = wait + 50 ms: ttft p90 = 500 ms


def _checked(folder: Path) -> dict:
    data = json.loads((folder / "capacity.json").read_text())
    jsonschema.Draft202012Validator(SCHEMA).validate(data)
    for step in data["steps"]:  # each step is a run folder with its own report
        assert (folder / step["run_dir"] / "summary.json").is_file(), step["run_dir"]
    report = (folder / "report.html").read_text()
    assert "capacity" in report.lower()
    assert (folder / "junit.xml").is_file() and (folder / "summary.md").is_file()
    return data


def test_the_interval_covers_the_standins_known_capacity(tmp_path: Path) -> None:
    # far-apart ends and a 100% tolerance (2 under; 30 over, its queue growing; then 7.7, which
    # at steps decided at 0.99 may stay near and split the bracket): the interval must hold
    # the crossing whether the search brackets it (exit 0) or ends undecided around it (3)
    step_summary = tmp_path / "step-summary.md"  # GitHub Actions' $GITHUB_STEP_SUMMARY
    with standin_server("--max-concurrency", "8", "--ttft", "0.05", "--itl", "0.01") as url:
        result = run_cli([
            "capacity", "scenario=capacity-cpu", f"server.url={url}",
            "traffic.prefix_cache=keep", "traffic.warmup=5s", "traffic.duration=30s",
            "traffic.chat.output_tokens=64", "traffic.chat.system_prompt_tokens=20",
            "traffic.chat.user_tokens=10", "slo.e2e=[]", "slo.ttft=[\"p90 < 500ms\"]",
            "capacity.low=2", "capacity.high=30", "capacity.tolerance=100%",
            "capacity.budget=10m"], tmp_path / "runs", timeout_s=900,
            env={**cli_env(), "GITHUB_STEP_SUMMARY": str(step_summary)})
    assert result.returncode in (0, 3), result.output
    # the search's summary once, not one per step
    assert step_summary.read_text().count("## Capacity") == 1, step_summary.read_text()
    assert step_summary.read_text().startswith("## Capacity")
    assert result.run_dir is not None
    data = _checked(result.run_dir)
    low, high = data["capacity"]["interval"]
    assert low <= TRUE_CROSSING_REQ_S <= high, data["capacity"]
    assert data["limiting_slo"] == "ttft p90 < 500ms"
    assert data["status"] == ("bracketed" if result.returncode == 0 else "undecided"), data
    outcomes = {step["load"]: step["outcome"] for step in data["steps"]}
    assert outcomes[2] == "under" and outcomes[30] == "over", outcomes
    over = next(step for step in data["steps"] if step["load"] == 30)
    assert not over["stability"]["stable"], over["stability"]  # the queue grew
    assert "step 30 req/s" in result.output  # a line as each step ends
    again = run_cli(["report", str(result.run_dir)], tmp_path / "runs")
    assert again.returncode == result.returncode, again.output
    assert "capacity" in again.output


@requires_vllm
def test_a_capacity_search_on_vllm_cpu(tmp_path: Path) -> None:
    # medians, not the scenario's p90s: a p90 needs 51 requests a step to PASS at the step
    # confidence (0.99), and on a loaded 2-core box the first step (2 req/s x 30 s) stayed
    # INCONCLUSIVE and ended the search undecided after 238 s; a p50 decides on ~10, so 12 s
    # steps bracket the capacity within 100% in at most four (the budget counts the start)
    result = run_cli([
        "capacity", "scenario=capacity-cpu", "traffic.warmup=2s", "traffic.duration=12s",
        "slo.ttft=[\"p50 < 1s\"]", "slo.e2e=[\"p50 < 4s\"]",
        "capacity.low=2", "capacity.high=16", "capacity.tolerance=100%",
        "capacity.lengthen=0", "capacity.budget=3m"], tmp_path / "runs", timeout_s=600)
    assert result.returncode in (0, 3), result.output
    assert result.run_dir is not None
    data = _checked(result.run_dir)
    outcomes = {step["load"]: step["outcome"] for step in data["steps"]}
    assert outcomes.get(2) == "under", outcomes  # ~70 output tokens/s: the tiny model's ease
    assert outcomes.get(16) == "over", outcomes  # ~500 output tokens/s: too much
    low, high = data["capacity"]["interval"]
    assert 2 <= low < high <= 16, data["capacity"]
    assert data["status"] != "invalid", data["reason"]


def test_a_model_name_the_server_does_not_list_is_exit_2_and_leaves_no_folder(
        tmp_path: Path) -> None:
    with standin_server("--model", "standin") as url:
        result = run_cli(["capacity", "scenario=capacity-cpu", f"server.url={url}",
                          "server.served_model_name=nope"],
                         tmp_path / "runs", timeout_s=120)
    assert result.returncode == 2, result.output
    assert "server.served_model_name = 'nope'" in result.output
    assert result.run_dir is None, result.output  # no half folder left
