"""Issue 40 items 12 and 18 on a whole `run` against the stand-in: an ASCII terminal and an
unwritable $GITHUB_STEP_SUMMARY leave the verdict and its exit code as they are; a disk that
fills while the outputs are written prints the verdict, then exit 4 naming the file, and
`vllm-slo report` renders the folder later."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import FAKE_VLLM, HEALTH_BOUNDS_OFF, REPO, cli_env, run_cli

pytestmark = pytest.mark.integration

RUN = ["run", "scenario=chat", *FAKE_VLLM, *HEALTH_BOUNDS_OFF, "traffic.duration=3s",
       "traffic.warmup=0s", "traffic.arrival={kind: closed, users: 2, spawn_rate: 10, "
       "think_time: 0s}", 'slo={ttft: ["p50 < 10s"], error_rate: "< 50%"}']

# the CLI with a disk that is full for summary.json (the rows and the other files fit)
FULL_DISK = """
import errno, os, sys
from vllm_slo.run_folder import file_writes
real = file_writes._temporary_beside
def full(path):
    if path.name == "summary.json":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    return real(path)
file_writes._temporary_beside = full
from vllm_slo.cli import main
sys.exit(main())
"""


def test_an_ascii_terminal_and_an_unwritable_step_summary_keep_the_verdict(
        tmp_path: Path) -> None:
    folder = tmp_path / "step-summary-is-a-folder"
    folder.mkdir()
    env = {k: v for k, v in cli_env().items()
           if k not in ("PYTHONIOENCODING", "PYTHONUTF8", "LANG", "LC_CTYPE")}
    env.update(LC_ALL="C", PYTHONUTF8="0", GITHUB_STEP_SUMMARY=str(folder))
    result = run_cli(RUN, tmp_path / "runs", env=env)
    assert result.run_dir is not None, result.output
    summary = result.json("summary.json")
    assert result.returncode == summary["exit_code"] == 0, result.output
    assert "UnicodeEncodeError" not in result.output and "internal error" not in result.output
    assert f"warning: $GITHUB_STEP_SUMMARY {folder}: not appended" in result.output
    assert result.output.isascii()


def test_a_full_disk_prints_the_verdict_then_exit_4_naming_the_file(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    result = run_cli(RUN, runs, command=[sys.executable, "-c", FULL_DISK, "--runs-dir",
                                         str(runs)],
                     env={**cli_env(), "PYTHONPATH": str(REPO)})
    assert result.run_dir is not None, result.output
    assert result.returncode == 4, result.output
    assert "verdict: exit code 0 (PASS), but it could not be saved" in result.output
    assert (f"vllm-slo: error: cannot write {result.run_dir / 'summary.json'}: No space left "
            "on device") in result.output
    assert result.output.index("verdict: exit code 0") < result.output.index("cannot write")
    assert "internal error" not in result.output
    assert not (result.run_dir / "summary.json").exists()  # nothing truncated left behind
    assert not [p for p in result.run_dir.iterdir() if p.name.endswith(".tmp")]
    again = run_cli(["report", str(result.run_dir)], runs)  # space again: the report renders
    assert again.returncode == 0, again.output
    assert json.loads((result.run_dir / "summary.json").read_text())["exit_code"] == 0
