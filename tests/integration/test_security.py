"""Nobody let in, nothing leaked: an API key given by environment variable name reaches the
server but no file the suite writes, nor its output; launched servers and the Locust master
bind to loopback; Locust's web UI is off."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.integration.conftest import HEALTH_BOUNDS_OFF, cli_env, run_cli, standin_server
from vllm_slo.loadtests.locust_launcher import locust_argv
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.servers.vllm_server import plan_launch

pytestmark = pytest.mark.integration

PLANTED = "sk-planted-4f1e9c0b7d2a"


def test_a_planted_api_key_appears_in_no_output_file(tmp_path: Path) -> None:
    env = {**cli_env(), "MY_KEY": PLANTED}
    with standin_server("--ttft", "0.05", "--itl", "0.01") as url:  # ~80 ms requests
        result = run_cli(["run", "scenario=chat", f"server.url={url}",
                          "server.api_key_env=MY_KEY", "traffic.chat.output_tokens=4",
                          "traffic.prefix_cache=keep", "traffic.duration=2s",
                          "traffic.warmup=0s", f"server.env.LEAKY_TOKEN={PLANTED}",
                          "traffic.arrival={kind: closed, users: 2, spawn_rate: 2, "
                          "think_time: 0s}", *HEALTH_BOUNDS_OFF], tmp_path, env=env)
    assert result.returncode in (0, 1, 3), result.output
    assert PLANTED not in result.output
    files = [p for p in result.run_dir.rglob("*") if p.is_file()]
    assert len(files) > 8
    leaks = [p for p in files if PLANTED.encode() in p.read_bytes()]
    assert not leaks, leaks
    assert os.environ.get("MY_KEY") != PLANTED  # the key lived only in the child's env


def test_servers_and_the_locust_master_listen_on_loopback_and_no_web_ui() -> None:
    scenario, _ = load_scenario("chat", ["traffic.remote_workers=1"])
    plan = plan_launch(scenario.server, "cpu", "/models/tiny", 8123)
    assert plan.argv[plan.argv.index("--host") + 1] == "127.0.0.1"
    argv = locust_argv(Path("/run"), "http://127.0.0.1:8123", scenario.traffic, 1)
    assert "--headless" in argv and "--web-host" not in argv
    assert argv[argv.index("--master-bind-host") + 1] == "127.0.0.1"
