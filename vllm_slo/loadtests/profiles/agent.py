"""`profile: agent`: agentic sessions (settings: vllm_slo/scenarios/profile_specs/agent.py).

Session c (its own generator, `random.Random(f"{seed}:agent:{c}")`): turn 0 is the shared
system prompt and the task; turn k > 0 is turn k-1's messages plus turn k-1's answer (a fixed
seeded stand-in of `output_tokens` tokens) plus a tool result of its own size (tokens by the
plan's tokenizer, exact). So turn k's messages hold exactly `answer + tool result` tokens more
than turn k-1's, and every run and arm sends the same bytes (the plan's sha256 says so).
With `fan_out`, the join turn (`at_turn + 1`) adds the spawning answer and one result per
sub-agent instead (`sub_agents`); the sub-agents' requests stand in the plan between the
parent's turn `at_turn` and the join, each marked with its `branch`.

What the users add at send time (the tool's latency, the OpenAI tool-call framing: the
answer is text, so vLLM needs no tool parser) is vllm_slo/loadtests/agent_session.py. The
plan holds role `tool` for tool results either way; `tool_format: text` turns them into user
messages in the plan itself.
"""

from __future__ import annotations

import random

from vllm_slo.loadtests.plan_fitting import Candidate, Message, Tally
from vllm_slo.loadtests.profiles.base import Conversations, Profile, conversation_plan
from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.profile_specs.agent import PROFILE as NAME
from vllm_slo.scenarios.profile_specs.agent import AgentSpec
from vllm_slo.scenarios.traffic_spec import TrafficSpec

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


def _streams_per_user(traffic: TrafficSpec) -> int:
    """A session's sub-agents run at once, a request each in flight."""
    fan_out = traffic.settings(AgentSpec).fan_out
    return 1 if fan_out is None else fan_out.branches


plan = conversation_plan(conversations, _turns)
# a turn is a chat turn's work at least; the tool latency is waited on top
PROFILE = Profile(NAME, plan, fastest_request_s=0.05, streams_per_user=_streams_per_user)
