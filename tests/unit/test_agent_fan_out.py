"""Parallel sub-agents of an agent session (issue 42.3, `traffic.agent.fan_out`): the plan
(branch contexts, the join's tool results, exact sizes, determinism, the default unchanged),
the settings' checks, the users' view of a session (steps, waits), and the analysis of rows
with branches (sessions, the client's busy accounting)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pyarrow as pa
import pytest

from vllm_slo.analysis.client_health import achieved_concurrency
from vllm_slo.analysis.sessions import agent_waits, session_series
from vllm_slo.loadtests.agent_session import AgentSession, openai_tool_messages
from vllm_slo.loadtests.plan import build_plan
from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.profile_specs.agent import AgentSpec, tool_latency_s
from vllm_slo.scenarios.traffic_spec import TrafficSpec

AGENT = {"profile": "agent", "seed": 11, "duration": "20s",
         "arrival": {"kind": "closed", "users": 2},
         "agent": {"turns": 5, "system_prompt_tokens": 120, "task_tokens": 40,
                   "output_tokens": 24, "tool_result_tokens": 90, "tool_result_spread": 0.5}}
FAN_OUT = {"at_turn": 1, "branches": 3, "turns": 2, "task_tokens": 15}
PER_SESSION = 5 + 3 * 2


def _traffic(**agent: object) -> TrafficSpec:
    return TrafficSpec.model_validate({**AGENT, "agent": {**AGENT["agent"], **agent}})


def test_sub_agents_start_from_the_parent_and_the_join_holds_their_answers(
        tiny_counter) -> None:
    plan = build_plan(_traffic(fan_out=FAN_OUT), tiny_counter, 4096, 2 * PER_SESSION)
    assert not plan.warnings and plan.trimmed == plan.rejected == 0
    for c in (0, 1):
        session = [r for r in plan.requests if r.conversation_id == c]
        # plan order: the parent up to the fan-out, each branch's turns, the parent's rest
        assert [(r.branch, r.turn) for r in session] == [
            (None, 0), (None, 1), (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1),
            (None, 2), (None, 3), (None, 4)]
        parent = {r.turn: r for r in session if r.branch is None}
        fork = parent[1]
        answer = None
        tasks = set()
        for b in range(3):
            first, second = [r for r in session if r.branch == b]
            # the parent's context, the answer that spawned the sub-agent, its own task
            assert first.messages[:len(fork.messages)] == fork.messages
            spawned, task = first.messages[len(fork.messages):]
            assert (spawned["role"], task["role"]) == ("assistant", "user")
            assert answer in (None, spawned) and spawned != fork.messages[-1]
            answer = spawned
            tasks.add(task["content"])
            assert tiny_counter.count_many([spawned["content"], task["content"]]) == [24, 15]
            assert first.prompt_tokens == fork.prompt_tokens + 24 + 15
            # a sub-agent's later turn: its answer and a tool result, as the parent's
            assert second.messages[:len(first.messages)] == first.messages
            own_answer, result = second.messages[len(first.messages):]
            assert (own_answer["role"], result["role"]) == ("assistant", "tool")
            result_tokens = tiny_counter.count_many([result["content"]])[0]
            assert 45 <= result_tokens <= 135
            assert second.prompt_tokens == first.prompt_tokens + 24 + result_tokens
            assert first.max_tokens == second.max_tokens == 24
        assert len(tasks) == 3  # each sub-agent its own task
        # the join: the answer that spawned them, then one result per sub-agent (its final
        # answer: output_tokens each)
        join = parent[2]
        assert join.messages[:len(fork.messages)] == fork.messages
        added = join.messages[len(fork.messages):]
        assert [m["role"] for m in added] == ["assistant", "tool", "tool", "tool"]
        assert added[0] == answer
        finals = [m["content"] for m in added[1:]]
        assert tiny_counter.count_many(finals) == [24, 24, 24] and len(set(finals)) == 3
        assert join.prompt_tokens == fork.prompt_tokens + 24 + 3 * 24
        # after the join the parent goes on as ever
        for before, after in itertools.pairwise([parent[2], parent[3], parent[4]]):
            assert after.messages[:len(before.messages)] == before.messages
            assert len(after.messages) == len(before.messages) + 2


def test_the_plan_is_deterministic_and_the_default_is_unchanged(tiny_counter) -> None:
    fan = _traffic(fan_out=FAN_OUT)
    plan = build_plan(fan, tiny_counter, 4096, 3 * PER_SESSION)
    again = build_plan(fan, tiny_counter, 4096, 3 * PER_SESSION)
    assert again.sha256 == plan.sha256 and again.requests == plan.requests
    # plans are prefixes, also cut inside a session's sub-agents
    assert build_plan(fan, tiny_counter, 4096, PER_SESSION + 4).requests == \
        plan.requests[:PER_SESSION + 4]
    # no fan_out: the plan of the sequential profile, byte for byte (the sha256 a plan had
    # before sub-agents existed, with this tokenizer)
    assert _traffic().settings(AgentSpec).fan_out is None
    default = build_plan(_traffic(), tiny_counter, 4096, 40)
    assert default.sha256 == ("1cbe5a9386e434a0cf558d03c777b541c1b6c03b41d840eb74d84b14994bd585")
    assert build_plan(_traffic(tool_format="text"), tiny_counter, 4096, 40).sha256 == (
        "298e336453a04c237e4166f220c60f78c124a47560d72b8a175361f2527710d6")
    assert {r.branch for r in default.requests} == {None}
    # the parent's turns before the fan-out are the sequential plan's
    assert plan.requests[:2] == default.requests[:2]
    assert plan.sha256 != build_plan(_traffic(fan_out={**FAN_OUT, "branches": 2}),
                                     tiny_counter, 4096, 3 * PER_SESSION).sha256


@pytest.mark.parametrize(("fan_out", "turns", "message"), [
    ({"at_turn": 4}, 5, r"fan_out.at_turn 4 leaves no parent turn to join .*at_turn: 0 \.\. 3"),
    ({"at_turn": 0}, 1, "allowed at_turn: none: turns must be at least 2"),
    ({"at_turn": 0, "branches": 0}, 5, "branches"),
    ({"at_turn": 0, "turns": 0}, 5, "turns"),
    ({"branches": 2}, 5, "at_turn"),  # required
    ({"at_turn": 0, "width": 2}, 5, "width"),  # no unknown keys
])
def test_bad_fan_out_settings_are_refused(fan_out: dict, turns: int, message: str) -> None:
    setting = json.dumps({"turns": turns, "fan_out": fan_out})
    with pytest.raises(ScenarioError, match=message) as raised:
        load_scenario("agent", [f"traffic.agent={setting}"])
    assert "traffic.agent" in str(raised.value)


def test_a_closed_loop_plan_has_room_for_every_sub_agent_at_once() -> None:
    """A user runs its sub-agents at once, a request each in flight: the closed loop's plan
    bound (users x time / the fastest request) grows by the branches, so a fast server does
    not run the plan out and cycle its prompts."""
    from vllm_slo.preflight import planned_request_count

    chain = _traffic()
    assert chain.total_s == 30  # warm-up included: 2 users x 30 s / 50 ms = 1,200 requests
    assert planned_request_count(chain) == 1200
    assert planned_request_count(_traffic(fan_out=FAN_OUT)) == 3 * 1200


def test_the_join_calls_one_tool_per_sub_agent(tiny_counter) -> None:
    plan = build_plan(_traffic(fan_out=FAN_OUT), tiny_counter, 4096, PER_SESSION)
    last = plan.requests[-1]  # parent turn 4: results of turns 1 (3 sub-agents), 3 and 4
    framed = openai_tool_messages(last.messages, 0)
    assert [m["content"] for m in framed] == [m["content"] for m in last.messages]
    callers = [m for m in framed if "tool_calls" in m]
    assert [len(m["tool_calls"]) for m in callers] == [1, 3, 1, 1]
    calls = [call["id"] for m in callers for call in m["tool_calls"]]
    answers = [m["tool_call_id"] for m in framed if m["role"] == "tool"]
    assert calls == answers and len(set(calls)) == 6
    # a sub-agent's request: the spawning answer is a plain message before its task
    branch = next(r for r in plan.requests if r.branch == 1 and r.turn == 1)
    framed_branch = openai_tool_messages(branch.messages, 0)
    assert [len(m.get("tool_calls", [])) for m in framed_branch
            if m["role"] == "assistant"] == [1, 0, 1]


def test_a_session_splits_at_its_fan_out_and_each_chain_draws_its_tool_latency(
        tiny_counter) -> None:
    traffic = _traffic(fan_out=FAN_OUT, tool_latency={"kind": "uniform", "min": "1s",
                                                      "max": "3s"})
    plan = build_plan(traffic, tiny_counter, 4096, PER_SESSION + 5)
    session = AgentSession.of(traffic, plan.requests)
    assert session is not None and session.turns_of(0) == PER_SESSION
    assert session.turns_of(1) == 5  # the plan ends inside session 1's sub-agents
    steps = session.steps(list(range(PER_SESSION)))
    assert steps.before == (0, 1) and steps.after == (8, 9, 10)
    assert steps.branches == ((2, 3), (4, 5), (6, 7))
    cut = session.steps(list(range(PER_SESSION, PER_SESSION + 5)))
    assert cut.before == (11, 12) and cut.branches == ((13, 14), (15,)) and cut.after == ()
    waits = [session.tool_latency_s(p) for p in (3, 5, 7, 9)]
    assert len(set(waits)) == 4 and all(1.0 <= w <= 3.0 for w in waits)
    assert waits[0] == tool_latency_s(traffic.settings(AgentSpec).tool_latency, 11, 0, 1, 0)
    assert session.tool_latency_s(9) == tool_latency_s(
        traffic.settings(AgentSpec).tool_latency, 11, 0, 3)


# ------------------------------------------------------------------------- the analysis
SPEC = {"turns": 3, "fan_out": {"at_turn": 0, "branches": 2, "turns": 2},
        "tool_latency": {"kind": "constant", "mean": "1s"}}
PLANNED = 3 + 2 * 2
BRANCH_E2E_S = (0.5, 0.7)  # sub-agent 1 is the slower: the join waits for it


def _row(user: int, conversation: int, turn: int, branch: int | None, sent: float,
         e2e_s: float, ok: bool = True, phase: str = "measure",
         status: str = "http_error") -> dict:
    return {
        "request_id": f"{user}-{conversation}-{branch}-{turn}-{sent}", "process_id": 1,
        "user_id": user, "plan_index": 0, "conversation_id": conversation, "turn": turn,
        "phase": phase, "endpoint": "chat", "intended_send_unix_s": sent, "send_unix_s": sent,
        "send_lag_s": 0.0, "ttft_s": 0.1 if ok else None, "e2e_s": e2e_s,
        "chunk_offsets_s": [0.1, e2e_s] if ok else [], "output_tokens": 2 if ok else None,
        "prompt_tokens": 10, "max_tokens": 2, "status_code": 200 if ok else 500, "ok": ok,
        "status": "ok" if ok else status, "profile": "agent", "session_turns": PLANNED,
        "branch": branch}


def _session(user: int, conversation: int, start: float, fail: tuple | None = None,
             drop: tuple | None = None, status: str = "http_error") -> tuple[list[dict], float]:
    """Parent turn 0 (0.5 s); two sub-agents of 2 turns with 1 s tools (0.5 s and 0.7 s a
    turn); the join (turn 1, 0.5 s), a 1 s tool, turn 2 (0.5 s): 0.5 + 2.4 + 2.0 = 4.9 s.
    Returns the rows and the session's end."""
    rows = [_row(user, conversation, 0, None, start, 0.5)]
    fork_end = start + 0.5
    ends = []
    for b, e2e in enumerate(BRANCH_E2E_S):
        t = fork_end + 0.002 * (b + 1)
        for turn in range(2):
            failed = fail == (b, turn)
            if drop != (b, turn):
                rows.append(_row(user, conversation, turn, b, t, e2e, ok=not failed,
                                 status=status))
            t += e2e + 1.0
            if failed:
                break
        ends.append(t - 1.0)
    if fail is not None:
        return rows, max(ends)
    join = max(ends) + 0.003
    rows.append(_row(user, conversation, 1, None, join, 0.5))
    rows.append(_row(user, conversation, 2, None, join + 1.5, 0.5))
    return rows, join + 2.0


def test_a_session_is_complete_only_with_all_its_sub_agents() -> None:
    rows, end = _session(1, 1, 1000.0)
    assert end - 1000.0 == pytest.approx(4.9 + 0.007)  # + the 2 and 3 ms re-send gaps
    rows += _session(2, 2, 1000.0)[0]
    rows += _session(3, 3, 1001.0, fail=(1, 1))[0]  # a sub-agent failed: the session too
    rows += _session(4, 4, 1001.0, fail=(0, 1), status="cancelled")[0]  # cut by the stop
    rows += _session(5, 5, 1001.0, drop=(1, 1))[0]  # a sub-agent's turn missing: cut
    # one user sends its conversation twice (the plan cycled): two sessions
    first, end = _session(7, 7, 1010.0)
    rows += first + _session(7, 7, end + 0.1)[0]
    order = np.random.default_rng(3).permutation(len(rows))
    table = pa.Table.from_pylist([rows[i] for i in order], schema=SAMPLE_SCHEMA)
    sessions = session_series(table)
    assert (sessions.complete, sessions.failed, sessions.cut) == (4, 1, 2)
    assert sessions.e2e_s.tolist() == pytest.approx([4.907] * 4)
    assert sessions.turns.tolist() == [PLANNED] * 4
    # TTFT by turn: the parent's turns only
    assert [t.size for t in sessions.ttft_by_turn_s] == [4, 4, 4]
    # an older run folder (no branch column, no sub-agents): sessions as before
    sequential = [r for r in _session(1, 1, 1000.0)[0] if r["branch"] is None]
    for r in sequential:
        r["session_turns"] = 3
    older = pa.Table.from_pylist(sequential, schema=SAMPLE_SCHEMA).drop_columns(["branch"])
    assert session_series(older).complete == 1


def test_a_user_waiting_on_its_sub_agents_is_busy_and_in_flight_exceeds_users() -> None:
    """Two users whose sessions fan out to two sub-agents: requests in flight reach 4 (two per
    user), the users are busy the whole time (their tools and sub-agents are deliberate
    waits), and the re-send gaps are taken within each chain (all ~2-3 ms)."""
    traffic = TrafficSpec.model_validate({
        "profile": "agent", "duration": "60s", "arrival": {"kind": "closed", "users": 2},
        "agent": SPEC})
    rows: list[dict] = []
    for user in (1, 2):
        t = 1000.0 + 0.01 * user
        for conversation in range(user * 100, user * 100 + 5):
            session, t = _session(user, conversation, t)
            rows += session
            t += 0.002  # think time 0: the next session at once
    table = pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)
    waits = agent_waits(traffic, table)
    assert waits is not None
    branch = np.asarray([-1 if r["branch"] is None else r["branch"] for r in rows])
    assert (waits.chains[branch < 0] == 0).all() and (waits.chains[branch >= 0] > 0).all()
    assert np.unique(waits.chains[branch >= 0]).size == 2 * 5 * 2  # one per sub-agent
    fork = np.flatnonzero((branch < 0) & (np.asarray([r["turn"] for r in rows]) == 0))
    # the parent's wait: from its fan-out turn's end to the slower sub-agent's end (2.404 s)
    assert waits.pauses_s[fork] == pytest.approx(np.full(fork.size, 2.404), abs=1e-6)
    concurrency = achieved_concurrency(table, 2, 0.0, True, None, waits.pauses_s,
                                       waits.chains)
    assert concurrency is not None
    assert concurrency.busy_share == pytest.approx(1.0, abs=0.01)
    assert concurrency.in_flight.max == 4 and concurrency.in_flight_share is not None
    assert concurrency.resend_gap_max_s is not None and concurrency.resend_gap_max_s < 0.004
    assert concurrency.resend_gap_p50_s is not None and concurrency.resend_gap_p50_s >= 0
    # without the sessions' waits the same rows would read as client-limited
    naive = achieved_concurrency(table, 2, 0.0, True)
    assert naive is not None and naive.busy_share is not None and naive.busy_share < 0.7
