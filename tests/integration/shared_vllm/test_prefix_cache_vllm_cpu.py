"""traffic.prefix_cache against real vLLM (CPU build, the package's shared server: prefix
caching on, block size 128, VLLM_SERVER_DEV_MODE=1): prompts shaped to a target hit rate come
out within tolerance of it by vLLM's own counters over the measured window (two targets, warm
and cold), and a target the context cannot hold is flagged as a miss (exit code 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import HEALTH_BOUNDS_OFF, requires_vllm, run_cli
from vllm_slo.analysis.prefix_cache import WARNING_NAME
from vllm_slo.servers.vllm_server import VllmServer

pytestmark = [pytest.mark.integration, requires_vllm]

SHORT = ("traffic.duration=6s", "traffic.warmup=2s", "traffic.chat.system_prompt_tokens=64",
         "traffic.chat.turns=2", "traffic.chat.output_tokens=8",
         "traffic.arrival.users=4", "traffic.arrival.think_time=0.1s", *HEALTH_BOUNDS_OFF)


def run(server: VllmServer, tmp_path: Path, *extra: str):
    result = run_cli(["run", "scenario=chat", f"server.url={server.base_url}", *SHORT, *extra],
                     tmp_path)
    assert result.run_dir is not None, result.output
    return result


@pytest.mark.parametrize(("target", "phases", "user_tokens"),
                         [(0.3, "cold", 200), (0.8, "warm", 60)])
def test_the_hit_rate_vllm_counts_is_the_target(shared_vllm: VllmServer, tmp_path: Path,
                                                 target: float, phases: str,
                                                 user_tokens: int) -> None:
    result = run(shared_vllm, tmp_path, f"traffic.prefix_cache.target_hit_rate={target}",
                 f"traffic.prefix_cache.phases={phases}",
                 f"traffic.chat.user_tokens={user_tokens}")
    summary = result.json("summary.json")
    check = summary["traffic"]["prefix_cache"]
    assert check["phases"] == phases and check["target_hit_rate"] == target
    assert check["expected_hit_rate"] == pytest.approx(target, abs=0.01)
    assert check["queries_tokens"] > 0 and check["span_s"] >= 2
    assert abs(check["achieved_hit_rate"] - target) <= 0.05, check
    assert check["verdict"] == "met", check
    assert not any(w.startswith(WARNING_NAME) for w in summary["warnings"])
    provenance = result.json("provenance.json")
    assert provenance["plan"]["prefix_cache"]["block_size"] == 128  # from /metrics
    assert provenance["prefix_cache_reset"] == "reset"
    if phases == "warm":
        assert provenance["prefix_cache_primed"] == "primed (1 shared prefix)"
    assert f"target {target:.2f} ± 0.10" in result.output  # the text report's line
    assert "prefix-cache hit rate (measured window)" in (
        result.run_dir / "report.html").read_text()


def test_a_target_the_context_cannot_hold_is_flagged(shared_vllm: VllmServer,
                                                     tmp_path: Path) -> None:
    # 0.97 of prompts whose own part is ~450 tokens needs ~15,000 shared tokens: the 4096-token
    # context caps the shared part, so the plan expects (and vLLM counts) far less
    result = run(shared_vllm, tmp_path, "traffic.prefix_cache.target_hit_rate=0.97",
                 "traffic.prefix_cache.tolerance=0.02", "traffic.prefix_cache.phases=warm",
                 "traffic.chat.user_tokens=400")
    summary = result.json("summary.json")
    check = summary["traffic"]["prefix_cache"]
    assert check["verdict"] == "missed", check
    assert check["expected_hit_rate"] < 0.95 and check["achieved_hit_rate"] < 0.95
    assert result.returncode == 4, result.output
    assert any(check["reason"] == reason for reason in summary["invalid_reasons"])
    assert any(w.startswith(WARNING_NAME) for w in summary["warnings"])
    assert any("no room in max-model-len" in w for w in summary["warnings"])
    assert "MISSED" in result.output
    assert "MISSED" in (result.run_dir / "report.html").read_text()
