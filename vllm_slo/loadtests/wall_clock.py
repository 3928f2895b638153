"""The wall-clock time of a perf_counter reading, for the rows' unix timestamps.

A row's latencies are perf_counter differences; its unix times place it on the run's timeline
(and next to other processes' clocks: the server's metrics, a stand-in's send log). Reading
`time.time()` next to the send and pairing it with the send's perf_counter would put the whole
row off by however long the process was descheduled between the two reads (milliseconds on a
busy host). Instead each process pairs the two clocks once in a while, keeping the pairing whose
bracket (perf_counter before and after the wall-clock read) was tightest, and maps every
perf_counter reading through it."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

REFRESH_AFTER_S = 5.0  # re-pair this often (follows NTP slewing the wall clock)
PAIRING_READS = 5  # bracketed reads per pairing; the tightest one is kept


@dataclass(frozen=True)
class ClockPairing:
    """unix_s = perf_s + offset_s, paired at `paired_perf_s`, within ± `bracket_s` / 2."""

    offset_s: float
    paired_perf_s: float
    bracket_s: float


def pair_clocks(perf: Callable[[], float] = time.perf_counter,
                unix: Callable[[], float] = time.time, reads: int = PAIRING_READS
                ) -> ClockPairing:
    """The offset between the two clocks from the tightest of `reads` bracketed reads."""
    best: ClockPairing | None = None
    for _ in range(reads):
        before = perf()
        wall = unix()
        after = perf()
        middle = (before + after) / 2.0
        pairing = ClockPairing(wall - middle, middle, after - before)
        if best is None or pairing.bracket_s < best.bracket_s:
            best = pairing
    assert best is not None
    return best


class WallClock:
    """Maps this process's perf_counter readings to unix seconds."""

    def __init__(self, perf: Callable[[], float] = time.perf_counter,
                 unix: Callable[[], float] = time.time,
                 refresh_after_s: float = REFRESH_AFTER_S) -> None:
        self._perf, self._unix = perf, unix
        self._refresh_after_s = refresh_after_s
        self.pairing = pair_clocks(perf, unix)

    def unix_s(self, perf_s: float) -> float:
        """The wall-clock time at which perf_counter read `perf_s`."""
        if perf_s - self.pairing.paired_perf_s > self._refresh_after_s:
            self.pairing = pair_clocks(self._perf, self._unix)
        return perf_s + self.pairing.offset_s
