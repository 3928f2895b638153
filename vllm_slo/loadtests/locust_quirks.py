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
"""

from __future__ import annotations

import inspect
import sys
from types import FrameType, SimpleNamespace
from typing import Any


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


def install() -> None:
    import locust.runners

    # through the module's namespace: a stand-in object replaces the `inspect` module Locust
    # imported there, which an attribute assignment would (rightly) not type-check
    vars(locust.runners)["inspect"] = _NoSourceInspect()
