"""Sessions (the agent profile's, docs/traffic-agent.md) from a run's rows (pure; no I/O).

A session is one conversation sent by one user of one process, turn after turn: the rows of one
(process_id, user_id, conversation_id) in send order, a new session starting wherever the turn
does not follow the one before (a closed loop that cycled through its plan sends a
conversation again). Only rows that carry `session_turns` (the turns the plan gave the
conversation) belong to sessions.

A session *counts* when its first turn was sent in the measured window; it is *complete* when
it holds every one of its turns, 0 .. session_turns - 1, each successful; *failed* when a turn
failed (a failed turn ends its conversation); otherwise *cut* (the run ended first, or
cancelled a turn in flight). Its duration (`session_e2e`) runs from its first turn's intended
send to its last turn's end, tool latencies between turns included; only complete sessions
have one. Cut sessions are
counted, not timed: long sessions are the likeliest to be cut, so a window much shorter than a
session biases `session_e2e` low (the summary says how many were cut).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from vllm_slo.scenarios.profile_specs.agent import PROFILE as AGENT
from vllm_slo.scenarios.profile_specs.agent import AgentSpec, session_pauses_s
from vllm_slo.scenarios.traffic_spec import TrafficSpec


@dataclass(frozen=True, slots=True)
class SessionSeries:
    """The counted sessions of a run."""

    e2e_s: np.ndarray  # complete sessions' durations, in the order they started
    turns: np.ndarray  # complete sessions' turns, same order
    started_unix_s: np.ndarray  # complete sessions' first intended sends
    complete: int
    failed: int
    cut: int
    # TTFT of each turn of the complete sessions: ttft_by_turn_s[k] holds turn k's values
    ttft_by_turn_s: tuple[np.ndarray, ...] = ()

    @property
    def counted(self) -> int:
        return self.complete + self.failed + self.cut


EMPTY = SessionSeries(np.empty(0), np.empty(0, dtype=np.int64), np.empty(0), 0, 0, 0)


def _floats(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def session_series(table: pa.Table) -> SessionSeries:
    """The sessions of a samples table (any row order); EMPTY without `session_turns`."""
    if "session_turns" not in table.column_names or table.num_rows == 0:
        return EMPTY
    has_turns = table.column("session_turns").is_valid().to_numpy(zero_copy_only=False)
    if not has_turns.any():
        return EMPTY
    rows = table.filter(pa.array(has_turns))
    process = rows.column("process_id").to_numpy(zero_copy_only=False)
    user = rows.column("user_id").fill_null(-1).to_numpy(zero_copy_only=False)
    conversation = rows.column("conversation_id").fill_null(-1).to_numpy(zero_copy_only=False)
    turn = rows.column("turn").fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    planned = rows.column("session_turns").to_numpy(zero_copy_only=False).astype(np.int64)
    sent = _floats(rows, "intended_send_unix_s")
    end = sent + np.nan_to_num(_floats(rows, "e2e_s"), nan=np.inf)
    ttft = _floats(rows, "ttft_s")
    ok = rows.column("ok").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    cancelled = np.asarray(rows.column("status").to_pylist(), dtype=object) == "cancelled"
    measured = np.asarray(rows.column("phase").to_pylist(), dtype=object) == "measure"
    order = np.lexsort((turn, sent, conversation, user, process))
    sessions: list[list[int]] = []
    previous: tuple[int, int, int] | None = None
    for i in order:
        key = (int(process[i]), int(user[i]), int(conversation[i]))
        if key != previous or turn[i] <= turn[sessions[-1][-1]]:
            sessions.append([])
        sessions[-1].append(int(i))
        previous = key
    started: list[float] = []
    durations: list[float] = []
    turn_counts: list[int] = []
    by_turn: dict[int, list[float]] = {}
    failed = cut = 0
    for members in sessions:
        first = members[0]
        if not measured[first]:
            continue
        if not ok[members].all():  # a turn cut by the run's stop is a cut session
            stopped = bool(cancelled[[i for i in members if not ok[i]]].all())
            failed += not stopped
            cut += stopped
            continue
        wanted = int(planned[first])
        if [int(turn[i]) for i in members] != list(range(wanted)):
            cut += 1
            continue
        started.append(float(sent[first]))
        durations.append(float(end[members[-1]] - sent[first]))
        turn_counts.append(wanted)
        for i in members:
            by_turn.setdefault(int(turn[i]), []).append(float(ttft[i]))
    by_start = np.argsort(np.asarray(started), kind="stable")
    return SessionSeries(
        e2e_s=np.asarray(durations, dtype=np.float64)[by_start],
        turns=np.asarray(turn_counts, dtype=np.int64)[by_start],
        started_unix_s=np.asarray(started, dtype=np.float64)[by_start],
        complete=len(durations), failed=failed, cut=cut,
        ttft_by_turn_s=tuple(np.asarray(by_turn.get(k, []), dtype=np.float64)
                             for k in range(max(by_turn, default=-1) + 1)))


def agent_pauses_s(traffic: TrafficSpec, table: pa.Table) -> np.ndarray | None:
    """Per row, the tool latency its user waited before the session's next turn (NaN where
    the think time applies; `profile_specs.agent.session_pauses_s`), for the client's health
    check: a user waiting on its tool is busy, as one thinking is. None unless the run is an
    agent run whose rows say their sessions' turns."""
    if traffic.profile != AGENT or "session_turns" not in table.column_names:
        return None

    def column(name: str) -> np.ndarray:
        return np.asarray(table.column(name).fill_null(-1).to_numpy(zero_copy_only=False),
                          dtype=np.int64)

    ok = table.column("ok").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    return session_pauses_s(traffic.settings(AgentSpec), traffic.seed,
                            column("conversation_id"), column("turn"), column("session_turns"),
                            ok)
