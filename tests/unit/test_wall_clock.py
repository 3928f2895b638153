"""The perf_counter → unix mapping the rows' timestamps go through."""

from __future__ import annotations

import itertools

import pytest

from vllm_slo.loadtests.wall_clock import WallClock, pair_clocks

TRUE_OFFSET_S = 1_700_000_000.0


class FakeClocks:
    """perf_counter advances by the listed steps; the wall clock is perf + TRUE_OFFSET_S at the
    moment it is read."""

    def __init__(self, steps_s: list[float]) -> None:
        self.now_s = 100.0
        self.steps = itertools.cycle(steps_s)

    def perf(self) -> float:
        self.now_s += next(self.steps)
        return self.now_s

    def unix(self) -> float:
        self.now_s += next(self.steps)
        return self.now_s + TRUE_OFFSET_S


def test_the_tightest_bracket_is_kept() -> None:
    """A read descheduled for 4 ms (the CI failure this replaces: one `time.time()` 4 ms away
    from its perf_counter) is outvoted by the tight ones."""
    # reads: perf, unix, perf per pairing; the first pairing's wall read comes 4 ms late
    clocks = FakeClocks([1e-6, 4e-3, 1e-6, 1e-6, 1e-6, 1e-6])
    pairing = pair_clocks(clocks.perf, clocks.unix, reads=2)
    assert pairing.bracket_s == pytest.approx(2e-6)
    assert abs(pairing.offset_s - TRUE_OFFSET_S) < 1e-6


def test_a_single_late_read_would_have_been_off_by_its_delay() -> None:
    """The failure the pairing prevents, shown with the same fake: one read, 4 ms late."""
    clocks = FakeClocks([1e-6, 4e-3, 1e-6])
    pairing = pair_clocks(clocks.perf, clocks.unix, reads=1)
    assert abs(pairing.offset_s - TRUE_OFFSET_S) > 1.9e-3  # the midpoint splits the delay


def test_unix_s_maps_readings_and_repairs_after_the_refresh_interval() -> None:
    clocks = FakeClocks([1e-6])
    wall = WallClock(clocks.perf, clocks.unix, refresh_after_s=5.0)
    first = wall.pairing
    assert wall.unix_s(first.paired_perf_s + 1.0) == pytest.approx(
        first.paired_perf_s + 1.0 + TRUE_OFFSET_S, abs=1e-5)
    assert wall.pairing is first  # within the interval: no new reads
    later_perf_s = first.paired_perf_s + 6.0
    clocks.now_s = later_perf_s
    assert wall.unix_s(later_perf_s) == pytest.approx(later_perf_s + TRUE_OFFSET_S, abs=1e-5)
    assert wall.pairing is not first and wall.pairing.paired_perf_s > first.paired_perf_s
