"""Agentic sessions on vLLM's CPU build (issue 42.3), attached to the shared server: 15 s of
sessions whose every later turn carries a tool call and its result in OpenAI's framing
(`tools` with `tool_choice: none`, an assistant `tool_calls` entry, a `tool` message). vLLM
takes every request, the context the server counts grows by each turn's answer and tool
result, and the run judges `session_e2e` on complete sessions."""

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


def test_agent_sessions_with_a_tool_message_per_turn(shared_vllm: VllmServer,
                                                     tmp_path: Path) -> None:
    result = run_cli([
        "run", "scenario=agent", f"server.url={shared_vllm.base_url}", "traffic.duration=15s",
        "traffic.warmup=3s", "traffic.arrival={kind: closed, users: 3, think_time: 0.1s}",
        f"traffic.agent={{turns: {TURNS}, system_prompt_tokens: 100, task_tokens: 30, "
        f"output_tokens: {OUTPUT_TOKENS}, tool_result_tokens: {RESULT_TOKENS}, "
        "tool_latency: {kind: constant, mean: 0.2s}, tool_format: openai}",
        'slo={session_e2e: ["p50 < 10min"], error_rate: "< 50%"}'], tmp_path)
    assert result.run_dir is not None, result.output
    assert result.returncode in (0, 3), result.output  # a 10 min session is never failed
    table = pq.read_table(result.run_dir / "samples.parquet")
    rows = table.to_pylist()
    # vLLM's OpenAI server took every request, its tool messages and `tools` included
    assert rows and all(row["ok"] for row in rows), {row["error"] for row in rows}
    assert {row["session_turns"] for row in rows} == {TURNS}
    assert max(row["turn"] for row in rows) == TURNS - 1
    # the server's prompt count grows by the answer and the tool result, and by the two
    # messages' template tokens (role tags) only
    by_session: dict[tuple[int, int, int], dict[int, dict]] = defaultdict(dict)
    for row in rows:
        by_session[(row["process_id"], row["user_id"], row["conversation_id"])][
            row["turn"]] = row
    grown = 0
    for turns in by_session.values():
        for turn in range(1, TURNS):
            if turn in turns and turn - 1 in turns:
                planned = (turns[turn]["prompt_tokens_planned"]
                           - turns[turn - 1]["prompt_tokens_planned"])
                served = turns[turn]["prompt_tokens"] - turns[turn - 1]["prompt_tokens"]
                assert planned == OUTPUT_TOKENS + RESULT_TOKENS, turns
                assert planned <= served <= planned + 24, (planned, served)
                grown += 1
    assert grown >= 3
    sessions = session_series(table)
    assert sessions.complete >= 2, sessions
    assert all(d >= (TURNS - 1) * 0.2 for d in sessions.e2e_s)
    summary = result.json("summary.json")
    (judged,) = [slo for slo in summary["slos"] if slo["metric"] == "session_e2e"]
    assert judged["observed"]["n"] == sessions.complete and judged["verdict"] != "FAIL"
