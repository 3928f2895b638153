"""The load generator watching itself (issue 14, part 3): one `ClientMonitor` per Locust
process, imported by the locustfiles only (it runs greenlets).

- **Event-loop lag**: a greenlet sleeps `LAG_INTERVAL_S` again and again and records how late
  it woke (`wake - (sleep start + interval)`). Every greenlet of the process (the users' socket
  reads and their timestamps included) waits as long as this timer, so its lateness is the
  delay added to every timestamp the process takes: CPU saturation, a long pure-Python
  stretch (JSON parsing, row building, a flush) or the OS preempting the process all show.
- **In flight**: users call `in_flight.enter()` / `leave()` around each streamed request; the
  gauge integrates the count over time (time-weighted mean, min and max of each second).
- **Chunk-read lag**: socket reads and SSE events of the second (`servers.http_stream`
  `READ_COUNTERS`); events per read far above 1 means chunks waited in the socket buffer.
- **CPU**: process CPU seconds per wall second (a process near 1.0 is saturated).
- **GC pauses**: the cyclic collector's runs (`gc.callbacks`), each one a pause of every
  greenlet of the process: their count, total and longest duration in the second. A TTFT or
  ITL tail the size of the longest pause points at the collector.

Once a second `record()` returns the second's numbers as one JSON-ready dict, appended as a
line to `samples/client-<host>-<pid>.jsonl` (vllm_slo/reports/client_records.py reads it back;
vllm_slo/analysis/client_health.py judges it). Loop-lag samples of the second are also kept as
a sparse quarter-octave histogram (`loop_lag_hist`: bucket -> count) so a run's percentiles
are pooled exactly up to the bucket width (19%), not averaged from per-second percentiles.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import time
from collections.abc import Callable

import gevent
import numpy as np

from vllm_slo.transport.http_stream import READ_COUNTERS, ReadCounters

LAG_INTERVAL_S = 0.010  # the lag timer's sleep: ~100 samples a second, ~1% of a core (5 ms: 2%)
LAG_BUCKETS_PER_OCTAVE = 4
LAG_BUCKET_FLOOR_S = 1e-6  # lags below 1 µs share bucket 0


def lag_bucket(lag_s: float) -> int:
    """Quarter-octave bucket of a lag: k covers [1 µs * 2^(k/4), 1 µs * 2^((k+1)/4))."""
    if lag_s <= LAG_BUCKET_FLOOR_S:
        return 0
    return math.floor(LAG_BUCKETS_PER_OCTAVE * math.log2(lag_s / LAG_BUCKET_FLOOR_S))


def lag_bucket_upper_s(bucket: int) -> float:
    """The upper edge of a bucket (a pooled percentile is reported as its bucket's upper
    edge: never below the true value)."""
    # float() for the type only: typeshed types float ** float as Any (it may be complex)
    return float(LAG_BUCKET_FLOOR_S * 2.0 ** ((bucket + 1) / LAG_BUCKETS_PER_OCTAVE))


class InFlightGauge:
    """Requests in flight in this process, integrated over time between `take()` calls."""

    __slots__ = ("_area", "_clock", "_last", "_max", "_min", "_since", "count")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.count = 0
        now = clock()
        self._since = self._last = now
        self._area = 0.0
        self._min = self._max = 0

    def _advance(self) -> None:
        now = self._clock()
        self._area += self.count * (now - self._last)
        self._last = now

    def enter(self) -> None:
        self._advance()
        self.count += 1
        self._max = max(self._max, self.count)

    def leave(self) -> None:
        self._advance()
        self.count -= 1
        self._min = min(self._min, self.count)

    def take(self) -> tuple[float, int, int]:
        """(time-weighted mean, min, max) since the previous take; starts the next period."""
        self._advance()
        elapsed = self._last - self._since
        mean = self._area / elapsed if elapsed > 0 else float(self.count)
        result = (mean, self._min, self._max)
        self._since, self._area = self._last, 0.0
        self._min = self._max = self.count
        return result


def lag_summary(lags_s: list[float]) -> dict[str, object]:
    """One second's loop-lag samples as record fields (percentiles and histogram)."""
    if not lags_s:  # the timer never woke: the whole second was one stall
        return {"loop_lag_samples": 0, "loop_lag_p50_s": None, "loop_lag_p99_s": None,
                "loop_lag_max_s": None, "loop_lag_hist": {}}
    values = np.asarray(lags_s)
    hist: dict[str, int] = {}
    for lag in lags_s:
        key = str(lag_bucket(lag))
        hist[key] = hist.get(key, 0) + 1
    return {"loop_lag_samples": int(values.size),
            "loop_lag_p50_s": round(float(np.percentile(values, 50)), 7),
            "loop_lag_p99_s": round(float(np.percentile(values, 99)), 7),
            "loop_lag_max_s": round(float(values.max()), 7),
            "loop_lag_hist": hist}


class GcPauses:
    """The cyclic collector's pauses in this process, from `gc.callbacks` (start/stop)."""

    __slots__ = ("_clock", "_started", "count", "longest_s", "total_s")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._started: float | None = None
        self.count, self.total_s, self.longest_s = 0, 0.0, 0.0

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = self._clock()
        elif self._started is not None:
            pause_s = self._clock() - self._started
            self._started = None
            self.count += 1
            self.total_s += pause_s
            self.longest_s = max(self.longest_s, pause_s)

    def take(self) -> dict[str, object]:
        """The period's pauses as record fields; starts the next period."""
        fields: dict[str, object] = {"gc_pauses": self.count,
                                     "gc_pause_total_s": round(self.total_s, 7),
                                     "gc_pause_max_s": round(self.longest_s, 7)}
        self.count, self.total_s, self.longest_s = 0, 0.0, 0.0
        return fields


class ClientMonitor:
    """Self-monitoring state of one Locust process (see the module docstring)."""

    def __init__(self, counters: ReadCounters = READ_COUNTERS,
                 interval_s: float = LAG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.counters = counters
        self.in_flight = InFlightGauge()
        self.gc_pauses = GcPauses()
        self._lags: list[float] = []
        self._sampler: gevent.Greenlet | None = None
        self._last_wall = time.perf_counter()
        self._last_cpu = time.process_time()
        self._last_reads = counters.socket_reads
        self._last_events = counters.sse_events

    def start(self) -> None:
        if self._sampler is None:
            self._sampler = gevent.spawn(self._sample_forever)
            gc.callbacks.append(self.gc_pauses.callback)

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.kill(block=False)
            self._sampler = None
            with contextlib.suppress(ValueError):
                gc.callbacks.remove(self.gc_pauses.callback)

    def _sample_forever(self) -> None:
        interval, lags, clock = self.interval_s, self._lags, time.perf_counter
        while True:
            before = clock()
            gevent.sleep(interval)
            lags.append(max(0.0, clock() - before - interval))

    def record(self) -> dict[str, object]:
        """The numbers of the period since the previous record (about a second)."""
        wall, cpu = time.perf_counter(), time.process_time()
        elapsed = max(wall - self._last_wall, 1e-9)
        lags, self._lags[:] = list(self._lags), []
        reads = self.counters.socket_reads - self._last_reads
        events = self.counters.sse_events - self._last_events
        mean, low, high = self.in_flight.take()
        record: dict[str, object] = {
            "unix_s": time.time(), "process_id": os.getpid(),
            "interval_s": round(elapsed, 6),
            "cpu_fraction": round((cpu - self._last_cpu) / elapsed, 4),
            **lag_summary(lags),
            "socket_reads": reads, "sse_events": events,
            "in_flight_mean": round(mean, 4), "in_flight_min": low, "in_flight_max": high,
            **self.gc_pauses.take(),
        }
        self._last_wall, self._last_cpu = wall, cpu
        self._last_reads, self._last_events = self.counters.socket_reads, self.counters.sse_events
        return record
