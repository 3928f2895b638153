"""Diagnostic, off unless asked: where a Locust process's Python memory grows.

With `VLLM_SLO_TRACEMALLOC=FILE` in the environment of `vllm-slo run`, each Locust process
starts `tracemalloc`, takes a baseline snapshot `VLLM_SLO_TRACEMALLOC_AFTER_S` seconds after
its traffic starts (default 60) and then, every `VLLM_SLO_TRACEMALLOC_EVERY_S` seconds
(default 60), rewrites FILE.<pid> with the traced total and the allocation sites (12 frames)
that grew most since the baseline. tracemalloc slows every allocation (about 2x) and a
snapshot blocks the event loop while it is taken: use it in a soak, never in a measured run.
benchmarks/soak.py passes it through (`--tracemalloc FILE`).
"""

from __future__ import annotations

import linecache
import os
import time
import tracemalloc
from pathlib import Path

import gevent

ENV = "VLLM_SLO_TRACEMALLOC"
FRAMES = 12
TOP_SITES = 15


def growth_report(baseline: tracemalloc.Snapshot, now: tracemalloc.Snapshot,
                  elapsed_s: float) -> str:
    """The traced total and the sites that grew most between two snapshots, as text."""
    current, peak = tracemalloc.get_traced_memory()
    lines = [f"{elapsed_s:.0f} s after the baseline: traced {current / 2**20:.2f} MiB "
             f"(peak {peak / 2**20:.2f} MiB, this diagnostic's own allocations included)"]
    own = [tracemalloc.Filter(False, path) for path in (__file__, tracemalloc.__file__,
                                                         linecache.__file__)]
    for stat in now.filter_traces(own).compare_to(baseline.filter_traces(own),
                                                  "traceback")[:TOP_SITES]:
        lines.append(f"\n{stat.size_diff / 2**10:+.1f} KiB in {stat.count_diff:+d} blocks "
                     f"(now {stat.size / 2**10:.1f} KiB)")
        lines.extend(f"    {line}" for line in stat.traceback.format())
    return "\n".join(lines) + "\n"


def start_if_asked() -> None:
    """Called once the process's traffic starts; does nothing without VLLM_SLO_TRACEMALLOC."""
    target = os.environ.get(ENV)
    if not target:
        return
    path = Path(f"{target}.{os.getpid()}")
    after_s = float(os.environ.get(f"{ENV}_AFTER_S", "60"))
    every_s = float(os.environ.get(f"{ENV}_EVERY_S", "60"))
    tracemalloc.start(FRAMES)

    def watch() -> None:
        gevent.sleep(after_s)
        baseline, since = tracemalloc.take_snapshot(), time.monotonic()
        while True:
            gevent.sleep(every_s)
            report = growth_report(baseline, tracemalloc.take_snapshot(),
                                   time.monotonic() - since)
            path.write_text(report)

    gevent.spawn(watch)
