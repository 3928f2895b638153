"""An exact M/D/c FIFO queue: the stand-in server of known capacity that the capacity search
(``vllm_slo.stats.capacity_search``) is calibrated on (``tests/support/capacity_simulation.py``,
``benchmarks/capacity_calibration.py``).

The server has ``c`` slots; each request holds a slot for ``service_s`` (first token after
``first_token_s``, the rest decoding), deterministic; arrivals are Poisson at ``rate`` req/s,
served first in, first out. A run starts from an empty queue at t = 0, warms up for
``warmup_s`` (not measured), then measures the requests *sent* during the window
``[warmup_s, warmup_s + window_s)``; each runs to completion, its latency counted from its
intended send time: TTFT = wait + first_token_s, E2E = wait + service_s.

Exact and vectorised: with deterministic service, requests start in arrival order and end in
start order, so request i starts when it arrives or when request i - c ends, whichever is
later: ``start_i = max(a_i, start_{i-c} + s)``. The c interleaved chains (i mod c) are each a
max-plus recursion ``x_k = max(a_k, x_{k-1} + s)``, solved as
``x_k = k s + max_{j <= k} (a_j - j s)`` by a running maximum.

``true_crossing`` is the steady-state load at which a metric's percentile equals a threshold:
bisection in rate over one long simulation with common random numbers (the same unit-rate
inter-arrival draws scaled by 1 / rate, so every percentile of the wait is non-decreasing in
the rate and bisection is exact for that sample). ``KNOWN_CROSSINGS`` caches the values the
calibration uses (``benchmarks/capacity_calibration.py --crossings`` recomputes them at 20 M
requests; ``tests/unit/test_capacity_search.py`` checks them roughly on a shorter run).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# the stand-in of the capacity docs: 8 slots; TTFT 50 ms then 64 tokens at 10 ms
SLOTS = 8
FIRST_TOKEN_S = 0.05
SERVICE_S = 0.05 + 63 * 0.01  # 0.68 s

# (metric, percentile, threshold_s) -> steady-state crossing in req/s for SLOTS, SERVICE_S,
# FIRST_TOKEN_S: `true_crossing` on 20,000,000 requests after 200,000 warm-up ones, seed 0
# (benchmarks/capacity_calibration.py --crossings; its sampling error is < 0.01%)
KNOWN_CROSSINGS: dict[tuple[str, float, float], float] = {
    ("ttft", 90.0, 0.5): 9.8401,
    ("e2e", 99.0, 2.0): 10.2308,
    ("ttft", 50.0, 0.2): 10.5194,
}


@dataclass(frozen=True, slots=True)
class QueueRun:
    """The measured requests of one run, in send order (seconds; send times from t = 0, the
    start of the warm-up)."""

    send_s: np.ndarray
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    window_start_s: float
    window_s: float

    def latency(self, metric: str) -> np.ndarray:
        if metric == "ttft":
            return self.ttft_s
        if metric == "e2e":
            return self.e2e_s
        raise ValueError(f"unknown metric {metric!r} (ttft, e2e)")


def queue_waits(arrivals_s: np.ndarray, slots: int, service_s: float) -> np.ndarray:
    """Each request's wait for a slot (start - arrival), FIFO, from an empty queue."""
    arrivals = np.asarray(arrivals_s, dtype=np.float64)
    waits = np.empty_like(arrivals)
    for chain in range(min(slots, arrivals.size)):
        a = arrivals[chain::slots]
        steps = np.arange(a.size, dtype=np.float64) * service_s
        own = a - steps
        best = np.maximum.accumulate(own)
        # exactly 0 where the request finds a free slot (no rounding noise: a stand-in's TTFT
        # of exactly first_token_s ties, as the verdicts' effective sizes expect of a constant)
        waits[chain::slots] = np.where(best == own, 0.0, best - own)
    return waits


def poisson_arrivals(rng: np.random.Generator, rate: float, until_s: float) -> np.ndarray:
    """Poisson arrival times in [0, until_s)."""
    expected = rate * until_s
    count = int(expected + 8.0 * np.sqrt(expected) + 16)
    times = np.cumsum(rng.exponential(1.0 / rate, count))
    while times[-1] < until_s:  # practically never
        more = times[-1] + np.cumsum(rng.exponential(1.0 / rate, count))
        times = np.concatenate([times, more])
    return times[times < until_s]


def simulate_run(rng: np.random.Generator, rate: float, warmup_s: float, window_s: float,
                 slots: int = SLOTS, service_s: float = SERVICE_S,
                 first_token_s: float = FIRST_TOKEN_S) -> QueueRun:
    """One run: warm-up from an empty queue, then the requests sent in the window."""
    arrivals = poisson_arrivals(rng, rate, warmup_s + window_s)
    waits = queue_waits(arrivals, slots, service_s)
    measured = arrivals >= warmup_s
    wait = waits[measured]
    return QueueRun(arrivals[measured], wait + first_token_s, wait + service_s, warmup_s,
                    window_s)


def _offset(metric: str, service_s: float, first_token_s: float) -> float:
    if metric == "ttft":
        return first_token_s
    if metric == "e2e":
        return service_s
    raise ValueError(f"unknown metric {metric!r} (ttft, e2e)")


def true_crossing(percentile: float, threshold_s: float, metric: str = "ttft",
                  slots: int = SLOTS, service_s: float = SERVICE_S,
                  first_token_s: float = FIRST_TOKEN_S, requests: int = 20_000_000,
                  warmup_requests: int = 200_000, seed: int = 0,
                  rate_bounds: tuple[float, float] | None = None,
                  tolerance: float = 1e-5) -> float:
    """The steady-state rate at which `metric`'s `percentile` equals `threshold_s`: bisection
    in rate on one long run (common random numbers), the first `warmup_requests` dropped."""
    wait_threshold = threshold_s - _offset(metric, service_s, first_token_s)
    if wait_threshold <= 0:
        raise ValueError(f"{metric} is at least {_offset(metric, service_s, first_token_s)} s:"
                         f" no load meets {threshold_s} s")
    q = percentile / 100.0
    unit_gaps = np.random.default_rng(seed).exponential(1.0, requests + warmup_requests)
    unit_times = np.cumsum(unit_gaps)
    del unit_gaps
    capacity = slots / service_s

    def quantile_at(rate: float) -> float:
        waits = queue_waits(unit_times / rate, slots, service_s)[warmup_requests:]
        return float(np.quantile(waits, q))

    low, high = rate_bounds if rate_bounds is not None else (0.3 * capacity, capacity)
    if quantile_at(low) >= wait_threshold:
        raise ValueError(f"the quantile already exceeds the threshold at {low} req/s")
    if quantile_at(high) < wait_threshold:  # a slightly unstable queue still crosses
        raise ValueError(f"the quantile stays below the threshold at {high} req/s")
    while high / low - 1.0 > tolerance:
        middle = 0.5 * (low + high)
        if quantile_at(middle) < wait_threshold:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


def crossing(percentile: float, threshold_s: float, metric: str = "ttft") -> float:
    """The stand-in's crossing: cached (`KNOWN_CROSSINGS`) or computed at full length."""
    key = (metric, float(percentile), float(threshold_s))
    if key not in KNOWN_CROSSINGS:
        KNOWN_CROSSINGS[key] = true_crossing(percentile, threshold_s, metric)
    return KNOWN_CROSSINGS[key]
