"""`profile: agent`: agentic sessions (settings: vllm_slo/scenarios/profile_specs/agent.py).

Session c (its own generator, `random.Random(f"{seed}:agent:{c}")`): turn 0 is the shared
system prompt and the task; turn k > 0 is turn k-1's messages plus turn k-1's answer (a fixed
seeded stand-in of `output_tokens` tokens) plus a tool result of its own size (tokens by the
plan's tokenizer, exact). So turn k's messages hold exactly `answer + tool result` tokens more
than turn k-1's, and every run and arm sends the same bytes (the plan's sha256 says so).
With `fan_out`, the join turn (`at_turn + 1`) adds the spawning answer and one result per
sub-agent instead (`sub_agents`); the sub-agents' requests stand in the plan between the
parent's turn `at_turn` and the join, each marked with its `branch`.

What the users add at send time (pure functions here, used by vllm_slo/loadtests/users.py):
- the wait before turn k > 0, the tool's latency, from the session's own generator
  (`tool_latency_s`; between sessions the user waits `arrival.think_time` as ever);
- with `tool_format: openai`, the tool-call framing vLLM's OpenAI server takes
  (`openai_tool_messages`, `TOOLS`): each answer before a tool result becomes an assistant
  message with one `tool_calls` entry, the result a `tool` message answering its id, and the
  request carries `tools` with `tool_choice: none` (the answer is text; vLLM needs no tool
  parser for that). The plan holds role `tool` for those results either way; `text` turns
  them into user messages in the plan itself.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vllm_slo.loadtests.plan_fitting import Candidate, Message, Tally
from vllm_slo.loadtests.profiles.base import Conversations, Profile, conversation_plan
from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.profile_specs.agent import PROFILE as NAME
from vllm_slo.scenarios.profile_specs.agent import AgentSpec, tool_latency_s
from vllm_slo.scenarios.traffic_spec import TrafficSpec

if TYPE_CHECKING:  # plan.py imports the profiles
    from vllm_slo.loadtests.plan import PlannedRequest

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
TOOL_RESULT_ROLE = {"openai": "tool", "text": "user"}


def tool_result_tokens(spec: AgentSpec, rng: random.Random) -> int:
    """One tool result's size: `tool_result_tokens`, or uniform in ± its spread."""
    if spec.tool_result_spread == 0:
        return spec.tool_result_tokens
    spread = spec.tool_result_spread
    return max(1, round(rng.uniform(1 - spread, 1 + spread) * spec.tool_result_tokens))


def conversations(traffic: TrafficSpec, seed: int, counter: TokenCounter, words: WordTexts,
                  max_model_len: int | None, tally: Tally) -> Conversations:
    spec = traffic.settings(AgentSpec)
    if traffic.arrival.open_loop:  # sessions are sequential: a turn waits for the answer
        raise ValueError("traffic.profile agent needs a closed-loop arrival (kind: closed): "
                         "a session's turns follow each other, users are concurrent sessions")
    shared: list[Message] = []
    if spec.system_prompt_tokens > 0:
        system_rng = random.Random(f"{seed}:agent:system")
        shared.append(Message("system", words.text(system_rng, spec.system_prompt_tokens),
                              target=spec.system_prompt_tokens, generated=True))
    result_role = TOOL_RESULT_ROLE[spec.tool_format]

    def conversation(c: int) -> list[Candidate]:
        rng = random.Random(f"{seed}:agent:{c}")
        history = [*shared, Message("user", words.text(rng, spec.task_tokens),
                                    target=spec.task_tokens, generated=True)]
        turns = [Candidate(c, 0, list(history), spec.output_tokens, NAME)]
        for turn in range(1, spec.turns):
            if spec.fan_out is not None and turn == spec.fan_out.at_turn + 1:  # the join
                answer = Message("assistant", words.text(rng, spec.output_tokens),
                                 target=spec.output_tokens, generated=True)
                branches, results = sub_agents(spec, seed, c, [*history, answer], words)
                turns += branches
                history += [answer, *results]
            else:
                result = tool_result_tokens(spec, rng)
                history += [Message("assistant", words.text(rng, spec.output_tokens),
                                    target=spec.output_tokens, generated=True),
                            Message(result_role, words.text(rng, result), target=result,
                                    generated=True)]
            turns.append(Candidate(c, turn, list(history), spec.output_tokens, NAME))
        return turns

    return conversation


def sub_agents(spec: AgentSpec, seed: int, c: int, context: list[Message], words: WordTexts
               ) -> tuple[list[Candidate], list[Message]]:
    """Session c's sub-agents (`fan_out`), each from its own generator
    (`random.Random(f"{seed}:agent:{c}:branch:{b}")`): branch b's turn 0 is the parent's
    `context` (up to the answer that spawned it) plus its task; each later turn adds its
    answer and a tool result, as the parent's do. Returns their requests, branch after branch,
    and each one's final answer (a stand-in of `output_tokens`) as the tool result the join
    turn holds, in branch order."""
    fan_out = spec.fan_out
    assert fan_out is not None
    role = TOOL_RESULT_ROLE[spec.tool_format]
    requests: list[Candidate] = []
    finals: list[Message] = []
    for b in range(fan_out.branches):
        rng = random.Random(f"{seed}:agent:{c}:branch:{b}")
        history = [*context, Message("user", words.text(rng, fan_out.task_tokens),
                                     target=fan_out.task_tokens, generated=True)]
        requests.append(Candidate(c, 0, list(history), spec.output_tokens, NAME, branch=b))
        for turn in range(1, fan_out.turns):
            result = tool_result_tokens(spec, rng)
            history += [Message("assistant", words.text(rng, spec.output_tokens),
                                target=spec.output_tokens, generated=True),
                        Message(role, words.text(rng, result), target=result, generated=True)]
            requests.append(Candidate(c, turn, list(history), spec.output_tokens, NAME,
                                      branch=b))
        finals.append(Message(role, words.text(rng, spec.output_tokens),
                              target=spec.output_tokens, generated=True))
    return requests, finals


def _turns(traffic: TrafficSpec) -> int:
    return traffic.settings(AgentSpec).requests_per_session


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


def _streams_per_user(traffic: TrafficSpec) -> int:
    """A session's sub-agents run at once, a request each in flight."""
    fan_out = traffic.settings(AgentSpec).fan_out
    return 1 if fan_out is None else fan_out.branches


plan = conversation_plan(conversations, _turns)
# a turn is a chat turn's work at least; the tool latency is waited on top
PROFILE = Profile(NAME, plan, fastest_request_s=0.05, streams_per_user=_streams_per_user)
