"""Facts about this machine: CPU or GPU platform, and provenance for the report."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path


def _query_gpus(fields: str) -> list[str]:
    """nvidia-smi's CSV line per visible GPU for these `--query-gpu` fields; [] without one."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        result = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if result.returncode != 0:
        return []
    return [line.strip() for line in result.stdout.splitlines() if line.strip()]


def gpu_names() -> list[str]:
    """NVIDIA GPUs visible through nvidia-smi, e.g. ['NVIDIA H200, 570.86, 143771 MiB']."""
    return _query_gpus("name,driver_version,memory.total")


def gpu_uuids() -> list[str]:
    """The visible GPUs' UUIDs ('GPU-1f6c...'): which physical GPUs a run had. Machines lent
    one after another can share a hostname; a tune or experiment resumed on another machine
    is told apart by these."""
    return _query_gpus("uuid")


def detect_platform() -> str:
    """'gpu' when an NVIDIA GPU is visible, else 'cpu' (vLLM's CPU build)."""
    return "gpu" if gpu_names() else "cpu"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit(directory: Path) -> str | None:
    try:
        result = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                           cwd=directory, capture_output=True, text=True, timeout=10)
    return result.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def host_facts() -> dict[str, object]:
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpu_names(),
        "gpu_uuids": gpu_uuids(),
    }
