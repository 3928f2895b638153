"""Retrying a timing measurement against a known schedule.

CPU contention only ever delays a wake-up (a chunk read late, a gap after it short), never makes
anything early: so a measurement that misses its tolerance is repeated with fresh requests, and
one attempt of `attempts` must meet it. A wrong schedule misses every attempt."""

from __future__ import annotations

from collections.abc import Callable

ATTEMPTS = 5


def timed(measure: Callable[[], None], attempts: int = ATTEMPTS) -> None:
    """Run `measure` (which asserts); on an AssertionError repeat it, `attempts` runs in all."""
    for attempt in range(attempts):
        try:
            measure()
            return
        except AssertionError:
            if attempt == attempts - 1:
                raise
