"""OS processes the suite starts (a vLLM server's group, Locust's): whole process groups
stopped and probed, CPU affinity, a free loopback port."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from typing import Any


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
