"""End to end against the stand-in: a /metrics that stops being Prometheus text (from the start,
or mid-run) leaves the traffic and the rows' verdict alone, with a named warning and no
traceback; a served_model_name the server does not list and a `.../v1` server.url are exit 2
within seconds, leaving no run folder."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.integration.conftest import HEALTH_BOUNDS_OFF, run_cli
from vllm_slo.servers.standin.app import StandinApp
from vllm_slo.servers.standin.config import StandinConfig
from vllm_slo.servers.standin.server import running_standin

pytestmark = pytest.mark.integration

RUN = ["run", "scenario=chat", "traffic.endpoint=completions", "traffic.chat.turns=1",
       "traffic.chat.output_tokens=8", "traffic.chat.system_prompt_tokens=20",
       "traffic.prefix_cache=keep", "traffic.duration=5s", "traffic.warmup=1s",
       "traffic.arrival={kind: closed, users: 2, spawn_rate: 10, think_time: 0s}",
       'slo={error_rate: "< 5%"}', *HEALTH_BOUNDS_OFF]


@pytest.mark.parametrize("good_scrapes", [0, 2])
def test_metrics_that_stop_parsing_leave_the_verdict_to_the_rows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, good_scrapes: int) -> None:
    real = StandinApp.metrics_text
    served = [0]

    def metrics_text(app: StandinApp) -> str:
        served[0] += 1
        return real(app) if served[0] <= good_scrapes else "<html>not here</html>"

    monkeypatch.setattr(StandinApp, "metrics_text", metrics_text)
    with running_standin(StandinConfig(ttft_s=0.01, itl_s=0.002)) as url:
        result = run_cli([*RUN, f"server.url={url}"], tmp_path / "runs")
    assert result.returncode == 0, result.output  # PASS: every row was good
    assert "Traceback" not in result.output
    if good_scrapes == 0:
        assert "warning: server /metrics at the start: not Prometheus text" in result.output
    assert served[0] > good_scrapes + 1
    status = result.json("run_status.json")
    [warning] = [w for w in status["warnings"] if w.startswith("server /metrics:")]
    assert f"{served[0] - good_scrapes} parse: not Prometheus text" in warning
    lines = (result.run_dir / "server_metrics.jsonl").read_text().splitlines() \
        if good_scrapes else []
    assert len(lines) == good_scrapes and all(json.loads(line)["values"] for line in lines)
    summary = result.json("summary.json")
    assert summary["requests"]["failed"] == 0 and summary["requests"]["measured"] > 10


def test_an_unlisted_served_model_name_is_exit_2_and_leaves_no_folder(tmp_path: Path) -> None:
    with running_standin(StandinConfig(model="standin")) as url:
        started = time.monotonic()
        result = run_cli([*RUN, f"server.url={url}", "server.served_model_name=nope"],
                         tmp_path / "runs")
    assert result.returncode == 2, result.output
    assert time.monotonic() - started < 60
    assert "server.served_model_name = 'nope'" in result.output
    assert "lists 'standin'" in result.output and "Traceback" not in result.output
    assert result.run_dir is None  # the folder was removed: no half folder


def test_an_openai_base_url_is_exit_2_at_load_naming_the_root(tmp_path: Path) -> None:
    with running_standin() as url:
        result = run_cli([*RUN, f"server.url={url}/v1"], tmp_path / "runs")
    assert result.returncode == 2, result.output
    assert f"give the server's root, {url!r}" in result.output
    assert result.run_dir is None
