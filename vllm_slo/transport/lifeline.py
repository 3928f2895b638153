"""The lifeline: a tiny watchdog between the suite and a process group it starts (a vLLM
server, Locust), so that the group dies with the suite however the suite dies, SIGKILL too.

    python -I lifeline.py --fd FD [--grace-s S] [--cores 0,1] -- PROGRAM ARG...

`vllm_slo.transport.processes.start_guarded` starts it as the leader of a new session; it
starts PROGRAM in its own process group and waits. The suite holds the write end of a pipe
whose read end is FD: when the suite ends, however it ends, the kernel closes that end and FD
reads EOF (the lifeline's parent pid changing is polled as a backstop, should the write end
have leaked into another process). The lifeline then SIGTERMs its whole group — PROGRAM and
every descendant in the group (vLLM's API server, EngineCore and workers; Locust's master
and `--processes` workers) — and SIGKILLs it, itself included, once the group is otherwise
empty or after the grace. On Linux PROGRAM also gets PR_SET_PDEATHSIG=SIGKILL, set from the
lifeline's only thread, should the lifeline itself be killed.

A signal sent to the group (the suite's own stop) is PROGRAM's to obey: the lifeline outlives
it and ends as PROGRAM ended (the same exit code, or the same signal), so the suite's
`Popen` sees PROGRAM's exit. Standard library only, and run with `-I` by its path: nothing in
the server's environment (PYTHONPATH, a broken site) can stop it from starting.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_S = 0.1  # how often PROGRAM's exit and the parent pid are checked between pipe events
EXEC_FAILED = 127  # PROGRAM could not be started (as a shell says)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def group_members(pgid: int, proc: Path = Path("/proc")) -> list[int] | None:
    """Live processes (zombies left out) of process group `pgid`, from /proc; None where
    there is no /proc to read (not Linux)."""
    if not (proc / "self" / "stat").exists():
        return None
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if fields[0] != "Z" and int(fields[2]) == pgid:  # state, ppid, pgrp
            members.append(int(entry.name))
    return members


def _libc_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


def death_signal_hook(signum: int) -> Callable[[], None] | None:
    """A `preexec_fn` that makes the kernel send `signum` to the new process when the thread
    that started it ends (PR_SET_PDEATHSIG), and ends the new process at once should that
    thread's process already be gone; None where there is no prctl (not Linux). libc is
    loaded here, before the fork."""
    prctl = _libc_prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the guard was set
            os.kill(os.getpid(), signum)

    return hook


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="lifeline", description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True, help="read end of the suite's pipe")
    parser.add_argument("--grace-s", type=float, default=3.0,
                        help="seconds between SIGTERM and SIGKILL once the suite is gone")
    parser.add_argument("--cores", default="", help="CPU cores for the group, e.g. 0,1")
    parser.add_argument("command", nargs="+", help="PROGRAM ARG... (after --)")
    return parser.parse_args(argv)


def _say(line: str) -> None:
    """One line to the group's log (the lifeline's stderr is PROGRAM's)."""
    print(f"vllm-slo lifeline (pid {os.getpid()}): {line}", file=sys.stderr, flush=True)


def end_group(child: subprocess.Popen[bytes], grace_s: float) -> None:
    """The suite is gone: SIGTERM this whole group (the lifeline's own handler lets it pass),
    wait until the rest of the group is gone or the grace ends, then SIGKILL it, this
    process included. Does not return."""
    pgid = os.getpgrp()
    os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        ended = child.poll() is not None
        others = group_members(pgid)
        if ended and (others is None or others == [os.getpid()]):
            break
        time.sleep(0.05)
    os.killpg(pgid, signal.SIGKILL)
    os._exit(EXEC_FAILED)  # not reached: SIGKILL above


def end_as(returncode: int) -> None:
    """Exit as PROGRAM did: its exit code, or death by its signal. Does not return."""
    if returncode < 0:
        if -returncode in STOP_SIGNALS:
            signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
        returncode = 128 - returncode  # a signal that does not end a process by default
    sys.stdout.flush()
    os._exit(returncode)


def suite_gone(fd: int, parent_pid: int, wait_s: float) -> bool:
    """Wait up to `wait_s` for the suite's end: its pipe at EOF, or this process re-parented."""
    readable, _, _ = select.select([fd], [], [], wait_s)
    if readable and not os.read(fd, 4096):
        return True
    return os.getppid() != parent_pid


def main(argv: Sequence[str]) -> int:
    options = parse(argv)
    parent_pid = os.getppid()
    if os.getpgrp() != os.getpid():  # never signal the group of whoever started us
        os.setpgid(0, 0)
    for signum in STOP_SIGNALS:  # the group's stop is PROGRAM's to obey; the lifeline waits
        signal.signal(signum, lambda *_: None)  # a handler, not SIG_IGN: reset by exec
    if options.cores:
        cores = {int(core) for core in options.cores.split(",")}
        try:  # before PROGRAM starts: it and every process it starts inherit the mask
            os.sched_setaffinity(0, cores)
        except (AttributeError, OSError) as error:
            _say(f"cores {options.cores} not applied: {error}")
    try:
        child = subprocess.Popen(options.command, preexec_fn=death_signal_hook(signal.SIGKILL))
    except OSError as error:
        _say(f"cannot start {options.command[0]!r}: {error}")
        return EXEC_FAILED
    while True:
        if suite_gone(options.fd, parent_pid, POLL_S):
            _say(f"the suite (pid {parent_pid}) ended or let go: stopping process group "
                 f"{os.getpgrp()} (SIGTERM, SIGKILL after {options.grace_s:g}s)")
            end_group(child, options.grace_s)
        returncode = child.poll()
        if returncode is not None:
            end_as(returncode)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
