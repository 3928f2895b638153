"""benchmarks/h200_claims.sh carries a tune across device sessions (issue 26): a tune stopped
in one session (SIGTERM, as the script's watchdog sends at CLAIMS_END) is packed by `collect`
with its trials' rows, unpacked on a fresh machine by `restore` and finished by `resume`, which
keeps the trials already done. Here the machine is this one and vLLM the known-timing stand-in
behind vLLM's command line (tests/support/fake_vllm.py): what is tested is the script's paths,
the ones a GPU session cannot afford to find broken."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import FAKE_VLLM, HEALTH_BOUNDS_OFF, REPO

pytestmark = pytest.mark.integration

SCRIPT = REPO / "benchmarks" / "h200_claims.sh"
# h200-tune itself (baseline, then its searches), made small: 1 trial a candidate of 2 s
SMALL = [*FAKE_VLLM, *HEALTH_BOUNDS_OFF, "tune.trials=1", "traffic.duration=2s",
         "traffic.warmup=1s", "traffic.arrival={kind: closed, users: 4, spawn_rate: 4, "
         "think_time: 0s}", "traffic.chat.system_prompt_tokens=20"]


def _script(claims: Path, out: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CLAIMS_DIR": str(claims), "OUT": str(out),
           # the script runs `python3 -m vllm_slo`: this environment's Python, the suite in it
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "CLAIM_ARGS": " ".join(f"'{a}'" for a in SMALL)}
    return subprocess.run(["bash", str(SCRIPT), *arguments], capture_output=True, text=True,
                          env=env, timeout=60, cwd=REPO)


def _wait_for(log: Path, text: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        content = log.read_text() if log.is_file() else ""
        if text in content:
            return content
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not in {log} after {timeout_s} s:\n{content}")


@pytest.fixture
def claims(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """Two runs folders, the first session's machine and the next's; every driver the script
    left running is stopped at the end."""
    first, second = tmp_path / "session1", tmp_path / "session2"
    yield first, second
    for folder in (first, second):
        pid_file = folder / "driver.pid"
        if pid_file.is_file():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def test_a_tune_stopped_in_one_session_is_finished_in_the_next(claims: tuple[Path, Path],
                                                               tmp_path: Path) -> None:
    first, second = claims
    out1, out2 = tmp_path / "out1", tmp_path / "out2"
    out1.mkdir()
    out2.mkdir()
    started = _script(first, out1, "start", "h200-tune")
    assert started.returncode == 0, started.stdout + started.stderr
    log = first / "driver.log"
    _wait_for(log, "=== trial 2:", 120)  # trial 1 done; stop trial 2 as the watchdog would
    os.kill(int((first / "run.pid").read_text()), signal.SIGTERM)
    driver = _wait_for(log, "=== all done", 60)
    assert "interrupted: no further trials" in driver, driver
    (tune_dir,) = [p.parent for p in first.glob("*/tune.yaml")]

    collected = _script(first, out1, "collect")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    parts = sorted(out1.glob("resumable.tgz.part-*"))
    assert parts and (out1 / "claims.tgz").is_file()
    with tarfile.open(out1 / "claims.tgz") as archive:  # the committed copy: no raw rows
        assert not [n for n in archive.getnames() if n.endswith(("samples.parquet", ".arrows"))]

    carried = tmp_path / "carried"  # what the next session carries to its machine
    carried.mkdir()
    for part in parts:
        (carried / part.name).write_bytes(part.read_bytes())
    restored = _script(second, out2, "restore", str(carried))
    assert restored.returncode == 0, restored.stdout + restored.stderr
    trial1 = sorted((second / tune_dir.name / "trials").iterdir())[0]
    assert (trial1 / "samples.parquet").is_file()  # the rows `tune --resume` re-reads
    assert not list(trial1.rglob("*.arrows")) and not list(trial1.rglob("*.html"))

    resumed = _script(second, out2, "resume", tune_dir.name)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    driver = _wait_for(second / "driver.log", "=== all done", 300)
    assert f"tune --resume {second / tune_dir.name}" in driver
    assert "done before, kept" in driver and "resuming tune" in driver, driver
    tune = json.loads((second / tune_dir.name / "tune.json").read_text())
    assert tune["interrupted"] is False, driver
    assert tune["candidates"][0]["origin"] == "as given"  # h200-tune's baseline ran first
    assert tune["gain_over_given"] is not None
    assert f"=== exit {tune['exit_code']} {tune_dir.name}" in driver
    # the next collect packs what is still cut short, not the finished tune
    for name, reason in (("exp-cut", "interrupted"), ("exp-done", "decided")):
        (second / name).mkdir()
        (second / name / "stopping.json").write_text(json.dumps({"reason": reason}, indent=2))
    out3 = tmp_path / "out3"
    out3.mkdir()
    collected = _script(second, out3, "collect")
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "resumable (packed with their rows): exp-cut\n" in collected.stdout
    # a name the machine does not hold is refused before anything starts
    missing = _script(second, out2, "resume", "no-such-run")
    assert missing.returncode == 2 and "restore it first" in missing.stdout
