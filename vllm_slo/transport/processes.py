"""OS processes the suite starts (a vLLM server's group, Locust's): started behind a
lifeline so that they die with the suite, whole process groups stopped and probed, CPU
affinity, a free loopback port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vllm_slo.transport import lifeline

LIFELINE_SCRIPT = Path(lifeline.__file__)
# seconds the lifeline gives a group (rows flushed, vLLM's engine shut down) between its
# SIGTERM and its SIGKILL once the suite is gone
ORPHAN_GRACE_S = 3.0


class GuardedProcess(subprocess.Popen[bytes]):
    """A process group behind a lifeline (vllm_slo/transport/lifeline.py): `pid` is the
    lifeline's, which is also the group's id; its exit is PROGRAM's. The suite holds
    `lifeline_fd`, the pipe's write end: when it is closed (`release`, or the suite's death)
    the lifeline ends the whole group."""

    lifeline_fd: int | None = None

    def release(self) -> None:
        """Close the pipe: a group still running is stopped by its lifeline."""
        fd, self.lifeline_fd = self.lifeline_fd, None
        if fd is not None:
            os.close(fd)


def lifeline_argv(argv: Sequence[str], read_fd: int, cores: tuple[int, ...] | None,
                  grace_s: float) -> list[str]:
    """Pure: the command line that runs `argv` behind a lifeline watching `read_fd`."""
    return [sys.executable, "-I", str(LIFELINE_SCRIPT), "--fd", str(read_fd),
            "--grace-s", f"{grace_s:g}",
            *(["--cores", ",".join(map(str, cores))] if cores is not None else []),
            "--", *argv]


def start_guarded(argv: Sequence[str], cores: tuple[int, ...] | None = None,
                  grace_s: float = ORPHAN_GRACE_S, **popen: Any) -> GuardedProcess:
    """Start `argv` in a new session behind a lifeline: the group (every process `argv` starts
    and leaves in its group) is SIGTERMed, then SIGKILLed after `grace_s`, when this process
    ends however it ends, SIGKILL included. `cores`: the CPU cores the group is confined to
    before `argv` starts (None: anywhere). `popen`: stdio, env, cwd as for `Popen`."""
    read_fd, write_fd = os.pipe()  # neither inheritable: no other child holds the write end
    try:
        process = GuardedProcess(lifeline_argv(argv, read_fd, cores, grace_s),
                                 pass_fds=(read_fd,), start_new_session=True, **popen)
    except BaseException:
        os.close(write_fd)
        raise
    finally:
        os.close(read_fd)
    process.lifeline_fd = write_fd
    return process


def process_group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process_group(process: subprocess.Popen[Any], grace_s: float = 20.0) -> None:
    """SIGTERM the whole group (API server, EngineCore, workers), SIGKILL after the grace."""
    try:
        _stop_group(process, grace_s)
    finally:
        if isinstance(process, GuardedProcess):
            process.release()


def _stop_group(process: subprocess.Popen[Any], grace_s: float) -> None:
    pgid = process.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        process.poll()
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and process_group_alive(pgid):
        process.poll()
        time.sleep(0.1)
    if process_group_alive(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        while process_group_alive(pgid):
            process.poll()
            time.sleep(0.05)
    process.wait()


def pin(pid: int, cores: tuple[int, ...] | None) -> None:
    """Confine a just-started process (and the children it starts later) to `cores`."""
    if cores is None:
        return
    with contextlib.suppress(AttributeError, ProcessLookupError):
        os.sched_setaffinity(pid, cores)


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
