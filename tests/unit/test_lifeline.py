"""The lifeline (vllm_slo/transport/lifeline.py): a group started by `start_guarded` ends
when the process that started it dies, SIGKILL included (SIGTERM, then SIGKILL after the
grace); while that process lives the lifeline is invisible: PROGRAM's exit code and signal
are the group's, the suite's own stop works as before. Small real processes (`sh`, `sleep`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vllm_slo.transport import lifeline
from vllm_slo.transport.processes import (
    LIFELINE_SCRIPT,
    lifeline_argv,
    process_group_alive,
    start_guarded,
    stop_process_group,
)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="/proc and PR_SET_PDEATHSIG are Linux's")


def wait_until(predicate, timeout_s: float) -> float:
    """Seconds until `predicate()` held; fails after `timeout_s`."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < timeout_s, "timed out"
        time.sleep(0.02)
    return time.monotonic() - started


def _stat(pid: int, state: str, pgid: int) -> str:
    return f"{pid} (sh) {state} 1 {pgid} {pgid} 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 100"


def test_group_members_reads_live_members_of_one_group_from_proc(tmp_path: Path) -> None:
    for pid, state, pgid in [(10, "S", 10), (11, "R", 10), (12, "Z", 10), (13, "S", 99)]:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat(pid, state, pgid))
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "stat").write_text(_stat(1, "S", 1))
    (tmp_path / "14").mkdir()  # ended while read: no stat
    assert sorted(lifeline.group_members(10, tmp_path)) == [10, 11]  # the zombie left out
    assert lifeline.group_members(99, tmp_path) == [13]
    assert lifeline.group_members(10, tmp_path / "nowhere") is None  # no /proc: not Linux


def test_the_lifeline_runs_isolated_by_its_path_with_the_program_after_a_separator() -> None:
    argv = lifeline_argv(["vllm", "serve", "--port", "8000"], 7, (2, 3), 3.0)
    assert argv[:3] == [sys.executable, "-I", str(LIFELINE_SCRIPT)]
    assert argv[argv.index("--fd") + 1] == "7"
    assert argv[argv.index("--cores") + 1] == "2,3"
    assert argv[argv.index("--") + 1:] == ["vllm", "serve", "--port", "8000"]
    assert "--cores" not in lifeline_argv(["x"], 7, None, 3.0)
    options = lifeline.parse(argv[3:])
    assert (options.fd, options.cores, options.grace_s) == (7, "2,3", 3.0)
    assert options.command == ["vllm", "serve", "--port", "8000"]


def test_the_program_s_exit_code_and_signal_are_the_group_s() -> None:
    assert start_guarded(["sh", "-c", "exit 3"]).wait(10) == 3
    assert start_guarded(["sh", "-c", "kill -USR1 $$"]).wait(10) == -signal.SIGUSR1


def test_a_program_that_cannot_start_is_exit_127_naming_it(tmp_path: Path) -> None:
    process = start_guarded([str(tmp_path / "no-such-vllm")], stderr=subprocess.PIPE)
    _, err = process.communicate(timeout=10)
    assert process.returncode == 127
    assert b"cannot start" in err and b"no-such-vllm" in err, err


def test_the_suite_s_stop_reaches_the_program_and_ends_the_lifeline() -> None:
    process = start_guarded(["sh", "-c", "sleep 60 & exec sleep 60"])
    time.sleep(0.3)
    stop_process_group(process, grace_s=5)
    assert process.returncode == -signal.SIGTERM  # sleep's own end, mirrored
    assert not process_group_alive(process.pid)
    assert process.lifeline_fd is None  # the pipe is let go with the group


def test_letting_go_of_the_pipe_ends_the_group() -> None:
    process = start_guarded(["sh", "-c", "sleep 60 & exec sleep 60"])
    time.sleep(0.3)
    process.release()
    wait_until(lambda: process.poll() is not None, 5)
    wait_until(lambda: not process_group_alive(process.pid), 5)


PARENT = textwrap.dedent("""
    import sys, time
    from vllm_slo.transport.processes import start_guarded
    process = start_guarded(["sh", "-c", sys.argv[1]], grace_s=float(sys.argv[2]))
    print(process.pid, flush=True)
    time.sleep(60)
""")


def _kill_the_parent(program: str, grace_s: float) -> tuple[int, float]:
    """A parent starts `program` behind a lifeline and is SIGKILLed: the group's id and the
    seconds until the group is gone."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, program, str(grace_s)],
                              stdout=subprocess.PIPE, text=True)
    pgid = int(parent.stdout.readline())
    time.sleep(0.5)  # the program has started its children
    assert process_group_alive(pgid)
    parent.kill()
    parent.wait()
    parent.stdout.close()
    return pgid, wait_until(lambda: not process_group_alive(pgid), grace_s + 5)


def test_kill_9_of_the_starting_process_ends_the_group_at_once() -> None:
    _, gone_s = _kill_the_parent("sleep 60 & sleep 60 & exec sleep 60", 3.0)
    assert gone_s < 1.5, gone_s  # SIGTERM ends sleep: no wait for the grace


def test_a_group_that_ignores_sigterm_is_killed_after_the_grace() -> None:
    _, gone_s = _kill_the_parent("trap '' TERM; sleep 60 & sleep 60 & wait", 1.0)
    assert 1.0 <= gone_s < 3.0, gone_s


@linux_only
def test_the_program_dies_with_a_killed_lifeline_pr_set_pdeathsig() -> None:
    process = start_guarded(["sleep", "60"])
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children")
    wait_until(lambda: children.read_text().split() != [], 5)
    child = int(children.read_text().split()[0])
    os.kill(process.pid, signal.SIGKILL)  # the lifeline alone
    process.wait(5)
    wait_until(lambda: not Path(f"/proc/{child}").exists()
               or "Z" in Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1][:3], 5)


def test_without_prctl_there_is_no_death_signal_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lifeline.sys, "platform", "darwin")
    assert lifeline.death_signal_hook(signal.SIGKILL) is None
