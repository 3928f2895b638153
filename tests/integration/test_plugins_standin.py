"""A metric and a traffic profile registered by plugin modules (VLLM_SLO_PLUGINS) work across
the suite's processes: the CLI judges the registered rate SLO, the Locust processes (which
import the plugins before reading locust_config.json) send the registered profile's plan, and
`vllm-slo report` on the folder later needs the same plugins (without them: exit 2, named)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import FAKE_VLLM, HEALTH_BOUNDS_OFF, REPO, cli_env, run_cli

pytestmark = pytest.mark.integration

PLUGINS = "tests.support.send_rate,tests.support.fixed_length"
RUN = ["run", "scenario=chat", *FAKE_VLLM, *HEALTH_BOUNDS_OFF, "traffic.profile=fixed-length",
       "traffic.fixed-length.input_tokens=24", "traffic.fixed-length.output_tokens=6",
       "traffic.duration=3s", "traffic.warmup=0s",
       "traffic.arrival={kind: closed, users: 2, spawn_rate: 10, think_time: 0s}",
       'slo={send_rate: "> 0.5 req/s", error_rate: "< 50%"}']


def test_plugins_reach_every_process(tmp_path: Path) -> None:
    # the plugins live in this repository's tests/: the user puts theirs on the path likewise
    env = {**cli_env(), "PYTHONPATH": str(REPO), "VLLM_SLO_PLUGINS": PLUGINS}
    result = run_cli(RUN, tmp_path / "runs", env=env)
    assert result.run_dir is not None, result.output
    assert result.returncode == 0, result.output
    summary = result.json("summary.json")
    verdicts = {slo["metric"]: slo["verdict"] for slo in summary["slos"]}
    assert verdicts == {"send_rate": "PASS", "error_rate": "PASS"}, summary["slos"]
    assert "send_rate > 0.5 req/s" in result.output
    # the Locust users sent the registered profile's plan: one turn asking 6 tokens each
    rows = pq.read_table(result.run_dir / "samples.parquet").to_pylist()
    assert rows and {(row["profile"], row["turn"], row["max_tokens"]) for row in rows} == {
        ("fixed-length", 0, 6)}
    # the report again, later: with the plugins as the run had them, and without
    again = run_cli(["report", str(result.run_dir)], tmp_path / "runs", env=env)
    assert again.returncode == 0, again.output
    without = run_cli(["report", str(result.run_dir)], tmp_path / "runs",
                      env={**cli_env(), "PYTHONPATH": str(REPO)})
    assert without.returncode == 2, without.output
    assert ("slo.send_rate, traffic.profile 'fixed-length' not registered in this process: "
            "name the modules that register them in VLLM_SLO_PLUGINS, as the run had it "
            "(now: unset)") in without.output, without.output
