"""Credentials never leak: one secret of each kind (URL user-info, the API key's value in the
environment — sent as an Authorization header —, a server arg carrying a key, a secret-named
server env value), each a distinct random string, planted in a stand-in run; no file of the run
folder (parquet, arrows, logs included) nor the terminal output may hold any of them."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from tests.integration.conftest import (
    FAKE_VLLM,
    HEALTH_BOUNDS_OFF,
    cli_env,
    run_cli,
    standin_server,
)

pytestmark = pytest.mark.integration

SHORT_RUN = ["traffic.chat.output_tokens=8", "traffic.chat.turns=1", "traffic.prefix_cache=keep",
             "traffic.chat.system_prompt_tokens=20", "traffic.duration=3s", "traffic.warmup=0s",
             "traffic.arrival={kind: closed, users: 2, spawn_rate: 2, think_time: 0s}",
             "slo={error_rate: \"< 100%\"}",
             *HEALTH_BOUNDS_OFF]  # tests of the secrets, not of the client's health


def _leaks(run_dir: Path, output: str, planted: dict[str, str]) -> list[str]:
    found = [f"terminal: {kind}" for kind, secret in planted.items() if secret in output]
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path.relative_to(run_dir)}: {kind}" for kind, secret in planted.items()
                  if secret.encode() in data]
    return found


def test_attach_mode_leaks_no_credential(tmp_path: Path) -> None:
    planted = {"url userinfo": secrets.token_hex(12), "api key env value": secrets.token_hex(12)}
    env = {**cli_env(), "H4_API_KEY": planted["api key env value"]}
    with standin_server("--ttft", "0.02", "--itl", "0.005") as url:
        host = url.split("://", 1)[1]
        result = run_cli(["run", "scenario=chat",
                          f"server.url=http://user:{planted['url userinfo']}@{host}",
                          "server.api_key_env=H4_API_KEY", *SHORT_RUN], tmp_path, env=env)
    assert result.run_dir is not None, result.output
    assert result.returncode in (0, 1, 3), result.output
    leaks = _leaks(result.run_dir, result.output, planted)
    assert leaks == [], "\n".join(leaks)


def test_launch_mode_leaks_no_credential(tmp_path: Path) -> None:
    planted = {"server arg --api-key": secrets.token_hex(12),
               "server env HF_TOKEN": secrets.token_hex(12),
               "api key env value": secrets.token_hex(12)}
    env = {**cli_env(), "H4_API_KEY": planted["api key env value"]}
    result = run_cli(["run", "scenario=chat", *FAKE_VLLM,
                      f"server.args={{api-key: {planted['server arg --api-key']}}}",
                      f"server.env={{HF_TOKEN: {planted['server env HF_TOKEN']}}}",
                      "server.api_key_env=H4_API_KEY", *SHORT_RUN], tmp_path, env=env)
    assert result.run_dir is not None, result.output
    assert result.returncode in (0, 1, 3), result.output
    leaks = _leaks(result.run_dir, result.output, planted)
    assert leaks == [], "\n".join(leaks)
