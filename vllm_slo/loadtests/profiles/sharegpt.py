"""`profile: sharegpt`: every human turn of a ShareGPT file with its real history, through
vLLM bench's filters (prompt and output lengths, their total)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

from vllm_slo.loadtests.plan_fitting import (
    Candidate,
    Message,
    Tally,
    accept_fitted,
    count_tokens,
    fit_to_context,
)
from vllm_slo.loadtests.profiles.base import Profile
from vllm_slo.loadtests.prompts import DEFAULT_SHAREGPT_PATH, ShareGptConversation, load_sharegpt
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.profile_specs import ShareGptSpec
from vllm_slo.scenarios.traffic_spec import TrafficSpec

FILTER_REASONS = ("malformed", "no_reply", "prompt_too_short", "prompt_too_long",
                  "output_too_short", "output_too_long", "total_too_long")
_SHAREGPT_CHUNK = 256  # conversations counted per count_many call


def sharegpt_path(spec: ShareGptSpec) -> Path:
    """The file a ShareGPT run replays: `path`, or the shipped sample. The check before the
    server starts and the plan name it alike, so the plan takes the check's parse."""
    return Path(spec.path).expanduser() if spec.path else DEFAULT_SHAREGPT_PATH


def plan(traffic: TrafficSpec, seed: int, counter: TokenCounter, max_model_len: int | None,
         policy: str, n_requests: int, tally: Tally) -> list[Candidate]:
    """Entries in a seeded shuffled order, counted a chunk at a time (a real ShareGPT file is
    only tokenized as far as the plan needs); a second pass, reshuffled, reuses the first
    pass's requests."""
    spec = traffic.settings(ShareGptSpec)
    path = sharegpt_path(spec)
    if spec.max_prompt_tokens < spec.min_prompt_tokens:
        raise ValueError(f"max_prompt_tokens {spec.max_prompt_tokens} is below "
                         f"min_prompt_tokens {spec.min_prompt_tokens}")
    entries = load_sharegpt(path)
    tally.filtered = dict.fromkeys(FILTER_REASONS, 0)
    accepted: dict[int, list[Candidate]] = {}  # entry -> its requests (first pass)
    out: list[Candidate] = []
    conversation = 0
    passes = 0
    while len(out) < n_requests:
        order = list(range(len(entries)))
        random.Random(f"{seed}:sharegpt:order:{passes}").shuffle(order)
        for start in range(0, len(order), _SHAREGPT_CHUNK):
            if len(out) >= n_requests:
                break
            chunk = order[start:start + _SHAREGPT_CHUNK]
            if passes == 0:
                _sharegpt_first_pass(chunk, entries, conversation, spec, counter,
                                     max_model_len, policy, n_requests, accepted, out, tally)
            else:
                for offset, entry in enumerate(chunk):
                    for request in accepted.get(entry, ()):
                        if len(out) >= n_requests:
                            break
                        out.append(Candidate(conversation + offset, request.turn,
                                              request.messages, request.max_tokens,
                                              "sharegpt"))
            conversation += len(chunk)
        passes += 1
        if not out:
            counts = [f"{reason} {n}" for reason, n in tally.filtered.items() if n]
            if tally.rejected:
                counts.append(f"longer than the server's max-model-len {max_model_len}: "
                              f"{tally.rejected}")
            raise ValueError(
                f"{path}: no request passes the filters ({', '.join(counts)}); loosen the "
                "traffic.sharegpt limits"
                + (", raise server.args.max-model-len or set traffic.overlong=trim"
                   if tally.rejected else ""))
    if passes > 1:
        tally.warnings.append(
            f"sharegpt: {path.name} gives {sum(map(len, accepted.values()))} requests after "
            f"the filters; the plan of {n_requests} goes through it {passes} times (repeated "
            "prompts hit the prefix cache)")
    return out


def _sharegpt_first_pass(chunk: list[int], entries: Sequence[ShareGptConversation | str],
                         first_id: int, spec: ShareGptSpec, counter: TokenCounter,
                         max_model_len: int | None, policy: str, n_requests: int,
                         accepted: dict[int, list[Candidate]], out: list[Candidate],
                         tally: Tally) -> None:
    """Count a chunk of entries with one count_many call, filter, fit, accept in order."""
    per_entry: list[tuple[int, list[tuple[Candidate, Message] | str]]] = []
    counted: list[Message] = []
    for offset, entry in enumerate(chunk):
        item = entries[entry]
        if isinstance(item, str):
            per_entry.append((entry, ["malformed"]))
            continue
        messages = [Message(role, text) for role, text in item.turns]
        requests: list[tuple[Candidate, Message] | str] = []
        human_turns = [i for i, message in enumerate(messages) if message.role == "user"]
        if not spec.all_turns:
            human_turns = human_turns[:1]
        counted.extend(messages[: human_turns[-1] + 2])  # only what the requests hold
        for turn, i in enumerate(human_turns):
            if i + 1 < len(messages) and messages[i + 1].role == "assistant":
                requests.append((Candidate(first_id + offset, turn, messages[: i + 1], 0),
                                 messages[i + 1]))
            else:
                requests.append("no_reply")
        per_entry.append((entry, requests))
    count_tokens(counted, counter)
    candidates: list[Candidate] = []
    for _, requests in per_entry:
        for position, request in enumerate(requests):
            if isinstance(request, str):
                continue
            candidate, reply = request
            candidate.max_tokens = reply.tokens
            reason = _filter_reason(candidate, spec)
            if reason is None:
                candidates.append(candidate)
            else:
                requests[position] = reason
    fitted = dict(zip(map(id, candidates),
                      fit_to_context(candidates, max_model_len, policy, counter), strict=True))
    for entry, requests in per_entry:
        kept = accepted.setdefault(entry, [])
        for request in requests:
            if len(out) >= n_requests:
                return
            if isinstance(request, str):
                tally.filtered[request] += 1
                continue
            candidate = request[0]
            before = len(out)
            accept_fitted(fitted[id(candidate)], candidate, out, tally)
            if len(out) > before:
                kept.append(out[-1])


def _filter_reason(candidate: Candidate, spec: ShareGptSpec) -> str | None:
    prompt, output = candidate.prompt_tokens, candidate.max_tokens
    if prompt < spec.min_prompt_tokens:
        return "prompt_too_short"
    if prompt > spec.max_prompt_tokens:
        return "prompt_too_long"
    if output < spec.min_output_tokens:
        return "output_too_short"
    if spec.max_output_tokens is not None and output > spec.max_output_tokens:
        return "output_too_long"
    if prompt + output > spec.max_total_tokens:
        return "total_too_long"
    return None


PROFILE = Profile("sharegpt", plan, fastest_request_s=0.05)
