"""`traffic.profile: trace` against real vLLM (CPU build, the package's shared server: prefix
caching on, block size 128, VLLM_SERVER_DEV_MODE=1 so the cache is reset before the traffic):
a 25 s Mooncake-format trace with 512-token hash-id blocks, written here, is replayed at its
times, and the prefix-cache hit rate vLLM counts over the measured window is within the stated
tolerance (traffic.trace.hit_rate_tolerance, 0.05) of the rate the trace implies."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.integration.conftest import HEALTH_BOUNDS_OFF, requires_vllm, run_cli
from vllm_slo.analysis.trace_fidelity import MISMATCH_NAME
from vllm_slo.servers.vllm_server import VllmServer

pytestmark = [pytest.mark.integration, requires_vllm]

BLOCK = 512  # Mooncake's


def write_trace(path: Path) -> list[dict]:
    """~50 requests over 25 s, at least 0.3 s apart (a request that arrives before the one
    whose blocks it reuses has finished its prefill misses them, which the implied rate does
    not model); each opens with one of three one-block system prompts and, every other one, a
    one- or two-block document of it, then up to two blocks of its own, the last partial."""
    rng = random.Random(11)
    systems = [1, 2, 3]
    documents = {1: [[10], [11, 12]], 2: [[20, 21]], 3: [[30]]}
    rows, t_ms, next_id = [], 0.0, 1000
    while t_ms < 25_000:
        system = rng.choice(systems)
        shared = [system] + (rng.choice(documents[system]) if rng.random() < 0.5 else [])
        own = rng.randint(30, 900)
        own_blocks = list(range(next_id, next_id + -(-own // BLOCK)))
        next_id += len(own_blocks)
        rows.append({"timestamp": round(t_ms), "input_length": len(shared) * BLOCK + own,
                     "output_length": rng.randint(2, 6), "hash_ids": shared + own_blocks})
        t_ms += 300 + rng.expovariate(1 / 200)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


def test_vllm_counts_the_hit_rate_the_trace_implies(shared_vllm: VllmServer,
                                                    tmp_path: Path) -> None:
    rows = write_trace(tmp_path / "mooncake.jsonl")
    result = run_cli(["run", "scenario=trace-replay", f"server.url={shared_vllm.base_url}",
                      f"traffic.trace.path={tmp_path / 'mooncake.jsonl'}",
                      "traffic.warmup=5s", "traffic.duration=20s",
                      "slo={error_rate: \"< 50%\"}", *HEALTH_BOUNDS_OFF], tmp_path)
    assert result.run_dir is not None, result.output
    summary = result.json("summary.json")
    fidelity = summary["traffic"]["trace"]
    provenance = result.json("provenance.json")
    assert provenance["prefix_cache_reset"] == "reset"
    assert provenance["plan"]["requests"] == len(rows)
    implied = fidelity["implied_hit_rate"]
    assert 0.3 < implied < 0.8, fidelity
    assert fidelity["queries_tokens"] > 10_000
    assert abs(fidelity["achieved_hit_rate"] - implied) <= 0.05, fidelity
    assert fidelity["verdict"] == "met", fidelity
    assert not any(w.startswith(MISMATCH_NAME) for w in summary["warnings"])
    by_name = {row["statistic"]: row for row in fidelity["rows"]}
    assert by_name["requests"]["sent"] == by_name["requests"]["trace"]
    # ignore_eos: the trace's output lengths (a request still streaming when the traffic
    # stopped would count short)
    assert by_name["output tokens mean"]["sent"] == pytest.approx(
        by_name["output tokens mean"]["trace"], rel=0.05)
    assert f"{implied:.3f} implied ± 0.05: met" in result.output
