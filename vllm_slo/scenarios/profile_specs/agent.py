"""`profile: agent`'s settings (`traffic.agent`) and its per-session metric; the generator is
vllm_slo/loadtests/profiles/agent.py, the sessions' analysis vllm_slo/analysis/sessions.py.

An agentic session is one conversation of `turns` requests: turn 0 is the task (a system
prompt and a user message); each later turn's context is the previous turn's context plus that
turn's answer (a fixed seeded stand-in of `output_tokens` tokens, as chat's answers are, so
every run and arm sends the same bytes) plus a tool result of `tool_result_tokens` tokens. The
user waits the tool's latency between turns (drawn per turn from `tool_latency`) and the
think time between sessions; closed-loop users are the concurrent sessions.

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


class AgentSpec(Frozen):
    """Agentic sessions: a task, then turns that each add the answer and a tool result."""

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


SPEC = ProfileSpec(PROFILE, AgentSpec)


def session_e2e_s(run: MeasuredRun) -> np.ndarray:
    """Complete measured sessions' durations (seconds), in the order they started."""
    return run.session_e2e_s


SESSION_E2E = register_metric(Metric(
    "session_e2e", MetricKind.LATENCY, "Session duration", "", lower_is_better=True,
    samples=session_e2e_s, summary_field="", sampled_per="session"))


def tool_latency_s(latency: ToolLatency, seed: int, conversation_id: int, turn: int) -> float:
    """The wait before turn `turn` (> 0) of session `conversation_id`: the tool's latency,
    drawn from the session's own generator (the same in every run and arm)."""
    if turn <= 0 or latency.kind == "constant":
        return latency.mean_s if turn > 0 else 0.0
    rng = random.Random(f"{seed}:agent:tool-latency:{conversation_id}:{turn}")
    if latency.kind == "uniform":
        assert latency.max_s is not None  # the model requires it
        return rng.uniform(latency.min_s, latency.max_s)
    drawn = latency.min_s + (rng.expovariate(1.0 / latency.mean_s) if latency.mean_s > 0
                             else 0.0)
    return drawn if latency.max_s is None else min(drawn, latency.max_s)


def session_pauses_s(spec: AgentSpec, seed: int, conversation_id: np.ndarray, turn: np.ndarray,
                     session_turns: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Per row, the wait its user chose after it within a session: the tool latency before the
    session's next turn (`tool_latency_s`) where one follows (a successful turn that is not its
    session's last), NaN elsewhere (the think time applies: between sessions, after a failed
    turn). What the client's health check counts as deliberate, like think time."""
    pauses = np.full(conversation_id.size, np.nan)
    for row in np.flatnonzero(ok & (turn + 1 < session_turns)):
        pauses[row] = tool_latency_s(spec.tool_latency, seed, int(conversation_id[row]),
                                     int(turn[row]) + 1)
    return pauses
