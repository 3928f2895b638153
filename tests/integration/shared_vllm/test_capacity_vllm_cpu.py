"""`vllm-slo capacity` on real vLLM (CPU build, tiny model), attached to the shared server: the
search's steps, their verdicts, the bracket and every output file. Known-capacity coverage is
tested on the stand-in (test_capacity.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.conftest import checked_capacity_folder, requires_vllm, run_cli
from vllm_slo.servers.vllm_server import VllmServer

pytestmark = [pytest.mark.integration, requires_vllm]


def test_a_capacity_search_on_vllm_cpu(shared_vllm: VllmServer, tmp_path: Path) -> None:
    # medians, not the scenario's p90s: a p90 needs 51 requests a step to PASS at the step
    # confidence (0.99), and on a loaded 2-core box the first step (2 req/s x 30 s) stayed
    # INCONCLUSIVE and ended the search undecided; a p50 decides on ~10 (12 s steps). The tiny
    # model's capacity here depends on the host and its load: 16 req/s was over in fresh-clone
    # CI runs on a loaded 2-core box and under on a quiet one, whose search put it at 51-64
    # req/s; 256 req/s (8,000 streamed tokens/s on two cores shared with Locust) was over there
    # with every arrival queued at the client's in-flight cap. The budget stops the search
    # after the first midpoint (2, 256, 22.6 req/s: 59 s, against 99 s to a 100% bracket);
    # bisecting to the tolerance is tested on the stand-in
    result = run_cli([
        "capacity", "scenario=capacity-cpu", f"server.url={shared_vllm.base_url}",
        "traffic.warmup=2s", "traffic.duration=12s",
        "slo.ttft=[\"p50 < 1s\"]", "slo.e2e=[\"p50 < 4s\"]",
        "capacity.low=2", "capacity.high=256", "capacity.tolerance=100%",
        "capacity.lengthen=0", "capacity.budget=75s"], tmp_path / "runs", timeout_s=600)
    assert result.returncode in (0, 3), result.output
    assert result.run_dir is not None
    data = checked_capacity_folder(result.run_dir)
    outcomes = {step["load"]: step["outcome"] for step in data["steps"]}
    assert outcomes.get(2) == "under", outcomes  # ~60 output tokens/s: the tiny model's ease
    assert outcomes.get(256) == "over", outcomes  # ~8,000 output tokens/s: beyond two cores
    low, high = data["capacity"]["interval"]
    assert 2 <= low < high <= 256, data["capacity"]
    assert data["status"] != "invalid", data["reason"]
    for step in data["steps"]:  # the attached server's prefix cache reset before each step
        provenance = json.loads((result.run_dir / step["run_dir"] / "provenance.json")
                                .read_text())
        assert provenance["prefix_cache_reset"] == "reset", step["run_dir"]
