"""`profile: agent`'s settings (`traffic.agent`) and its per-session metric; the generator is
vllm_slo/loadtests/profiles/agent.py, the sessions' analysis vllm_slo/analysis/sessions.py.

An agentic session is one conversation of `turns` requests: turn 0 is the task (a system
prompt and a user message); each later turn's context is the previous turn's context plus that
turn's answer (a fixed seeded stand-in of `output_tokens` tokens, as chat's answers are, so
every run and arm sends the same bytes) plus a tool result of `tool_result_tokens` tokens. The
user waits the tool's latency between turns (drawn per turn from `tool_latency`) and the
think time between sessions; closed-loop users are the concurrent sessions. With `fan_out`,
one parent turn's answer spawns parallel sub-agents (each a chain of its own turns), joined at
the parent's next turn (`FanOut`; docs/traffic-agent.md).

`session_e2e` (registered below) is an SLO key and a cell like `ttft`: one value per complete
session that started in the measured window, from its first turn's intended send to its last
turn's end (`slo: {session_e2e: ["p90 < 60s"]}`).
"""

from __future__ import annotations

import random
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from vllm_slo.scenarios.metrics import MeasuredRun, Metric, MetricKind, register_metric
from vllm_slo.scenarios.model_base import Frozen, Seconds
from vllm_slo.scenarios.profile_specs.registry import ProfileSpec

PROFILE = "agent"


class ToolLatency(Frozen):
    """How long a tool runs between two turns of a session (seconds, drawn per turn from the
    session's own seeded generator: the same waits in every run and arm)."""

    kind: Literal["constant", "uniform", "exponential"] = Field(
        "constant", description="constant: `mean` every time; uniform: in [min, max]; "
        "exponential: `min` plus an exponential wait of mean `mean`, capped at `max`")
    mean_s: Seconds = Field(1.0, alias="mean", ge=0)
    min_s: Seconds = Field(0.0, alias="min", ge=0)
    max_s: Seconds | None = Field(None, alias="max", ge=0,
                                  description="uniform: the upper bound (required); "
                                  "exponential: a cap (default: none)")

    @model_validator(mode="after")
    def _bounds(self) -> ToolLatency:
        if self.kind == "uniform" and (self.max_s is None or self.max_s < self.min_s):
            raise ValueError("tool_latency: uniform needs max >= min")
        return self


class FanOut(Frozen):
    """Parallel sub-agents: parent turn `at_turn`'s answer spawns `branches` sub-agents, each a
    chain of `turns` requests of its own, run concurrently; parent turn `at_turn + 1` (the
    join) waits for all of them and holds each one's final answer as a tool result."""

    at_turn: int = Field(ge=0, description="the parent turn whose answer spawns the "
                         "sub-agents (0 .. turns - 2: a later parent turn joins them)")
    branches: int = Field(2, ge=1, le=64, description="sub-agents, run concurrently")
    turns: int = Field(2, ge=1, description="requests of each sub-agent")
    task_tokens: int = Field(50, ge=1, description="each sub-agent's own task message, after "
                             "the parent's context and the answer that spawned it")


class AgentSpec(Frozen):
    """Agentic sessions: a task, then turns that each add the answer and a tool result;
    optionally one fan-out to parallel sub-agents (`fan_out`, default none)."""

    turns: int = Field(4, ge=1, description="requests per session (the task is turn 0)")
    system_prompt_tokens: int = Field(300, ge=0, description="shared by every session")
    task_tokens: int = Field(100, ge=1, description="the user's task, turn 0")
    output_tokens: int = Field(64, ge=1, description="max_tokens of each turn, and the length "
                               "of the stand-in answer each later turn's context holds")
    tool_result_tokens: int = Field(200, ge=1, description="each tool result (the message "
                                    "after each answer), in tokens of the plan's tokenizer")
    tool_result_spread: float = Field(
        0.0, ge=0, lt=1, description="each tool result uniform in ±this share of "
        "tool_result_tokens (0: exactly tool_result_tokens)")
    tool_latency: ToolLatency = Field(default_factory=ToolLatency)
    tool_format: Literal["openai", "text"] = Field(
        "openai", description="openai: `tools` in the request, the answer as an assistant "
        "message with `tool_calls`, the result as a `tool` message (vLLM's OpenAI server takes "
        "them; `tool_choice: none`); text: the result as a user message")
    fan_out: FanOut | None = Field(None, description="parallel sub-agents joined before the "
                                   "next parent turn (default: none, one sequential chain)")

    @model_validator(mode="after")
    def _join_turn(self) -> AgentSpec:
        fan_out = self.fan_out
        if fan_out is not None and fan_out.at_turn > self.turns - 2:
            allowed = ("none: turns must be at least 2" if self.turns < 2
                       else f"0 .. {self.turns - 2}")
            raise ValueError(
                f"fan_out.at_turn {fan_out.at_turn} leaves no parent turn to join the "
                f"sub-agents at (turns {self.turns}); allowed at_turn: {allowed}")
        return self

    @property
    def requests_per_session(self) -> int:
        """Every request of a whole session: the parent's turns and each sub-agent's."""
        fan_out = self.fan_out
        return self.turns + (0 if fan_out is None else fan_out.branches * fan_out.turns)


SPEC = ProfileSpec(PROFILE, AgentSpec)


def session_e2e_s(run: MeasuredRun) -> np.ndarray:
    """Complete measured sessions' durations (seconds), in the order they started."""
    return run.session_e2e_s


SESSION_E2E = register_metric(Metric(
    "session_e2e", MetricKind.LATENCY, "Session duration", "", lower_is_better=True,
    samples=session_e2e_s, summary_field="", sampled_per="session"))


def tool_latency_s(latency: ToolLatency, seed: int, conversation_id: int, turn: int,
                   branch: int | None = None) -> float:
    """The wait before turn `turn` (> 0) of session `conversation_id` (of its sub-agent
    `branch`; None: the parent chain): the tool's latency, drawn from the session's own
    generator (the same in every run and arm)."""
    if turn <= 0 or latency.kind == "constant":
        return latency.mean_s if turn > 0 else 0.0
    chain = "" if branch is None else f"branch{branch}:"
    rng = random.Random(f"{seed}:agent:tool-latency:{conversation_id}:{chain}{turn}")
    if latency.kind == "uniform":
        assert latency.max_s is not None  # the model requires it
        return rng.uniform(latency.min_s, latency.max_s)
    drawn = latency.min_s + (rng.expovariate(1.0 / latency.mean_s) if latency.mean_s > 0
                             else 0.0)
    return drawn if latency.max_s is None else min(drawn, latency.max_s)


def plan_position(spec: AgentSpec, turn: int, branch: int | None = None) -> int:
    """Where a session's request stands among the session's requests in the plan: the parent's
    turns up to the fan-out, then each sub-agent's turns, branch after branch, then the parent's
    later turns (a plan cut short keeps a prefix of this order)."""
    fan_out = spec.fan_out
    if fan_out is None:
        return turn
    if branch is not None:
        return fan_out.at_turn + 1 + branch * fan_out.turns + turn
    return turn if turn <= fan_out.at_turn else turn + fan_out.branches * fan_out.turns


def session_pauses_s(spec: AgentSpec, seed: int, conversation_id: np.ndarray, turn: np.ndarray,
                     session_turns: np.ndarray, ok: np.ndarray,
                     branch: np.ndarray | None = None) -> np.ndarray:
    """Per row, the wait its user chose after it within a session: the tool latency before the
    next turn of its chain (`tool_latency_s`; the parent's or its sub-agent's) where one
    follows in the plan (`session_turns`: the session's planned requests), 0 after the
    fan-out turn (the sub-agents start at once) and after a sub-agent's last turn, NaN
    elsewhere (the think time applies: between sessions, after a failed turn). `branch`: per
    row, its sub-agent, -1 for the parent chain (None: no fan-out). What the client's health
    check counts as deliberate, like think time; the parent's wait on its sub-agents is
    measured from the rows (`analysis.sessions.agent_waits`)."""
    pauses = np.full(conversation_id.size, np.nan)
    branches = np.full(conversation_id.size, -1) if branch is None else branch
    fan_out = spec.fan_out
    for row in np.flatnonzero(ok):
        b = int(branches[row])
        t, planned = int(turn[row]), int(session_turns[row])
        if b < 0:
            if fan_out is not None and t == fan_out.at_turn:
                pauses[row] = 0.0 if plan_position(spec, t) + 1 < planned else np.nan
            elif t + 1 < spec.turns and plan_position(spec, t + 1) < planned:
                pauses[row] = tool_latency_s(spec.tool_latency, seed, int(conversation_id[row]),
                                             t + 1)
            continue
        assert fan_out is not None  # a sub-agent's row
        if t + 1 < fan_out.turns and plan_position(spec, t + 1, b) < planned:
            pauses[row] = tool_latency_s(spec.tool_latency, seed, int(conversation_id[row]),
                                         t + 1, b)
        else:
            pauses[row] = 0.0
    return pauses
