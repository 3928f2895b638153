"""When the server went away: spans of consecutive requests that got no HTTP response at all
(connection refused or reset, a stalled stream cut by the request timeout), found in the rows
of a run (pure).

A load test is used exactly when servers break; a run whose server stopped answering must
say so — when, for how long, how many requests it cost — instead of ending as an ordinary SLO
failure. One refused connection is an error; an outage is a span in send order where every
request got no response, lasting at least `min_duration_s` and holding at least
`min_requests` requests (a closed-loop user backs off, so a long outage holds few rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

MIN_OUTAGE_S = 1.0
MIN_OUTAGE_REQUESTS = 3


@dataclass(frozen=True, slots=True)
class Outage:
    """Sends in [start_unix_s, end_unix_s] all got no response; `to_the_end`: no request
    after it got one (the server never came back within the run)."""

    start_unix_s: float
    end_unix_s: float
    requests: int
    first_error: str
    to_the_end: bool

    @property
    def duration_s(self) -> float:
        return self.end_unix_s - self.start_unix_s

    def record(self, run_start_unix_s: float) -> OutageRecord:
        """As run_status.json's `server_unreachable` states it, in the run's time."""
        return OutageRecord(start_utc=_utc(self.start_unix_s),
                            start_offset_s=round(self.start_unix_s - run_start_unix_s, 3),
                            duration_s=round(self.duration_s, 3), requests=self.requests,
                            first_error=self.first_error, to_the_end=self.to_the_end)

    def reason(self, run_start_unix_s: float) -> str:
        when = (f"{_utc(self.start_unix_s)} ({self.start_unix_s - run_start_unix_s:+.1f} s into "
                "the run)")
        span = ("until the end of the run" if self.to_the_end
                else f"for {self.duration_s:.1f} s")
        return (f"server unreachable from {when} {span}: {self.requests} requests got no "
                f"response (first: {self.first_error}); rows before it are valid")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutageRecord:
    """An outage in the run's time: its start (UTC, and seconds into the run) and length,
    rounded to the millisecond."""

    start_utc: str
    start_offset_s: float
    duration_s: float
    requests: int
    first_error: str
    to_the_end: bool


def _utc(unix_s: float) -> str:
    return datetime.fromtimestamp(unix_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] \
        + "Z"


def find_outages(send_unix_s: np.ndarray, answered: np.ndarray, errors: Sequence[str | None],
                 min_duration_s: float = MIN_OUTAGE_S,
                 min_requests: int = MIN_OUTAGE_REQUESTS) -> tuple[Outage, ...]:
    """`answered[k]`: request k got an HTTP response (any status, a successful stream or not).
    Rows in any order; spans are taken in send order."""
    order = np.argsort(send_unix_s, kind="stable")
    sends, got = np.asarray(send_unix_s, float)[order], np.asarray(answered, bool)[order]
    outages = []
    k, n = 0, sends.size
    while k < n:
        if got[k]:
            k += 1
            continue
        end = k
        while end + 1 < n and not got[end + 1]:
            end += 1
        count = end - k + 1
        if count >= min_requests and sends[end] - sends[k] >= min_duration_s:
            outages.append(Outage(float(sends[k]), float(sends[end]), count,
                                  errors[order[k]] or "no response", end == n - 1))
        k = end + 1
    return tuple(outages)


def table_outages(table: pa.Table) -> tuple[Outage, ...]:
    """Outages in a samples table (every phase: the server can go away in warm-up too)."""
    if table.num_rows == 0:
        return ()
    sends = table.column("send_unix_s").to_numpy(zero_copy_only=False)
    status = table.column("status_code").to_numpy(zero_copy_only=False)
    return find_outages(sends, status != 0, table.column("error").to_pylist())


# --- stalls: the server still holds the connections but sends nothing --------------------
# A frozen server (SIGSTOP, a deadlocked engine) refuses nothing: its requests stay open until
# the request timeout or the stop timeout cuts them, so no outage above fires and the cut rows
# drop out of the latencies. A stall is a span of at least `stall_threshold_s` during which
# requests were in flight and no stream received a chunk and no response ended; an idle gap
# (nothing in flight) is not one, and a slow server is judged against its own pace.
MIN_STALL_S = 5.0
STALL_PACE_FACTOR = 4.0  # × the median longest silence inside a request that completed
# ends that are the client's doing, not the server's progress
_CLIENT_CUT_STATUSES = frozenset({"cancelled", "timeout"})


@dataclass(frozen=True, slots=True)
class Stall:
    """Requests were in flight over [start_unix_s, end_unix_s] and none made progress;
    `streams`: how many were in flight during the span, `cut`: how many of them the client
    ended (request or stop timeout, Ctrl-C) instead of the server."""

    start_unix_s: float
    end_unix_s: float
    streams: int
    cut: int

    @property
    def duration_s(self) -> float:
        return self.end_unix_s - self.start_unix_s

    def reason(self, run_start_unix_s: float) -> str:
        start = self.start_unix_s - run_start_unix_s
        end = self.end_unix_s - run_start_unix_s
        cut = (f"; {self.cut} of them were cut by the client (request or stop timeout), "
               "not answered" if self.cut else "")
        return (f"server stalled: no chunk arrived on any of {self.streams} streams in flight "
                f"from {start:.1f} s to {end:.1f} s into the run ({self.duration_s:.1f} s, "
                f"from {_utc(self.start_unix_s)}){cut}")


@dataclass(frozen=True, slots=True)
class RequestSpans:
    """What the stall search needs of each row (Unix seconds; NaN where unknown).
    `chunk_times` is flat; `chunk_rows[k]` is the row of chunk k."""

    send_unix_s: np.ndarray
    end_unix_s: np.ndarray
    server_ended: np.ndarray  # bool: the end is the server's (a response ended), not a cut
    chunk_times: np.ndarray
    chunk_rows: np.ndarray


def stall_threshold_s(spans: RequestSpans, min_stall_s: float = MIN_STALL_S,
                      pace_factor: float = STALL_PACE_FACTOR) -> float:
    """How long a silence with requests in flight may last before it is a stall: the larger
    of `min_stall_s` and `pace_factor` × the median, over requests the server ended, of the
    longest silence inside one (send to first chunk, chunk to chunk, last chunk to end) — a
    server slow at every request is slow, not stalled."""
    n = spans.send_unix_s.size
    if n == 0:
        return min_stall_s
    longest = np.zeros(n)
    times = np.concatenate([spans.send_unix_s, spans.chunk_times, spans.end_unix_s])
    rows = np.concatenate([np.arange(n), spans.chunk_rows, np.arange(n)])
    keep = ~np.isnan(times)
    times, rows = times[keep], rows[keep]
    order = np.lexsort((times, rows))
    times, rows = times[order], rows[order]
    same = rows[1:] == rows[:-1]
    np.maximum.at(longest, rows[1:][same], np.diff(times)[same])
    ended = spans.server_ended & ~np.isnan(spans.end_unix_s)
    if not ended.any():
        return min_stall_s
    return max(min_stall_s, pace_factor * float(np.median(longest[ended])))


def find_stalls(spans: RequestSpans, threshold_s: float) -> tuple[Stall, ...]:
    """Spans of at least `threshold_s` where some request was in flight (sent, not yet
    ended) and no progress event happened: no chunk on any stream, no response ended."""
    n = spans.send_unix_s.size
    if n == 0:
        return ()
    starts = spans.send_unix_s
    ends = np.where(np.isnan(spans.end_unix_s), starts, spans.end_unix_s)
    events = np.sort(np.concatenate([
        spans.chunk_times[~np.isnan(spans.chunk_times)],
        ends[spans.server_ended & ~np.isnan(spans.end_unix_s)]]))
    bounds = np.concatenate([[-np.inf], events, [np.inf]])
    silent = np.flatnonzero(np.diff(bounds) >= threshold_s)
    stalls = []
    for k in silent:
        low, high = bounds[k], bounds[k + 1]
        # the parts of (low, high) covered by requests in flight: clip, then merge in order
        inside = (starts < high) & (ends > low)
        if not inside.any():
            continue
        pieces = sorted(zip(np.maximum(starts[inside], low), np.minimum(ends[inside], high),
                            strict=True))
        current_start, current_end = pieces[0]
        merged = []
        for piece_start, piece_end in pieces[1:]:
            if piece_start <= current_end:
                current_end = max(current_end, piece_end)
            else:
                merged.append((current_start, current_end))
                current_start, current_end = piece_start, piece_end
        merged.append((current_start, current_end))
        for span_start, span_end in merged:
            if span_end - span_start < threshold_s:
                continue
            during = (starts < span_end) & (ends > span_start)
            cut = during & ~spans.server_ended & (ends <= span_end)
            stalls.append(Stall(float(span_start), float(span_end), int(during.sum()),
                                int(cut.sum())))
    return tuple(stalls)


def table_spans(table: pa.Table) -> RequestSpans:
    """The rows of a samples table as spans: sent at `send_unix_s`, ended at the intended
    send + `e2e_s`, chunks at the intended send + each offset. A row's end is the server's
    unless its status is `cancelled` or `timeout` (a row of a file without statuses: unless
    it got no HTTP status at all)."""
    def floats(name: str) -> np.ndarray:
        return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)

    intended = floats("intended_send_unix_s")
    e2e = floats("e2e_s")
    codes = table.column("status_code").to_numpy(zero_copy_only=False)
    statuses = (table.column("status").to_pylist() if "status" in table.column_names
                else [None] * table.num_rows)
    server_ended = np.array([code != 0 if status is None else status not in _CLIENT_CUT_STATUSES
                             for status, code in zip(statuses, codes, strict=True)], dtype=bool)
    column = table.column("chunk_offsets_s")
    offsets = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    flat = np.asarray(offsets.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
    lengths = offsets.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
    rows = np.repeat(np.arange(table.num_rows), lengths)
    return RequestSpans(floats("send_unix_s"), intended + e2e, server_ended,
                        intended[rows] + flat, rows)


def table_stalls(table: pa.Table) -> tuple[Stall, ...]:
    """Stalls in a samples table (every phase), judged against the run's own pace."""
    if table.num_rows == 0:
        return ()
    spans = table_spans(table)
    return find_stalls(spans, stall_threshold_s(spans))
