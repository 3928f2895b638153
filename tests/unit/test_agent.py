"""Agentic sessions (issue 42.3), `traffic.profile: agent`: the plan (context growth per turn,
tool result sizes, determinism), the tool-call framing and tool latency the users add, and the
per-session metric `session_e2e` from synthetic rows through verdicts."""

from __future__ import annotations

import itertools
import json
import statistics
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from vllm_slo.analysis.run_metrics import run_series, summarize
from vllm_slo.analysis.sessions import session_series
from vllm_slo.analysis.verdicts import evaluate_slos, goodput
from vllm_slo.loadtests.agent_session import TOOLS, AgentSession, openai_tool_messages
from vllm_slo.loadtests.plan import build_plan, canonical_bytes
from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.metrics import METRICS, PER_REQUEST_LATENCY_METRICS
from vllm_slo.scenarios.profile_specs.agent import ToolLatency, tool_latency_s
from vllm_slo.scenarios.traffic_spec import TrafficSpec

AGENT = {"profile": "agent", "seed": 11, "duration": "20s",
         "arrival": {"kind": "closed", "users": 2},
         "agent": {"turns": 5, "system_prompt_tokens": 120, "task_tokens": 40,
                   "output_tokens": 24, "tool_result_tokens": 90, "tool_result_spread": 0.5}}


def _traffic(**agent: object) -> TrafficSpec:
    return TrafficSpec.model_validate({**AGENT, "agent": {**AGENT["agent"], **agent}})


def test_each_turn_adds_the_answer_and_a_tool_result_exactly(tiny_counter) -> None:
    plan = build_plan(_traffic(), tiny_counter, 4096, 40)
    assert not plan.warnings and plan.trimmed == plan.rejected == 0
    sessions: dict[int, list] = {}
    for request in plan.requests:
        sessions.setdefault(request.conversation_id, []).append(request)
    assert len(sessions) == 8 and all(len(turns) == 5 for turns in sessions.values())
    sizes = []
    for turns in sessions.values():
        assert [r.turn for r in turns] == list(range(5))
        first = turns[0]
        assert [m["role"] for m in first.messages] == ["system", "user"]
        assert tiny_counter.count_many([m["content"] for m in first.messages]) == [120, 40]
        for before, after in itertools.pairwise(turns):
            # the context so far, then this turn's answer and its tool result
            assert after.messages[:len(before.messages)] == before.messages
            answer, result = after.messages[len(before.messages):]
            assert (answer["role"], result["role"]) == ("assistant", "tool")
            answer_tokens, result_tokens = tiny_counter.count_many(
                [answer["content"], result["content"]])
            assert answer_tokens == 24
            assert after.prompt_tokens - before.prompt_tokens == 24 + result_tokens
            assert after.max_tokens == 24
            sizes.append(result_tokens)
    # tool results uniform in 90 ± 50%: every size in range, spread over it
    assert all(45 <= size <= 135 for size in sizes)
    assert max(sizes) - min(sizes) > 40 and 70 < statistics.mean(sizes) < 110
    assert {r.profile for r in plan.requests} == {"agent"}


def test_tool_results_have_the_given_size_and_the_plan_is_deterministic(tiny_counter) -> None:
    exact = build_plan(_traffic(tool_result_spread=0.0, tool_format="text"), tiny_counter,
                       4096, 20)
    for request in exact.requests:
        if request.turn:  # the text format: the result is a user message of exactly 90
            assert request.messages[-1]["role"] == "user"
            assert tiny_counter.count_many([request.messages[-1]["content"]]) == [90]
    again = build_plan(_traffic(tool_result_spread=0.0, tool_format="text"), tiny_counter,
                       4096, 20)
    assert again.sha256 == exact.sha256 and again.requests == exact.requests
    assert build_plan(_traffic(), tiny_counter, 4096, 10).requests == \
        build_plan(_traffic(), tiny_counter, 4096, 40).requests[:10]  # plans are prefixes
    other_seed = TrafficSpec.model_validate({**AGENT, "seed": 12})
    assert build_plan(other_seed, tiny_counter, 4096, 20).sha256 != \
        build_plan(_traffic(), tiny_counter, 4096, 20).sha256


def test_sessions_need_a_closed_loop_and_settings_are_checked(tiny_counter) -> None:
    open_loop = TrafficSpec.model_validate({**AGENT, "arrival": {"kind": "poisson",
                                                                  "rate": 2}})
    with pytest.raises(ValueError, match="closed-loop"):
        build_plan(open_loop, tiny_counter, 4096, 10)
    with pytest.raises(ScenarioError, match="uniform needs max"):
        load_scenario("chat", ["traffic.profile=agent",
                               "traffic.agent={tool_latency: {kind: uniform, min: 2s}}"])
    with pytest.raises(ScenarioError, match="tool_format"):
        load_scenario("chat", ["traffic.profile=agent", "traffic.agent={tool_format: xml}"])


def test_the_openai_framing_pairs_each_result_with_its_call(tiny_counter) -> None:
    plan = build_plan(_traffic(), tiny_counter, 4096, 5)
    last = plan.requests[4]
    framed = openai_tool_messages(last.messages, last.conversation_id)
    assert [m["content"] for m in framed] == [m["content"] for m in last.messages]
    calls = [m["tool_calls"][0] for m in framed if "tool_calls" in m]
    answers = [m["tool_call_id"] for m in framed if m["role"] == "tool"]
    assert [c["id"] for c in calls] == answers == [f"call_0_{k}" for k in range(1, 5)]
    assert all(c["function"]["name"] == TOOLS[0]["function"]["name"]
               and json.loads(c["function"]["arguments"]) for c in calls)
    for i, message in enumerate(framed):
        if message["role"] == "tool":
            assert framed[i - 1]["role"] == "assistant" and "tool_calls" in framed[i - 1]
    with pytest.raises(ValueError, match="must follow the assistant"):
        openai_tool_messages([{"role": "user", "content": "x"},
                              {"role": "tool", "content": "y"}], 0)
    session = AgentSession.of(_traffic(), plan.requests)
    assert session is not None and session.turns_of(0) == 5
    messages, extra = session.framed(last, {"top_k": 5, "tool_choice": "auto"})
    assert messages == framed
    assert extra["tools"] == list(TOOLS) and extra["top_k"] == 5
    assert extra["tool_choice"] == "auto"  # traffic.extra_body has the last word
    # the plan's hash covers the contents; the framing is a function of them
    assert b"tool_calls" not in b"".join(canonical_bytes(plan.requests))
    text_session = AgentSession.of(_traffic(tool_format="text"), plan.requests)
    assert text_session is not None
    assert text_session.framed(last, {}) == ([dict(m) for m in last.messages], {})
    assert AgentSession.of(TrafficSpec.model_validate({"profile": "chat", "duration": "5s"}),
                           plan.requests) is None


def test_tool_latency_is_drawn_per_turn_from_the_session() -> None:
    constant = ToolLatency.model_validate({"kind": "constant", "mean": "1.5s"})
    assert tool_latency_s(constant, 1, 3, 2) == 1.5
    assert tool_latency_s(constant, 1, 3, 0) == 0.0  # no tool before the task
    exponential = ToolLatency.model_validate({"kind": "exponential", "mean": "2s",
                                              "min": "0.5s", "max": "10s"})
    waits = [tool_latency_s(exponential, 7, c, t) for c in range(400) for t in range(1, 6)]
    assert waits == [tool_latency_s(exponential, 7, c, t)
                     for c in range(400) for t in range(1, 6)]  # deterministic
    assert min(waits) >= 0.5 and max(waits) <= 10.0
    assert statistics.mean(waits) == pytest.approx(2.5, abs=0.15)  # 0.5 + Exp(2), cap rare
    uniform = ToolLatency.model_validate({"kind": "uniform", "min": "1s", "max": "3s"})
    drawn = [tool_latency_s(uniform, 7, c, 1) for c in range(500)]
    assert 1.0 <= min(drawn) < 1.1 and 2.9 < max(drawn) <= 3.0
    assert [tool_latency_s(uniform, 8, c, 1) for c in range(500)] != drawn


# ---------------------------------------------------------------------------- the metrics
def _session_rows(user: int, conversation: int, start_s: float, turns: int, planned: int,
                  ttft_s: float, e2e_s: float, gap_s: float, phase: str = "measure",
                  fail_turn: int | None = None, status: str = "http_error") -> list[dict]:
    rows = []
    t = start_s
    for turn in range(turns):
        ok = turn != fail_turn
        rows.append({
            "request_id": f"{user}-{conversation}-{turn}", "process_id": 1, "user_id": user,
            "plan_index": conversation * planned + turn, "conversation_id": conversation,
            "turn": turn, "phase": phase, "endpoint": "chat", "intended_send_unix_s": t,
            "send_unix_s": t, "send_lag_s": 0.0, "ttft_s": ttft_s * (turn + 1) if ok else None,
            "e2e_s": e2e_s, "chunk_offsets_s": [ttft_s * (turn + 1), e2e_s] if ok else [],
            "output_tokens": 2 if ok else None, "prompt_tokens": 10, "max_tokens": 2,
            "status_code": 200 if ok else 500, "ok": ok, "status": "ok" if ok else status,
            "profile": "agent", "session_turns": planned})
        t += e2e_s + gap_s
    return rows


def test_session_metrics_from_rows() -> None:
    rows = []
    for k in range(10):  # complete: 4 turns of 0.5 s with 1 s tools: 4 * 0.5 + 3 * 1 = 5 s
        rows += _session_rows(k, k, 1000.0 + k, 4, 4, 0.1, 0.5, 1.0)
    rows += _session_rows(20, 20, 1001.0, 2, 4, 0.1, 0.5, 1.0)  # cut after 2 of 4 turns
    rows += _session_rows(21, 21, 1001.0, 3, 4, 0.1, 0.5, 1.0, fail_turn=2)  # failed
    rows += _session_rows(22, 22, 1002.0, 3, 4, 0.1, 0.5, 1.0, fail_turn=2,
                          status="cancelled")  # its last turn cancelled by the stop: cut
    rows += _session_rows(23, 23, 990.0, 4, 4, 0.1, 0.5, 1.0, phase="warmup")  # not counted
    # one user, one conversation sent twice (the plan cycled): two sessions
    rows += _session_rows(30, 30, 1020.0, 4, 4, 0.1, 0.5, 1.0)
    rows += _session_rows(30, 30, 1030.0, 4, 4, 0.1, 0.5, 2.0)
    rows.append({**rows[0], "request_id": "chat-1", "conversation_id": 99,
                 "session_turns": None, "profile": "chat"})  # not a session
    order = np.random.default_rng(5).permutation(len(rows))
    table = pa.Table.from_pylist([rows[i] for i in order], schema=SAMPLE_SCHEMA)
    sessions = session_series(table)
    assert (sessions.complete, sessions.failed, sessions.cut) == (12, 1, 2)
    assert sessions.e2e_s.tolist() == pytest.approx([5.0] * 11 + [8.0])
    assert sessions.turns.tolist() == [4] * 12
    assert [t.tolist() for t in sessions.ttft_by_turn_s] == [
        pytest.approx([0.1 * (k + 1)] * 12) for k in range(4)]
    assert np.all(np.diff(sessions.started_unix_s) >= 0)
    series = run_series(table, 60.0)
    assert series.session_e2e_s.tolist() == sessions.e2e_s.tolist()
    # no session_turns column (an older run folder): no sessions
    older = table.drop_columns(["session_turns"])
    assert session_series(older).counted == 0


def test_a_session_slo_is_judged_on_the_sessions() -> None:
    assert "session_e2e" in METRICS and "session_e2e" not in PER_REQUEST_LATENCY_METRICS
    rows = []
    for k in range(60):  # 40 sessions of 5 s, 20 of 11 s (p90 about 11 s)
        gap = 1.0 if k % 3 else 3.0
        rows += _session_rows(k, k, 1000.0 + k, 4, 4, 0.1, 0.5, gap)
    table = pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)
    series = run_series(table, 120.0)
    summary = summarize(series)
    for text, verdict in (("p90 < 60s", "PASS"), ("p90 < 8s", "FAIL"), ("mean < 60s", "PASS"),
                          ("p50 < 6s", "PASS")):
        scenario, _ = load_scenario("chat", ["traffic.profile=agent",
                                             f'slo={{session_e2e: ["{text}"]}}'])
        (result,) = evaluate_slos(scenario.slo.rules(), series, summary)
        assert result.verdict.value == verdict, (text, result)
        assert result.observed.n == 60
    p90 = evaluate_slos(load_scenario("chat", ['slo={session_e2e: ["p90 < 60s"]}'])[0]
                        .slo.rules(), series, summary)[0]
    assert p90.observed.value == pytest.approx(11.0)
    assert "sessions below the threshold" in p90.basis
    # not a per-request rule: goodput counts every request as meeting it
    scenario, _ = load_scenario("chat", ['slo={session_e2e: ["p90 < 1s"]}'])
    estimate, _ = goodput(scenario.slo.rules(), series)
    assert estimate.value == pytest.approx(summary.requests_per_s.value)


def test_a_session_run_folder_reports_its_sessions(tmp_path) -> None:
    """summary.json (schema-valid, `sessions` only for a run with sessions), the terminal's
    sessions line and report.html's row, from a run folder written as the runner writes one."""
    import jsonschema
    import yaml

    from vllm_slo.reports.run_report import render_run
    from vllm_slo.run_folder.samples_format import SampleWriter

    repo = Path(__file__).resolve().parents[2]
    scenario, _ = load_scenario("agent", ["traffic.duration=60s",
                                          'slo={session_e2e: ["p90 < 60s"]}'])
    run_dir = tmp_path / "agent-run"
    run_dir.mkdir()
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(scenario.to_yaml_dict()))
    writer = SampleWriter(run_dir / "samples" / "samples-host-1.arrows")
    rows = []
    for k in range(12):
        rows += _session_rows(k, k, 1000.0 + k, 4, 4, 0.1, 0.5, 1.0)
    rows += _session_rows(40, 40, 1001.0, 2, 4, 0.1, 0.5, 1.0)  # cut
    for row in rows:
        writer.append(row)
    writer.close()
    rendered = render_run(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    jsonschema.validate(summary, json.loads(
        (repo / "reports" / "schema" / "summary.schema.json").read_text()))
    sessions = summary["sessions"]
    assert (sessions["complete"], sessions["failed"], sessions["cut"]) == (12, 0, 1)
    assert sessions["turns_mean"] == 4.0
    assert sessions["duration"]["count"] == 12
    assert sessions["duration"]["percentiles"]["p50"]["value"] == pytest.approx(5.0)
    assert [t["percentiles"]["p50"]["value"] for t in sessions["ttft_by_turn"]] == \
        pytest.approx([0.1, 0.2, 0.3, 0.4])
    line = ("sessions: 12 complete, 0 failed, 1 cut · 4.0 turns · duration p50/p90 "
            "5.00s/5.00s · ttft p50 by turn 100.0ms 200.0ms 300.0ms 400.0ms")
    assert line in rendered.text
    assert "12 complete, 0 failed, 1 cut" in (run_dir / "report.html").read_text()
    (slo,) = summary["slos"]
    assert slo["metric"] == "session_e2e" and slo["observed"]["n"] == 12
    # a run of another profile has no sessions key
    chat_dir = tmp_path / "chat-run"
    chat_dir.mkdir()
    (chat_dir / "scenario.yaml").write_text(
        yaml.safe_dump(load_scenario("chat", [])[0].to_yaml_dict()))
    writer = SampleWriter(chat_dir / "samples" / "samples-host-1.arrows")
    for row in rows[:8]:
        writer.append({**row, "session_turns": None, "profile": "chat"})
    writer.close()
    render_run(chat_dir)
    assert "sessions" not in json.loads((chat_dir / "summary.json").read_text())


def test_a_user_waiting_on_its_tool_counts_as_busy() -> None:
    """The client's health check counts an agent session's tool wait as deliberate, as it
    counts think time: the pause after a turn is the next turn's tool latency while the session
    goes on, the think time after its last turn or a failed one."""
    import numpy as np
    import pyarrow as pa

    from vllm_slo.analysis.client_health import deliberate_pauses_s
    from vllm_slo.scenarios.profile_specs.agent import (
        AgentSpec,
        session_pauses_s,
        tool_latency_s,
    )

    spec = AgentSpec.model_validate({"turns": 3, "tool_latency": {"kind": "uniform",
                                                                  "min_s": 0.2, "max_s": 0.6}})
    conversation = np.array([4, 4, 4, 5])
    turn = np.array([0, 1, 2, 0])
    session_turns = np.array([3, 3, 3, 3])
    ok = np.array([True, True, True, False])
    pauses = session_pauses_s(spec, 7, conversation, turn, session_turns, ok)
    assert pauses[0] == tool_latency_s(spec.tool_latency, 7, 4, 1)
    assert pauses[1] == tool_latency_s(spec.tool_latency, 7, 4, 2)
    assert 0.2 <= pauses[0] <= 0.6 and pauses[0] != pauses[1]
    assert np.isnan(pauses[2]) and np.isnan(pauses[3])  # last turn; a failed turn
    table = pa.table({"x": [1, 2, 3, 4]})
    chosen = deliberate_pauses_s(table, 0.1, None, pauses)
    assert list(chosen[:2]) == list(pauses[:2]) and list(chosen[2:]) == [0.1, 0.1]
