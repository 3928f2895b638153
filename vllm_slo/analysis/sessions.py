"""Sessions (the agent profile's, docs/traffic-agent.md) from a run's rows (pure; no I/O).

A session is one conversation sent by one user of one process: the rows of one
(process_id, user_id, conversation_id) in send order, a new session starting wherever a
parent-chain turn does not follow the one before (a closed loop that cycled through its plan
sends a conversation again). Only rows that carry `session_turns` (the requests the plan gave
the conversation: the parent's turns and, with `fan_out`, every sub-agent's) belong to
sessions; a sub-agent's rows (`branch` not null) belong to the session its user is in.

A session *counts* when its first turn was sent in the measured window; it is *complete* when
it holds every one of its planned requests, each successful (so every sub-agent completed);
*failed* when a request failed (a failed turn ends its chain and its session); otherwise *cut*
(the run ended first, or cancelled a request in flight). Its duration (`session_e2e`) runs from
its first turn's intended send to its last request's end (the parent's last turn, after the
join), tool latencies and sub-agents included; only complete sessions have one. Cut sessions
are counted, not timed: long sessions are the likeliest to be cut, so a window much shorter
than a session biases `session_e2e` low (the summary says how many were cut).
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


def _int_column(table: pa.Table, name: str, missing: int = -1) -> np.ndarray:
    """An integer column, nulls (and a column the table lacks: an older run) as `missing`."""
    if name not in table.column_names:
        return np.full(table.num_rows, missing, dtype=np.int64)
    return np.asarray(table.column(name).fill_null(missing).to_numpy(zero_copy_only=False),
                      dtype=np.int64)


def _group_sessions(process: np.ndarray, user: np.ndarray, conversation: np.ndarray,
                    turn: np.ndarray, branch: np.ndarray, sent: np.ndarray) -> list[list[int]]:
    """Row indices of each session (module docstring), each in send order."""
    order = np.lexsort((turn, sent, conversation, user, process))
    sessions: list[list[int]] = []
    previous: tuple[int, int, int] | None = None
    last_parent_turn = -1
    for i in order:
        key = (int(process[i]), int(user[i]), int(conversation[i]))
        parent = branch[i] < 0
        if key != previous or (parent and turn[i] <= last_parent_turn):
            sessions.append([])
            last_parent_turn = -1
        if parent:
            last_parent_turn = int(turn[i])
        sessions[-1].append(int(i))
        previous = key
    return sessions


def session_series(table: pa.Table) -> SessionSeries:
    """The sessions of a samples table (any row order); EMPTY without `session_turns`."""
    if "session_turns" not in table.column_names or table.num_rows == 0:
        return EMPTY
    has_turns = table.column("session_turns").is_valid().to_numpy(zero_copy_only=False)
    if not has_turns.any():
        return EMPTY
    rows = table.filter(pa.array(has_turns))
    process = rows.column("process_id").to_numpy(zero_copy_only=False)
    user = _int_column(rows, "user_id")
    conversation = _int_column(rows, "conversation_id")
    turn = _int_column(rows, "turn")
    branch = _int_column(rows, "branch")
    planned = _int_column(rows, "session_turns")
    sent = _floats(rows, "intended_send_unix_s")
    end = sent + np.nan_to_num(_floats(rows, "e2e_s"), nan=np.inf)
    ttft = _floats(rows, "ttft_s")
    ok = rows.column("ok").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    cancelled = np.asarray(rows.column("status").to_pylist(), dtype=object) == "cancelled"
    measured = np.asarray(rows.column("phase").to_pylist(), dtype=object) == "measure"
    started: list[float] = []
    durations: list[float] = []
    turn_counts: list[int] = []
    by_turn: dict[int, list[float]] = {}
    failed = cut = 0
    for members in _group_sessions(process, user, conversation, turn, branch, sent):
        first = members[0]
        if not measured[first]:
            continue
        if not ok[members].all():  # a request cut by the run's stop is a cut session
            stopped = bool(cancelled[[i for i in members if not ok[i]]].all())
            failed += not stopped
            cut += stopped
            continue
        wanted = int(planned[first])
        chains: dict[int, list[int]] = {}
        for i in members:
            chains.setdefault(int(branch[i]), []).append(int(turn[i]))
        whole = (len(members) == wanted and -1 in chains
                 and all(sorted(turns) == list(range(len(turns))) for turns in chains.values()))
        if not whole:
            cut += 1
            continue
        started.append(float(sent[first]))
        durations.append(float(end[members].max() - sent[first]))
        turn_counts.append(wanted)
        for i in members:
            if branch[i] < 0:  # the parent's turns (a sub-agent's turn k is another prompt)
                by_turn.setdefault(int(turn[i]), []).append(float(ttft[i]))
    by_start = np.argsort(np.asarray(started), kind="stable")
    return SessionSeries(
        e2e_s=np.asarray(durations, dtype=np.float64)[by_start],
        turns=np.asarray(turn_counts, dtype=np.int64)[by_start],
        started_unix_s=np.asarray(started, dtype=np.float64)[by_start],
        complete=len(durations), failed=failed, cut=cut,
        ttft_by_turn_s=tuple(np.asarray(by_turn.get(k, []), dtype=np.float64)
                             for k in range(max(by_turn, default=-1) + 1)))


@dataclass(frozen=True, slots=True)
class AgentWaits:
    """Per row, what an agent run's client-health check needs (`client_health`): the pause
    its user chose after it (`pauses_s`, NaN: the think time) and its chain (`chains`: 0 for
    the user's own sequence of requests, a distinct positive number per sub-agent of each
    session). A user's busy time is its chain 0: the parent's wait on its sub-agents counts
    as deliberate (as a tool's latency does), from the fan-out turn's end to the last
    sub-agent's end; the sub-agents' own requests are in flight besides."""

    pauses_s: np.ndarray
    chains: np.ndarray


def agent_waits(traffic: TrafficSpec, table: pa.Table) -> AgentWaits | None:
    """The pauses and chains of an agent run's rows (`AgentWaits`; a tool's latency is
    `profile_specs.agent.session_pauses_s`, the same draw the users make), for the client's
    health check: a user waiting on its tool or its sub-agents is busy, as one thinking is.
    None unless the run is an agent run whose rows say their sessions' requests."""
    if traffic.profile != AGENT or "session_turns" not in table.column_names:
        return None
    spec = traffic.settings(AgentSpec)
    ok = table.column("ok").fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    conversation, turn = _int_column(table, "conversation_id"), _int_column(table, "turn")
    branch, planned = _int_column(table, "branch"), _int_column(table, "session_turns")
    pauses = session_pauses_s(spec, traffic.seed, conversation, turn, planned, ok, branch)
    chains = np.zeros(table.num_rows, dtype=np.int64)
    fan_out = spec.fan_out
    if fan_out is None or not (branch >= 0).any():
        return AgentWaits(pauses, chains)
    process = _int_column(table, "process_id")
    user = _int_column(table, "user_id")
    sent = _floats(table, "intended_send_unix_s")
    end = sent + np.nan_to_num(_floats(table, "e2e_s"), nan=0.0)
    in_session = planned >= 0
    rows = np.flatnonzero(in_session)
    groups = _group_sessions(process[rows], user[rows], conversation[rows], turn[rows],
                             branch[rows], sent[rows])
    next_chain = 1
    for group in groups:
        members = rows[group]
        subs = members[branch[members] >= 0]
        if subs.size == 0:
            continue
        for b in np.unique(branch[subs]):
            chains[subs[branch[subs] == b]] = next_chain
            next_chain += 1
        forks = members[(branch[members] < 0) & (turn[members] == fan_out.at_turn)]
        for fork in forks[ok[forks]]:  # the parent waited on its sub-agents
            wait_s = max(0.0, float(end[subs].max() - end[fork]))
            if not ok[subs].all():  # a failed sub-agent ended the session: then think time
                wait_s += traffic.arrival.think_time_s
            pauses[fork] = wait_s
    return AgentWaits(pauses, chains)
