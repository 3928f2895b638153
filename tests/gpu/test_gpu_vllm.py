"""On an NVIDIA GPU with the normal vLLM package: the suite launches vLLM for the GPU platform
(no CPU defaults), drives closed- and open-loop traffic and reports from real GPU serving.
Skipped without a GPU. `VLLM_SLO_GPU_MODEL` names a local model folder (default: the suite's
tiny model); `VLLM_SLO_GPU_OUT` keeps the run folders for inspection."""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import run_cli
from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.servers.host import detect_platform, gpu_names
from vllm_slo.servers.vllm_server import launch_vllm

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_names(), reason="no NVIDIA GPU visible (nvidia-smi)"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM not installed"),
]

MODEL = os.environ.get("VLLM_SLO_GPU_MODEL", "tiny")


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    keep = os.environ.get("VLLM_SLO_GPU_OUT")
    return Path(keep) if keep else tmp_path_factory.mktemp("gpu-runs")


@pytest.fixture(scope="module")
def server(runs_dir: Path) -> Iterator[str]:
    spec = ServerSpec(model=MODEL, served_model_name="gpu-model",
                      args={"max-model-len": 4096}, ready_timeout="8m")
    assert detect_platform() == "gpu"
    with launch_vllm(spec, "gpu", runs_dir / "fixture-server.log",
                     {"VLLM_SERVER_DEV_MODE": "1"}) as vllm:
        assert vllm.plan.platform_defaults == {}  # nothing CPU-specific on a GPU
        yield vllm.base_url


def test_launch_mode_on_the_gpu(runs_dir: Path) -> None:
    result = run_cli(["run", "scenario=chat", f"server.model={MODEL}",
                      "server.served_model_name=gpu-model", "server.ready_timeout=8m",
                      "traffic.duration=20s", "traffic.warmup=5s", "traffic.arrival.users=32",
                      "traffic.arrival.spawn_rate=32"], runs_dir / "launch", timeout_s=900)
    assert result.returncode in (0, 1, 3), result.output
    provenance = result.json("provenance.json")
    assert provenance["platform"] == "gpu" and provenance["host"]["gpus"]
    assert provenance["launch"]["platform_defaults"] == {}
    assert "--enforce-eager" not in provenance["launch"]["argv"]
    assert provenance["prefix_cache_reset"] == "reset"
    table = pq.read_table(result.run_dir / "samples.parquet").to_pydict()
    assert sum(table["ok"]) > 100 and all(table["ok"])


def test_open_loop_long_documents(server: str, runs_dir: Path) -> None:
    result = run_cli(["run", "scenario=long-doc", f"server.url={server}",
                      "traffic.arrival={kind: poisson, rate: 8, max_in_flight: 256}",
                      "traffic.long-doc.output_tokens=128", "traffic.duration=30s",
                      "traffic.max_send_lag_p99=50ms"], runs_dir / "long-doc", timeout_s=900)
    assert result.returncode in (0, 1, 3), result.output
    summary = result.json("summary.json")
    assert summary["traffic"]["queued_for_slot"] == 0
    assert summary["traffic"]["client_send_lag_p99_s"] < 0.05
    assert summary["requests"]["failed"] == 0
    print(json.dumps({k: summary["metrics"][k]["percentiles"] for k in ("ttft", "itl")},
                     indent=1))
