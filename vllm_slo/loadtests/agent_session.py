"""What a Locust user adds to an agent run's plan at send time (`profile: agent`; the plan
is made by vllm_slo/loadtests/profiles/agent.py, the users are vllm_slo/loadtests/users.py):
- the wait before turn k > 0, the tool's latency, from the session's own generator
  (`AgentSession.tool_latency_s`; between sessions the user waits `arrival.think_time`);
- a session's plan positions split at its fan-out (`AgentSession.steps`);
- with `tool_format: openai`, the tool-call framing vLLM's OpenAI server takes
  (`openai_tool_messages`, `TOOLS`): each answer before a tool result becomes an assistant
  message with one `tool_calls` entry, the result a `tool` message answering its id, and the
  request carries `tools` with `tool_choice: none`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vllm_slo.loadtests.plan import PlannedRequest
from vllm_slo.scenarios.profile_specs.agent import PROFILE as NAME
from vllm_slo.scenarios.profile_specs.agent import AgentSpec, tool_latency_s
from vllm_slo.scenarios.traffic_spec import TrafficSpec

TOOL_NAME = "search"
# the one tool every openai-formatted request declares
TOOLS: tuple[dict[str, Any], ...] = ({
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": "Search the workspace and return the matching text.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}},
                       "required": ["query"]},
    },
},)

def tool_call_id(conversation_id: int, turn: int) -> str:
    """The id of the call whose result turn `turn`'s context adds (stable across runs)."""
    return f"call_{conversation_id}_{turn}"


def openai_tool_messages(messages: Sequence[Mapping[str, str]], conversation_id: int
                         ) -> list[dict[str, Any]]:
    """The plan's messages with the tool-call framing: the assistant message before a run of
    `tool` messages calls TOOL_NAME once per message of the run (a join turn's run holds one
    result per sub-agent: parallel calls), each tool message answers its call's id. The
    contents are the plan's, untouched (the framing adds the template's tool-call tokens
    only)."""
    out: list[dict[str, Any]] = []
    results = 0
    caller: dict[str, Any] | None = None  # the assistant message the current run answers
    for message in messages:
        entry: dict[str, Any] = dict(message)
        if message["role"] == "tool":
            results += 1
            call = tool_call_id(conversation_id, results)
            previous = out[-1] if out else None
            if previous is not None and previous["role"] == "assistant":
                caller = previous
            elif previous is None or previous["role"] != "tool":
                caller = None
            if caller is None:
                raise ValueError("a tool message must follow the assistant message that "
                                 "called the tool")
            caller.setdefault("tool_calls", []).append({
                "id": call, "type": "function",
                "function": {"name": TOOL_NAME,
                             "arguments": json.dumps({"query": f"step {results}"})}})
            entry["tool_call_id"] = call
        out.append(entry)
    return out


@dataclass(frozen=True, slots=True)
class SessionSteps:
    """One session's plan positions as its user sends them: the parent's turns `before` the
    fan-out (up to and including the turn that spawns the sub-agents), then each sub-agent's
    turns (`branches`, run concurrently), then the parent's turns `after` them (the join
    first). Without `fan_out` every turn is `before`."""

    before: tuple[int, ...]
    branches: tuple[tuple[int, ...], ...] = ()
    after: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class AgentSession:
    """What a Locust process needs of an agent run's plan: each session's requests (the rows'
    `session_turns`) and their order (`steps`), the wait before a turn and the request's
    tool-call framing."""

    spec: AgentSpec
    seed: int
    requests: Sequence[PlannedRequest]
    turns: Mapping[int, int]  # conversation -> the plan's requests of it (sub-agents' too)

    @classmethod
    def of(cls, traffic: TrafficSpec, requests: Sequence[PlannedRequest]
           ) -> AgentSession | None:
        """The plan's sessions; None unless `traffic.profile` is agent."""
        if traffic.profile != NAME:
            return None
        turns = Counter(request.conversation_id for request in requests)
        return cls(traffic.settings(AgentSpec), traffic.seed, requests, dict(turns))

    def turns_of(self, conversation_id: int) -> int:
        return self.turns[conversation_id]

    def steps(self, positions: Sequence[int]) -> SessionSteps:
        """A session's plan positions (in plan order) split at its fan-out."""
        fan_out = self.spec.fan_out
        if fan_out is None:
            return SessionSteps(tuple(positions))
        before: list[int] = []
        after: list[int] = []
        branches: dict[int, list[int]] = {}
        for position in positions:
            request = self.requests[position % len(self.requests)]
            if request.branch is not None:
                branches.setdefault(request.branch, []).append(position)
            else:
                (before if request.turn <= fan_out.at_turn else after).append(position)
        return SessionSteps(tuple(before), tuple(tuple(branches[b]) for b in sorted(branches)),
                            tuple(after))

    def tool_latency_s(self, position: int) -> float:
        """The wait before plan entry `position` (a turn after the first of its chain)."""
        request = self.requests[position % len(self.requests)]
        return tool_latency_s(self.spec.tool_latency, self.seed, request.conversation_id,
                              request.turn, request.branch)

    def framed(self, request: PlannedRequest, extra_body: Mapping[str, Any]
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The request's chat messages and extra body fields as sent: with `tool_format:
        openai` the tool-call framing and `tools` (`tool_choice: none`), else as planned."""
        if self.spec.tool_format != "openai":
            return [dict(m) for m in request.messages], dict(extra_body)
        return (openai_tool_messages(request.messages, request.conversation_id),
                {"tools": list(TOOLS), "tool_choice": "none", **extra_body})
