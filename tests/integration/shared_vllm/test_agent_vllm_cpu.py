"""Agentic sessions on vLLM's CPU build (issue 42.3), attached to the shared server: 15 s of
sessions whose every later turn carries a tool call and its result in OpenAI's framing
(`tools` with `tool_choice: none`, an assistant `tool_calls` entry, a `tool` message). vLLM
takes every request, the context the server counts grows by each turn's answer and tool
result, and the run judges `session_e2e` on complete sessions. Each session fans out to two
sub-agents after turn 1 (`fan_out`): vLLM takes the join's parallel tool calls (one assistant
message calling the tool twice, two `tool` messages), and the sessions are whole."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import requires_vllm, run_cli
from vllm_slo.analysis.sessions import session_series
from vllm_slo.servers.vllm_server import VllmServer

pytestmark = [pytest.mark.integration, requires_vllm]

TURNS = 3
OUTPUT_TOKENS = 8
RESULT_TOKENS = 60
BRANCHES, BRANCH_TURNS, BRANCH_TASK = 2, 2, 20
PLANNED = TURNS + BRANCHES * BRANCH_TURNS


def test_agent_sessions_with_a_tool_message_per_turn(shared_vllm: VllmServer,
                                                     tmp_path: Path) -> None:
    result = run_cli([
        "run", "scenario=agent", f"server.url={shared_vllm.base_url}", "traffic.duration=8s",
        "traffic.warmup=2s", "traffic.arrival={kind: closed, users: 3, think_time: 0.1s}",
        f"traffic.agent={{turns: {TURNS}, system_prompt_tokens: 100, task_tokens: 30, "
        f"output_tokens: {OUTPUT_TOKENS}, tool_result_tokens: {RESULT_TOKENS}, "
        "tool_latency: {kind: constant, mean: 0.2s}, tool_format: openai, "
        f"fan_out: {{at_turn: 1, branches: {BRANCHES}, turns: {BRANCH_TURNS}, "
        f"task_tokens: {BRANCH_TASK}}}}}",
        'slo={session_e2e: ["p50 < 10min"], error_rate: "< 50%"}'], tmp_path)
    assert result.run_dir is not None, result.output
    assert result.returncode in (0, 3), result.output  # a 10 min session is never failed
    table = pq.read_table(result.run_dir / "samples.parquet")
    rows = table.to_pylist()
    # vLLM's OpenAI server took every request, its tool messages and `tools` included
    assert rows and all(row["ok"] for row in rows), {row["error"] for row in rows}
    assert {row["session_turns"] for row in rows} == {PLANNED}
    assert max(row["turn"] for row in rows if row["branch"] is None) == TURNS - 1
    assert {row["branch"] for row in rows} == {None, *range(BRANCHES)}
    # the server's prompt count grows by what the plan added, and by the added messages'
    # template tokens (role tags, tool calls) only: turn 1 adds an answer and a tool result,
    # a sub-agent's turn 0 the spawning answer and its task, the join (turn 2) the spawning
    # answer and one result per sub-agent (its final answer)
    by_session: dict[tuple[int, int, int], dict[tuple[int, int], dict]] = defaultdict(dict)
    for row in rows:
        by_session[(row["process_id"], row["user_id"], row["conversation_id"])][
            (-1 if row["branch"] is None else row["branch"], row["turn"])] = row
    steps = [((-1, 0), (-1, 1), OUTPUT_TOKENS + RESULT_TOKENS, 1),
             ((-1, 1), (0, 0), OUTPUT_TOKENS + BRANCH_TASK, 1),
             ((-1, 1), (1, 0), OUTPUT_TOKENS + BRANCH_TASK, 1),
             ((-1, 1), (-1, 2), OUTPUT_TOKENS + BRANCHES * OUTPUT_TOKENS, BRANCHES)]
    grown = 0
    for requests in by_session.values():
        for before, after, added, results in steps:
            if before in requests and after in requests:
                planned = (requests[after]["prompt_tokens_planned"]
                           - requests[before]["prompt_tokens_planned"])
                served = requests[after]["prompt_tokens"] - requests[before]["prompt_tokens"]
                assert planned == added, (before, after, planned)
                assert planned <= served <= planned + 24 * results, (planned, served)
                grown += after == (-1, 2)
    assert grown >= 2  # joins seen
    sessions = session_series(table)
    assert sessions.complete >= 2, sessions
    # the parent's tool before turn 1, then the sub-agents' tools (waited concurrently)
    assert all(d >= 2 * 0.2 for d in sessions.e2e_s)
    summary = result.json("summary.json")
    (judged,) = [slo for slo in summary["slos"] if slo["metric"] == "session_e2e"]
    assert judged["observed"]["n"] == sessions.complete and judged["verdict"] != "FAIL"
