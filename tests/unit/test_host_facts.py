"""What a run records of its host (vllm_slo/servers/host.py): the GPUs by name and by UUID
from nvidia-smi (a stand-in script on PATH here, answering as nvidia-smi does), and nothing
where there is no nvidia-smi or it fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vllm_slo.servers import host

FAKE_SMI = """#!/bin/sh
case "$1" in
  --query-gpu=name,driver_version,memory.total,uuid)
    printf 'NVIDIA H200, 580.159.04, 143771 MiB, GPU-1f6c2a9e-4b7d-8c3e-9a10-5d6e7f8a9b0c\\n'
    printf 'NVIDIA H200, 580.159.04, 143771 MiB, GPU-77aa\\n' ;;
  --query-gpu=name,driver_version,memory.total)
    printf 'NVIDIA H200, 580.159.04, 143771 MiB\\nNVIDIA H200, 580.159.04, 143771 MiB\\n' ;;
  *) exit 9 ;;
esac
"""


def _smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(script)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_gpus_are_recorded_by_name_and_uuid(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _smi_on_path(tmp_path, monkeypatch, FAKE_SMI)
    facts = host.host_facts()
    assert facts["gpus"] == ["NVIDIA H200, 580.159.04, 143771 MiB"] * 2
    assert facts["gpu_uuids"] == ["GPU-1f6c2a9e-4b7d-8c3e-9a10-5d6e7f8a9b0c", "GPU-77aa"]
    assert host.detect_platform() == "gpu"


def test_a_failing_or_missing_nvidia_smi_gives_no_gpus(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _smi_on_path(tmp_path, monkeypatch, "#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    assert host.host_facts()["gpu_uuids"] == [] and host.gpu_names() == []
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert host.host_facts()["gpu_uuids"] == [] and host.detect_platform() == "cpu"
