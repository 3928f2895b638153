"""Was the load generator the bottleneck? (pure; no file access). docs/measurement.md
and docs/reports.md "Client health" state the criterion and why.

From the measured window's rows:
- **achieved concurrency**: requests in flight (every row's [actual send, end], failed ones
  too), time-weighted mean / min / max over the window, against the users asked for;
- closed loop, **busy users**: a user is busy while its request is in flight or while it
  thinks (`think_time` is deliberate idleness), i.e. over [send, min(end + think, next send)];
  the time-weighted mean of busy users / users is the **busy share**: the part of the asked-for
  load the client actually held. 1 − busy share is time the users sat idle because the client
  had not re-sent yet (parsing the finished response, building its row, a late timer, a
  starved process);
- closed loop, **re-send gap** per user: next send − previous end − think time, p50/p99/max.

An agent run's sessions (`analysis/sessions.agent_waits`) add deliberate waits: a tool's
latency between turns, counted like think time, and a session's wait on its sub-agents
(`fan_out`), from the fan-out turn's end to the last sub-agent's end. Sub-agents run
concurrently inside their user, so requests in flight may exceed the users: the busy share
counts each user once (its own chain of requests and waits, which spans its sub-agents), the
in-flight count counts every request; re-send gaps are taken within each chain (a sub-agent's
next turn after its previous one, the join after the last sub-agent).

From the self-monitor's records (vllm_slo/loadtests/client_monitor.py, one per process-second):
event-loop lag (pooled from per-second quarter-octave histograms, so a percentile is exact to
the bucket's upper edge), CPU per worker, socket reads and SSE events (events per read ≫ 1:
chunks waited in the socket buffer for a late read), and from the rows content chunks per
output token.

The measured window for this judgement is [first send of a measured row, last one − 1 s]:
the run's last second belongs to its stop (Locust stopping users: measured stalls there), and
ramp-up belongs to warm-up, so in closed loop the window starts no earlier than the last
user's first send.

**Criterion** (a run driven by the suite's own monitored Locust processes; imported results
carry no monitor records and are never judged): the measurement is invalid (exit 4) when
- closed loop (`arrival.kind: closed`): busy share < `traffic.min_held_concurrency` (not
  judged when the server was unreachable or stalled: its users waited on the server), or
- any kind: the worst process's loop-lag p99 > `traffic.max_loop_lag_p99`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vllm_slo.serialise import derive, json_field

LAG_BUCKETS_PER_OCTAVE = 4  # vllm_slo/loadtests/client_monitor.py writes these buckets
LAG_BUCKET_FLOOR_S = 1e-6


def _finite(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeWeighted:
    """A count over time (requests in flight, busy users): time-weighted mean, min and max."""

    mean: float
    min: int
    max: int


def time_weighted_count(starts: np.ndarray, ends: np.ndarray, window_start: float,
                        window_end: float) -> TimeWeighted | None:
    """The number of intervals [start, end) covering each instant of the window: its
    time-weighted mean, and its min and max over instants (segments of positive length).
    None for an empty window."""
    span = window_end - window_start
    if not span > 0:
        return None
    starts = np.clip(np.asarray(starts, dtype=np.float64), window_start, window_end)
    ends = np.clip(np.asarray(ends, dtype=np.float64), window_start, window_end)
    keep = np.isfinite(starts) & np.isfinite(ends) & (ends > starts)
    starts, ends = starts[keep], ends[keep]
    mean = float((ends - starts).sum() / span)
    times = np.concatenate([[window_start], starts, ends])
    steps = np.concatenate([[0], np.ones(starts.size, dtype=np.int64),
                            -np.ones(ends.size, dtype=np.int64)])
    order = np.argsort(times, kind="stable")
    times, counts = times[order], np.cumsum(steps[order])
    lengths = np.diff(np.append(times, window_end))
    held = counts[lengths > 0]
    if held.size == 0:
        return TimeWeighted(mean=mean, min=0, max=0)
    return TimeWeighted(mean=mean, min=int(held.min()), max=int(held.max()))


@dataclass(frozen=True, slots=True, kw_only=True)
class Concurrency:
    """Achieved concurrency over the judged window (see the module docstring)."""

    window_start_unix_s: float
    window_s: float
    ramp_in_window_s: float  # closed loop: measured-window time before the last user started
    target_users: int | None  # closed loop (constant users); None: open loop or stages
    think_time_s: float
    in_flight: TimeWeighted
    in_flight_share: float | None = field(init=False)  # mean in flight / target_users
    busy: TimeWeighted | None  # closed loop only
    busy_share: float | None = field(init=False)  # mean busy users / target_users
    resend_gaps: int
    resend_gap_p50_s: float | None
    resend_gap_p99_s: float | None
    resend_gap_max_s: float | None

    def __post_init__(self) -> None:
        users = self.target_users
        derive(self, in_flight_share=None if not users else _finite(self.in_flight.mean / users),
               busy_share=(None if not users or self.busy is None
                           else _finite(self.busy.mean / users)))


def float_column(table: pa.Table, name: str) -> np.ndarray:
    """A samples column as float64 (nulls NaN); all NaN when the table has no such column
    (rows written by an older schema)."""
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def request_intervals(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Each row's [actual send, end of response] in Unix seconds (end = intended send + E2E; a
    row without E2E ends at its send)."""
    send = float_column(table, "send_unix_s")
    intended = float_column(table, "intended_send_unix_s")
    send = np.where(np.isfinite(send), send, intended)
    end = intended + float_column(table, "e2e_s")
    return send, np.where(np.isfinite(end), np.maximum(end, send), send)


STOP_GUARD_S = 1.0  # the run's last second before its last measured send: the stop's


def judged_window(table: pa.Table) -> tuple[float, float] | None:
    """[first actual send of a measured row, last one − STOP_GUARD_S] (None without two
    distinct sends). The measured window ends when Locust stops the users (cool-down 0): in the
    last second the processes are busy stopping (both workers of a 2-process run were measured
    stalling 200 ms together there), which is the end of the run, not the measurement; a window
    shorter than twice the guard is judged whole."""
    measured = _measured(table)
    send, _ = request_intervals(table)
    sends = send[measured & np.isfinite(send)]
    if sends.size < 2 or not sends.max() > sends.min():
        return None
    first, last = float(sends.min()), float(sends.max())
    if last - first >= 2 * STOP_GUARD_S:
        last -= STOP_GUARD_S
    return first, last


def _user_keys(table: pa.Table) -> np.ndarray | None:
    """One integer per row naming its user (process and user id); None when rows carry no user
    ids (imported results); -1 for a row without one."""
    if "user_id" not in table.column_names or table.column("user_id").null_count == table.num_rows:
        return None
    users = table.column("user_id")
    known = np.asarray(pc.is_valid(users).to_numpy(zero_copy_only=False), dtype=bool)
    user = np.asarray(users.fill_null(0).to_numpy(), dtype=np.int64)
    process = np.asarray(table.column("process_id").to_numpy(), dtype=np.int64)
    return np.where(known, (process << 32) + (user & 0xFFFFFFFF), -1)


def _measured(table: pa.Table) -> np.ndarray:
    return np.asarray(pc.equal(table.column("phase"), "measure").fill_null(False)
                      .to_numpy(zero_copy_only=False), dtype=bool)


def deliberate_pauses_s(table: pa.Table, think_time_s: float,
                        retry_after_max_s: float | None,
                        session_pauses_s: np.ndarray | None = None) -> np.ndarray:
    """Closed loop: the idleness each row's user chose after it, per row: the think time (or,
    where `session_pauses_s` is not NaN, that wait instead: an agent session's tool latency
    before its next turn), plus the server's Retry-After (at most `retry_after_max_s`) when
    users honour it (None: they ignore it)."""
    pauses = np.full(table.num_rows, think_time_s)
    if session_pauses_s is not None:
        pauses = np.where(np.isnan(session_pauses_s), pauses, session_pauses_s)
    if retry_after_max_s is not None and "retry_after_s" in table.column_names:
        asked = np.nan_to_num(float_column(table, "retry_after_s"), nan=0.0)
        pauses += np.clip(asked, 0.0, retry_after_max_s)
    return pauses


def achieved_concurrency(table: pa.Table, target_users: int | None, think_time_s: float,
                         closed_loop: bool, retry_after_max_s: float | None = None,
                         session_pauses_s: np.ndarray | None = None,
                         session_chains: np.ndarray | None = None) -> Concurrency | None:
    """Achieved concurrency of a run's rows (every phase given: requests of the warm-up still
    in flight inside the window count); None when the window is empty. Closed loop: a ramp-up
    that reaches into the measured window (warm-up shorter than users / spawn_rate) is cut off:
    the judged window starts once the last user has sent its first request. A user that waits
    out a Retry-After it honours (`retry_after_max_s`) is busy meanwhile, as when it thinks.
    `session_chains` (an agent run's, `analysis.sessions.AgentWaits`): per row, 0 for its
    user's own chain, another number per sub-agent; busy users count chain 0 only, re-send
    gaps are taken within each chain."""
    window = judged_window(table)
    if window is None:
        return None
    start, end = window
    send, finish = request_intervals(table)
    keys = _user_keys(table) if closed_loop else None
    ramp_s = 0.0
    if keys is not None:
        known = keys >= 0
        order = np.lexsort((send[known], keys[known]))
        first = np.r_[True, np.diff(keys[known][order]) != 0]
        ramp_end = float(send[known][order][first].max())
        if ramp_end > start:
            ramp_s, start = min(ramp_end, end) - start, min(ramp_end, end)
    if not end > start:
        return None
    in_flight = time_weighted_count(send, finish, start, end)
    assert in_flight is not None
    busy = None
    gaps = np.empty(0)
    if closed_loop:
        pauses = deliberate_pauses_s(table, think_time_s, retry_after_max_s, session_pauses_s)
        busy_end = finish + pauses
        chains = (np.zeros(table.num_rows, dtype=np.int64) if session_chains is None
                  else np.asarray(session_chains, dtype=np.int64))
        if keys is not None:
            order = np.lexsort((send, chains, keys))
            k, c, s, f, pause = (keys[order], chains[order], send[order], finish[order],
                                 pauses[order])
            same_user = (k[1:] == k[:-1]) & (c[1:] == c[:-1]) & (k[1:] >= 0)
            nxt = np.flatnonzero(same_user)
            busy_sorted = f + pause
            busy_sorted[nxt] = np.maximum(np.minimum(busy_sorted[nxt], s[nxt + 1]), s[nxt])
            busy_end = np.empty_like(busy_sorted)
            busy_end[order] = busy_sorted
            next_send = s[nxt + 1]
            inside = (next_send >= start) & (next_send <= end)
            gaps = (next_send - f[nxt] - pause[nxt])[inside]
        own = chains == 0  # a user's sub-agents run inside its own chain's span
        busy = time_weighted_count(send[own], busy_end[own], start, end)
    gaps = gaps[np.isfinite(gaps)]

    def gap(q: float) -> float | None:
        return float(np.percentile(gaps, q)) if gaps.size else None

    return Concurrency(
        window_start_unix_s=start, window_s=end - start, ramp_in_window_s=ramp_s,
        target_users=target_users if closed_loop else None, think_time_s=think_time_s,
        in_flight=in_flight, busy=busy, resend_gaps=int(gaps.size),
        resend_gap_p50_s=gap(50), resend_gap_p99_s=gap(99),
        resend_gap_max_s=float(gaps.max()) if gaps.size else None)


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopLag:
    """Event-loop lag (how late a short timer woke), pooled over the window's seconds."""

    p50_s: float
    p99_s: float
    max_s: float
    samples: int


def lag_bucket_upper_s(bucket: int) -> float:
    # float() for the type only: typeshed types float ** float as Any (it may be complex)
    return float(LAG_BUCKET_FLOOR_S * 2.0 ** ((bucket + 1) / LAG_BUCKETS_PER_OCTAVE))


def pooled_loop_lag(records: Sequence[Mapping[str, Any]]) -> LoopLag | None:
    """Percentiles of the lag samples of all records, from their histograms (a percentile is
    its bucket's upper edge, within 19% above the true value); max is exact."""
    counts: dict[int, int] = {}
    maxima = []
    for record in records:
        hist = record.get("loop_lag_hist")
        if not isinstance(hist, Mapping):
            continue
        for bucket, count in hist.items():
            counts[int(bucket)] = counts.get(int(bucket), 0) + int(count)
        if isinstance(record.get("loop_lag_max_s"), (int, float)):
            maxima.append(float(record["loop_lag_max_s"]))
    total = sum(counts.values())
    if total == 0:
        return None
    buckets = sorted(counts)
    cumulative = np.cumsum([counts[b] for b in buckets])

    def percentile(q: float) -> float:
        index = int(np.searchsorted(cumulative, q / 100.0 * total, side="left"))
        return lag_bucket_upper_s(buckets[min(index, len(buckets) - 1)])

    return LoopLag(p50_s=percentile(50), p99_s=percentile(99),
                   max_s=max(maxima, default=percentile(100)), samples=int(total))


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerHealth:
    """One Locust process over the window: CPU (fraction of a core per second), its loop lag,
    and its socket reads / SSE events."""

    process_id: int
    seconds: int
    cpu_p50: float | None
    cpu_max: float | None
    loop_lag: LoopLag | None
    socket_reads: int
    sse_events: int
    gc: GcSummary | None = None  # None: records without GC fields (older runs)


@dataclass(frozen=True, slots=True, kw_only=True)
class GcSummary:
    """The cyclic collector's pauses in one Locust process over the window."""

    pauses: int
    total_s: float
    max_s: float


def gc_summary(records: Sequence[Mapping[str, Any]]) -> GcSummary | None:
    with_gc = [r for r in records if isinstance(r.get("gc_pauses"), int)]
    if not with_gc:
        return None
    return GcSummary(pauses=sum(int(r["gc_pauses"]) for r in with_gc),
                     total_s=round(sum(float(r["gc_pause_total_s"]) for r in with_gc), 7),
                     max_s=max(float(r["gc_pause_max_s"]) for r in with_gc))


def records_in_window(records: Sequence[Mapping[str, Any]], start: float, end: float
                      ) -> list[Mapping[str, Any]]:
    """Monitor records whose second lies in the window (its midpoint, `unix_s` minus half its
    interval, inside [start, end])."""
    kept = []
    for record in records:
        unix_s = record.get("unix_s")
        if not isinstance(unix_s, (int, float)):
            continue
        middle = float(unix_s) - 0.5 * float(record.get("interval_s") or 1.0)
        if start <= middle <= end:
            kept.append(record)
    return kept


def worker_health(records: Sequence[Mapping[str, Any]]) -> tuple[WorkerHealth, ...]:
    by_process: dict[int, list[Mapping[str, Any]]] = {}
    for record in records:
        by_process.setdefault(int(record.get("process_id") or 0), []).append(record)
    workers = []
    for process_id, mine in sorted(by_process.items()):
        cpu = np.asarray([float(r["cpu_fraction"]) for r in mine
                          if isinstance(r.get("cpu_fraction"), (int, float))])
        workers.append(WorkerHealth(
            process_id=process_id, seconds=len(mine),
            cpu_p50=float(np.percentile(cpu, 50)) if cpu.size else None,
            cpu_max=float(cpu.max()) if cpu.size else None,
            loop_lag=pooled_loop_lag(mine),
            socket_reads=sum(int(r.get("socket_reads") or 0) for r in mine),
            sse_events=sum(int(r.get("sse_events") or 0) for r in mine),
            gc=gc_summary(mine)))
    return tuple(workers)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientHealth:
    """The load generator's own health over the judged window, and the criterion's verdict:
    `reasons` is non-empty exactly when the client was the bottleneck."""

    healthy: bool = field(init=False)  # no reason
    reasons: tuple[str, ...]
    max_loop_lag_p99_s: float = json_field(group="criterion")
    min_held_concurrency: float = json_field(group="criterion")
    # the suite's own Locust processes recorded themselves (not an import)
    monitored: bool = json_field(group="criterion", init=False)
    concurrency: Concurrency | None
    loop_lag: LoopLag | None  # all workers pooled
    events_per_read: float | None = field(init=False)  # SSE events / socket reads, all workers
    chunks_per_token: float | None  # content chunks / output tokens, successful measured rows
    workers: tuple[WorkerHealth, ...]

    def __post_init__(self) -> None:
        reads = sum(worker.socket_reads for worker in self.workers)
        events = sum(worker.sse_events for worker in self.workers)
        derive(self, healthy=not self.reasons,
               monitored=any(worker.loop_lag is not None for worker in self.workers),
               events_per_read=_finite(events / reads) if reads else None)

    @property
    def worst_loop_lag(self) -> WorkerHealth | None:
        lagged = [w for w in self.workers if w.loop_lag is not None]
        return max(lagged, key=_loop_lag_p99_s) if lagged else None


def chunks_per_token(table: pa.Table) -> float | None:
    measured = _measured(table)
    ok = np.asarray(table.column("ok").to_numpy(zero_copy_only=False), dtype=bool)
    good = measured & ok
    chunks = np.diff(table.column("chunk_offsets_s").combine_chunks().offsets.to_numpy())
    tokens = float_column(table, "output_tokens")
    use = good & np.isfinite(tokens)
    total = float(tokens[use].sum())
    return float(chunks[use].sum()) / total if total > 0 else None


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.1f} ms"


def _loop_lag_p99_s(worker: WorkerHealth) -> float:
    """The key that picks the worst-lagged worker, among those that recorded a loop lag."""
    assert worker.loop_lag is not None
    return worker.loop_lag.p99_s


SATURATED_CPU = 0.5  # a process busy at least half of a core was slowed by its own work


def _remedy(lagged: Sequence[WorkerHealth], workers: int) -> str:
    """What to do: a process busy with its own work needs company (more workers); one that sat
    mostly idle while its timer was late was descheduled (the host's CPU went elsewhere)."""
    busiest = max((w.cpu_p50 for w in lagged if w.cpu_p50 is not None), default=None)
    if busiest is not None and busiest < SATURATED_CPU:
        return (f"the load generator was descheduled (its busiest process used {busiest:.0%} of "
                f"a core: the host's CPU went to the server or other processes); give it cores "
                f"of its own (a less loaded host, fewer server threads), then more "
                f"traffic.workers (this run had {workers})")
    return (f"the load generator was the bottleneck; use more traffic.workers "
            f"(this run had {workers})")


def health_reasons(concurrency: Concurrency | None, workers: Sequence[WorkerHealth],
                   max_loop_lag_p99_s: float, min_held_concurrency: float,
                   server_gone: bool = False) -> tuple[str, ...]:
    """The criterion (module docstring); each reason names the numbers and the remedy.
    `server_gone`: the server was unreachable or stalled in the run; its users then waited on
    it (backing off, or on streams that sent nothing), so a low busy share is the server's
    absence, already a reason of its own, not the client's limit (whose remedy, more
    workers, would be wrong). The loop-lag criterion is the client's own and still holds."""
    lagged = [w for w in workers if w.loop_lag is not None]
    if not lagged:  # not monitored: imported results, or a run from before the monitor
        return ()
    remedy = _remedy(lagged, len(workers))
    reasons = []
    share = None if concurrency is None else concurrency.busy_share
    if share is not None and share < min_held_concurrency and not server_gone:
        assert concurrency is not None and concurrency.busy is not None
        reasons.append(
            f"client-limited: users were busy (in flight or thinking) {share:.1%} of the "
            f"measured window, below traffic.min_held_concurrency {min_held_concurrency:.0%} "
            f"({concurrency.busy.mean:.2f} of {concurrency.target_users} users on average, "
            f"{concurrency.in_flight.mean:.2f} requests in flight; re-send gap beyond think "
            f"time p50 {_ms(concurrency.resend_gap_p50_s)}, p99 "
            f"{_ms(concurrency.resend_gap_p99_s)}); {remedy}")
    worst = max(lagged, key=_loop_lag_p99_s)
    assert worst.loop_lag is not None
    if worst.loop_lag.p99_s > max_loop_lag_p99_s:
        cpu = "" if worst.cpu_p50 is None else f", CPU p50 {worst.cpu_p50:.0%} of a core"
        reasons.append(
            f"client-limited: event-loop lag p99 {_ms(worst.loop_lag.p99_s)} in Locust process "
            f"{worst.process_id} (max {_ms(worst.loop_lag.max_s)}{cpu}) exceeds "
            f"traffic.max_loop_lag_p99 {_ms(max_loop_lag_p99_s)}: its timestamps were late "
            f"by that much; {remedy}")
    return tuple(reasons)


def client_health(table: pa.Table, records: Sequence[Mapping[str, Any]], *,
                  closed_loop: bool, target_users: int | None, think_time_s: float,
                  max_loop_lag_p99_s: float, min_held_concurrency: float,
                  retry_after_max_s: float | None = None,
                  server_gone: bool = False,
                  session_pauses_s: np.ndarray | None = None,
                  session_chains: np.ndarray | None = None) -> ClientHealth:
    """The whole judgement from a run's rows (all phases) and its monitor records;
    `server_gone`: see `health_reasons`; `session_pauses_s`: `deliberate_pauses_s`;
    `session_chains`: `achieved_concurrency`."""
    concurrency = achieved_concurrency(table, target_users, think_time_s, closed_loop,
                                       retry_after_max_s, session_pauses_s, session_chains)
    if concurrency is not None:
        records = records_in_window(records, concurrency.window_start_unix_s,
                                    concurrency.window_start_unix_s + concurrency.window_s)
    else:
        records = []
    workers = worker_health(records)
    return ClientHealth(
        concurrency=concurrency, loop_lag=pooled_loop_lag(records), workers=workers,
        chunks_per_token=chunks_per_token(table) if table.num_rows else None,
        max_loop_lag_p99_s=max_loop_lag_p99_s, min_held_concurrency=min_held_concurrency,
        reasons=health_reasons(concurrency, workers, max_loop_lag_p99_s,
                               min_held_concurrency, server_gone))
