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

    def to_json_dict(self, run_start_unix_s: float) -> dict[str, object]:
        return {"start_utc": _utc(self.start_unix_s),
                "start_offset_s": round(self.start_unix_s - run_start_unix_s, 3),
                "duration_s": round(self.duration_s, 3), "requests": self.requests,
                "first_error": self.first_error, "to_the_end": self.to_the_end}

    def reason(self, run_start_unix_s: float) -> str:
        when = (f"{_utc(self.start_unix_s)} ({self.start_unix_s - run_start_unix_s:+.1f} s into "
                "the run)")
        span = ("until the end of the run" if self.to_the_end
                else f"for {self.duration_s:.1f} s")
        return (f"server unreachable from {when} {span}: {self.requests} requests got no "
                f"response (first: {self.first_error}); rows before it are valid")


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
