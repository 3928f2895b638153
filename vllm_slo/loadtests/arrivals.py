"""Open-loop arrival schedules: intended send times, pre-sampled from a seed (pure, no I/O).

poisson: exponential gaps at `rate`; gamma: gamma gaps with shape = burstiness and mean 1/rate
(vLLM bench's definition: burstiness 1 is Poisson, < 1 burstier, > 1 more regular); constant:
evenly spaced; open-loop stages: Poisson at each stage's rate within the stage, the last stage
lasting until the end of the run; trace: the times the request plan carries (profile trace).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vllm_slo.scenarios.traffic_spec import ArrivalSpec

SCHEDULE_LEAD_S = 0.5  # open loop: time for the in-flight slots to spawn before arrival 0


def _gaps(rng: np.random.Generator, kind: str, rate: float, burstiness: float, count: int
          ) -> np.ndarray:
    if kind == "constant":
        return np.full(count, 1.0 / rate)
    if kind == "gamma":
        return rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=count)
    return rng.exponential(1.0 / rate, size=count)


def _segment(rng: np.random.Generator, kind: str, rate: float, burstiness: float,
             start_s: float, end_s: float) -> np.ndarray:
    """Arrival offsets in [start_s, end_s); the first arrival at start_s for constant."""
    span = end_s - start_s
    if span <= 0:
        return np.empty(0)
    expected = rate * span
    count = int(expected + 6.0 * np.sqrt(expected) + 16)
    while True:
        gaps = _gaps(rng, kind, rate, burstiness, count)
        if kind == "constant":
            times = start_s + np.concatenate([[0.0], np.cumsum(gaps[:-1])])
        else:
            times = start_s + np.cumsum(gaps)
        if times[-1] >= end_s:
            return times[times < end_s]
        count *= 2


def arrival_offsets_s(arrival: ArrivalSpec, total_s: float, seed: int) -> np.ndarray:
    """Sorted intended send offsets (seconds from the start of traffic) over [0, total_s)."""
    if not arrival.open_loop:
        raise ValueError(f"arrival kind {arrival.kind!r} is closed loop: no schedule")
    if arrival.kind == "trace":
        raise ValueError("arrival kind 'trace': the request plan carries the times "
                         "(schedule_offsets_s)")
    rng = np.random.default_rng([seed, 0xA11])
    if arrival.kind != "stages":
        assert arrival.rate is not None
        return _segment(rng, arrival.kind, arrival.rate, arrival.burstiness, 0.0, total_s)
    pieces = []
    start = 0.0
    for index, stage in enumerate(arrival.stages):
        last = index == len(arrival.stages) - 1
        end = total_s if last else min(total_s, start + stage.duration_s)
        assert stage.rate is not None
        pieces.append(_segment(rng, "poisson", stage.rate, 1.0, start, end))
        start = end
        if start >= total_s:
            break
    return np.concatenate(pieces) if pieces else np.empty(0)


def users_at(arrival: ArrivalSpec, elapsed_s: float) -> int:
    """Closed-loop stages: the user count in force `elapsed_s` into the run."""
    start = 0.0
    for stage in arrival.stages:
        start += stage.duration_s
        if elapsed_s < start:
            assert stage.users is not None
            return stage.users
    last = arrival.stages[-1].users
    assert last is not None
    return last


def schedule_offsets_s(arrival: ArrivalSpec, total_s: float, seed: int,
                       planned_s: Sequence[float | None]) -> np.ndarray:
    """An open loop's send offsets: kind trace's are the plan's own (`planned_s`, one per
    request, in plan order), every other kind's are sampled (`arrival_offsets_s`)."""
    if arrival.kind != "trace":
        return arrival_offsets_s(arrival, total_s, seed)
    if any(offset is None for offset in planned_s):
        raise ValueError("arrival kind 'trace' needs a plan whose requests carry their times "
                         "(profile: trace)")
    return np.asarray(planned_s, dtype=float)
