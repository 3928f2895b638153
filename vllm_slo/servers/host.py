"""Facts about this machine: CPU or GPU platform, and provenance for the report."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from pathlib import Path

NAME_FIELDS = "name,driver_version,memory.total"  # gpu_names(): 'NVIDIA H200, 570.86, ...'


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
    return _query_gpus(NAME_FIELDS)


def _gpus_and_uuids() -> tuple[list[str], list[str]]:
    """gpu_names() and the GPUs' UUIDs ('GPU-1f6c...') from one nvidia-smi call (a process
    start in every run's set-up, not two). The UUIDs tell which physical
    GPUs a run had: machines lent one after another can share a hostname, and a tune or
    experiment resumed on another machine is told apart by them."""
    rows = [line.rsplit(", ", 1) for line in _query_gpus(f"{NAME_FIELDS},uuid")]
    return [row[0] for row in rows], [row[-1] for row in rows]


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
    gpus, uuids = _gpus_and_uuids()
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": gpus,
        "gpu_uuids": uuids,
    }
