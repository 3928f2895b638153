"""Workarounds for Locust behaviours that distort measurements; `install()` runs once, from
the locustfile, in every Locust process.

Runner.stop() names its caller in a debug line, `inspect.getframeinfo(inspect.stack()[1][0])`,
before it stops a single user. `inspect.stack()` reads the source of every frame on the stack
(and, the first time, maps every loaded module to its file): 96 ms, then 35 ms, with the
suite's ~800 modules loaded on this 2-core box. The event loop is blocked meanwhile while the
users' requests are still streaming (they are given `stop_timeout` to finish), so each of
their next chunks was stamped up to ~100 ms late: the last requests of an open-loop run read
TTFTs 32-67 ms above the server's, and every run end added one inflated gap per stream to the
ITL series. Locust's `runners` module gets an `inspect` whose `stack()` only walks the frame
chain and whose `getframeinfo()` reads no source; everything else is the real module.

A `--processes` (or remote-worker) master, at `--run-time`, sends its workers "quit" and
exits its own loop 0.5 s later; its atexit hook then gives the worker processes 3 s and sends
them SIGINT. The workers are meanwhile letting their users finish the requests in flight
(`--stop-timeout`), so every request that outlasted the window's end by more than ~3 s was cut
and its row lost (H200, max-num-seqs 64 under 256 users: 192 requests sent inside the window
were still queued; the suite stopped the server under them). The master now waits, up to
`stop_timeout` + `WORKER_QUIT_GRACE_S`, for each worker to report that it quit (a worker says
so once its users are done and its rows are written; one that died is marked missing by the
master's heartbeat) before it exits.

A worker handles each spawn message by rebuilding Locust's whole argument parser once per
option the master sent (`argument_parser.default_args_dict()` in a comprehension's condition,
~60 builds of 5-10 ms): its test_start and first sends came 0.33 s after the master's start on
a quiet 2-core box, 0.61 s in CI, past a side-by-side round's start gate. The defaults cannot
change within a process: they are built once.
"""

from __future__ import annotations

import functools
import inspect
import sys
import time
from types import FrameType, SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from locust.runners import MasterRunner


class _NoSourceInspect:
    """`inspect` for locust.runners: frames without their source lines."""

    @staticmethod
    def stack(context: int = 1) -> list[tuple[FrameType]]:
        frames = []
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            frames.append((frame,))
            frame = frame.f_back
        return frames

    @staticmethod
    def getframeinfo(frame: FrameType, context: int = 1) -> SimpleNamespace:
        return SimpleNamespace(filename=frame.f_code.co_filename, lineno=frame.f_lineno,
                               function=frame.f_code.co_name, code_context=None, index=None)

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)


WORKER_QUIT_GRACE_S = 10.0  # beyond stop_timeout: a worker's last flush and its goodbye


def _quit_when_workers_have(runner: MasterRunner) -> None:
    """`MasterRunner.quit`, except that it returns only once every worker has said it quit
    (or `stop_timeout` + `WORKER_QUIT_GRACE_S` passed): Locust's own waits 0.5 s."""
    import gevent
    from locust.rpc import Message
    from locust.runners import STATE_MISSING

    runner.stop(send_stop_to_client=False)
    for client in runner.clients.all:
        runner.server.send_to_client(Message("quit", None, client.id))  # type: ignore[no-untyped-call]
    deadline = time.monotonic() + (runner.environment.stop_timeout or 0.0) + WORKER_QUIT_GRACE_S
    # the master's listener removes each worker as its "quit" arrives; its heartbeat marks one
    # that died without a word missing
    while (any(client.state != STATE_MISSING for client in runner.clients.all)
           and time.monotonic() < deadline):
        gevent.sleep(0.1)
    gevent.sleep(0.5)  # Locust's own wait for the workers' final stats
    runner.greenlet.kill(block=True)


def install() -> None:
    import locust.runners
    from locust import argument_parser

    built_once = functools.cache(argument_parser.default_args_dict)  # on first use only
    argument_parser.default_args_dict = lambda: dict(built_once())

    # through the module's namespace: a stand-in object replaces the `inspect` module Locust
    # imported there, which an attribute assignment would (rightly) not type-check
    vars(locust.runners)["inspect"] = _NoSourceInspect()
    locust.runners.MasterRunner.quit = _quit_when_workers_have  # type: ignore[method-assign,assignment]
