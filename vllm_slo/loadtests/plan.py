"""The request plan: every request of a run, sampled before the run starts.

`build_plan` is a pure function of (traffic config, seed, tokenizer, max_model_len, n_requests):
the same inputs give the same messages, byte for byte, in every run and every variant of an A/B,
and the plan of n requests is a prefix of the plan of 2n (so arms that make different request
counts still send identical sequences). Conversation c of a profile draws from its own generator,
`random.Random(f"{seed}:{profile}:{c}")`, never from a shared stream. Requests are
conversation-major: conversation c turn 0, 1, ...; then conversation c + 1.

Token lengths are measured with the counter on the final strings. Prompts that would not fit
`max_model_len` (prompt + max_tokens) are trimmed or rejected (`traffic.overlong`), counted,
and reported in `warnings`; nothing is dropped or shortened silently.

    chat      one shared system prompt, user turns uniform in [0.5, 1.5] x user_tokens, and for
              each earlier turn a fixed seeded stand-in answer of output_tokens tokens
    long-doc  one document (uniform length between min and max doc tokens) + an instruction
    sharegpt  every human turn of a ShareGPT file with its real history; vLLM bench's filters
    mix       each conversation from one of `traffic.mix`'s profiles (chat, long-doc) by weight;
              every request keeps its profile's name (`PlannedRequest.profile`, the rows'
              `profile` column)

The plan is written as Parquet (`write_plan`), plan-level fields in the schema metadata.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from vllm_slo.loadtests.plan_fitting import (
    Candidate,
    Message,
    Tally,
    accept_fitted,
    count_tokens,
    fit_to_context,
    generate_until,
)
from vllm_slo.loadtests.prompts import (
    DEFAULT_SHAREGPT_PATH,
    DOC_SEPARATOR,
    INSTRUCTIONS,
    ShareGptConversation,
    WordTexts,
    load_sharegpt,
)
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.model import ChatSpec, LongDocSpec, ShareGptSpec, TrafficSpec

PLAN_SCHEMA_VERSION = 1
PLAN_METADATA_KEY = b"vllm_slo.plan"
LONG_DOC_MARGIN_TOKENS = 64  # default max_doc_tokens = max_model_len - output_tokens - this
FILTER_REASONS = ("malformed", "no_reply", "prompt_too_short", "prompt_too_long",
                  "output_too_short", "output_too_long", "total_too_long")
_SHAREGPT_CHUNK = 256  # conversations counted per count_many call


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    index: int
    conversation_id: int
    turn: int
    messages: tuple[dict[str, str], ...]  # OpenAI chat messages (system/user/assistant)
    prompt_tokens: int  # tokens of all message contents by the counter (no chat template)
    max_tokens: int
    profile: str = ""  # the profile that made it (a mix's component; not sent, not hashed)


@dataclass(frozen=True, slots=True)
class RequestPlan:
    requests: tuple[PlannedRequest, ...]
    profile: str
    seed: int
    tokenizer: str
    trimmed: int
    rejected: int
    filtered: dict[str, int]
    sha256: str
    warnings: tuple[str, ...]


def canonical_bytes(requests: Iterable[PlannedRequest]) -> Iterator[bytes]:
    """The canonical serialisation of the prompt sequence: one JSON line per request holding
    its messages and max_tokens (what the server receives, apart from the model name)."""
    for request in requests:
        yield json.dumps({"max_tokens": request.max_tokens, "messages": request.messages},
                         ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def plan_sha256(requests: Iterable[PlannedRequest]) -> str:
    digest = hashlib.sha256()
    for line in canonical_bytes(requests):
        digest.update(line)
    return digest.hexdigest()


# ------------------------------------------------------------------------------ profiles
Conversations = Callable[[int], list[Candidate]]  # conversation c -> its turns


def _chat_conversations(spec: ChatSpec, seed: int, words: WordTexts) -> Conversations:
    shared: list[Message] = []
    if spec.system_prompt_tokens > 0:
        system_rng = random.Random(f"{seed}:chat:system")
        shared.append(Message("system", words.text(system_rng, spec.system_prompt_tokens),
                               target=spec.system_prompt_tokens, generated=True))

    def conversation(c: int) -> list[Candidate]:
        rng = random.Random(f"{seed}:chat:{c}")
        history = list(shared)
        turns = []
        for turn in range(spec.turns):
            target = max(1, round(rng.uniform(0.5, 1.5) * spec.user_tokens))
            history.append(Message("user", words.text(rng, target), target=target,
                                    generated=True))
            turns.append(Candidate(c, turn, list(history), spec.output_tokens, "chat"))
            if turn + 1 < spec.turns:  # the fixed stand-in for this turn's answer
                history.append(Message("assistant", words.text(rng, spec.output_tokens),
                                        target=spec.output_tokens, generated=True))
        return turns

    return conversation


def _chat(spec: ChatSpec, seed: int, counter: TokenCounter, max_model_len: int | None,
          policy: str, n_requests: int, tally: Tally) -> list[Candidate]:
    words = WordTexts(counter)
    return generate_until(_chat_conversations(spec, seed, words), spec.turns, counter, words,
                          max_model_len, policy, n_requests, tally)


def _long_doc_conversations(spec: LongDocSpec, seed: int, counter: TokenCounter,
                            words: WordTexts, max_model_len: int | None,
                            tally: Tally) -> Conversations:
    low, high = spec.min_doc_tokens, spec.max_doc_tokens
    if high is None:
        if max_model_len is None:
            raise ValueError("long-doc needs max_doc_tokens when the server's max-model-len is "
                             "unknown (set traffic.long-doc.max_doc_tokens)")
        high = max_model_len - spec.output_tokens - LONG_DOC_MARGIN_TOKENS
        if high < 1:
            raise ValueError(f"max-model-len {max_model_len} leaves no room for a document "
                             f"with output_tokens {spec.output_tokens}")
    if high < low:
        tally.warnings.append(
            f"long-doc: max_doc_tokens {high} is below min_doc_tokens {low}; every document "
            f"has {high} tokens")
        low = high
    suffixes = [DOC_SEPARATOR + text for text in INSTRUCTIONS]
    suffix_tokens = dict(zip(suffixes, counter.count_many(suffixes), strict=True))

    def conversation(c: int) -> list[Candidate]:
        rng = random.Random(f"{seed}:long-doc:{c}")
        doc_tokens = rng.randint(low, high)
        suffix = DOC_SEPARATOR + rng.choice(INSTRUCTIONS)
        document = Message("user", words.text(rng, doc_tokens), suffix,
                            target=doc_tokens + suffix_tokens[suffix], generated=True,
                            floor=suffix_tokens[suffix] + 1)
        return [Candidate(c, 0, [document], spec.output_tokens, "long-doc")]

    return conversation


def _long_doc(spec: LongDocSpec, seed: int, counter: TokenCounter, max_model_len: int | None,
              policy: str, n_requests: int, tally: Tally) -> list[Candidate]:
    words = WordTexts(counter)
    conversations = _long_doc_conversations(spec, seed, counter, words, max_model_len, tally)
    return generate_until(conversations, 1, counter, words, max_model_len, policy, n_requests,
                          tally)


def _mix(traffic: TrafficSpec, seed: int, counter: TokenCounter, max_model_len: int | None,
         policy: str, n_requests: int, tally: Tally) -> list[Candidate]:
    """Conversation c is drawn from one profile, by `traffic.mix`'s weights, with its own
    generator (`{seed}:mix:{c}`), and is then that profile's conversation c: the chat turns of
    a mix are those of the chat profile alone at the same seed."""
    words = WordTexts(counter)
    makers: dict[Literal["chat", "long-doc"], Conversations] = {}  # keyed as traffic.mix
    if "chat" in traffic.mix:
        makers["chat"] = _chat_conversations(traffic.chat, seed, words)
    if "long-doc" in traffic.mix:
        makers["long-doc"] = _long_doc_conversations(traffic.long_doc, seed, counter, words,
                                                     max_model_len, tally)
    names = list(makers)
    weights = [traffic.mix[name] for name in names]

    def conversation(c: int) -> list[Candidate]:
        (name,) = random.Random(f"{seed}:mix:{c}").choices(names, weights)
        return makers[name](c)

    # batches sized for the mean turns per conversation (batching never changes a plan)
    turns = {"chat": traffic.chat.turns, "long-doc": 1}
    mean_turns = sum(w * turns[n] for n, w in zip(names, weights, strict=True)) / sum(weights)
    return generate_until(conversation, max(1, round(mean_turns)), counter, words,
                          max_model_len, policy, n_requests, tally)


def _sharegpt(spec: ShareGptSpec, seed: int, counter: TokenCounter,
              max_model_len: int | None, policy: str, n_requests: int,
              tally: Tally) -> list[Candidate]:
    """Entries in a seeded shuffled order, counted a chunk at a time (a real ShareGPT file is
    only tokenized as far as the plan needs); a second pass, reshuffled, reuses the first
    pass's requests."""
    path = Path(spec.path).expanduser() if spec.path else DEFAULT_SHAREGPT_PATH
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


def _sharegpt_first_pass(chunk: list[int], entries: list[ShareGptConversation | str],
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


# ------------------------------------------------------------------------------ public API
def build_plan(traffic: TrafficSpec, counter: TokenCounter, max_model_len: int | None,
               n_requests: int) -> RequestPlan:
    """Pre-sample `n_requests` requests of `traffic.profile` (see the module docstring).
    A bad configuration or data file raises ValueError saying what is wrong."""
    if n_requests < 1:
        raise ValueError(f"n_requests must be at least 1, got {n_requests}")
    tally = Tally()
    args = (traffic.seed, counter, max_model_len, traffic.overlong, n_requests, tally)
    if traffic.profile == "chat":
        candidates = _chat(traffic.chat, *args)
    elif traffic.profile == "long-doc":
        candidates = _long_doc(traffic.long_doc, *args)
    elif traffic.profile == "sharegpt":
        candidates = _sharegpt(traffic.sharegpt, *args)
    elif traffic.profile == "mix":
        candidates = _mix(traffic, *args)
    else:  # pragma: no cover - the scenario model admits only the three
        raise ValueError(f"unknown traffic profile {traffic.profile!r}")
    requests = _freeze(candidates)
    if tally.trimmed:
        tally.warnings.append(f"{tally.trimmed} prompts were trimmed to fit max-model-len "
                              f"{max_model_len} (prompt + max_tokens)")
    if tally.rejected:
        why = ("overlong: reject" if traffic.overlong == "reject"
               else "they could not be trimmed enough")
        tally.warnings.append(f"{tally.rejected} prompts did not fit max-model-len "
                              f"{max_model_len} and were dropped ({why})")
    return RequestPlan(
        requests=requests, profile=traffic.profile, seed=traffic.seed, tokenizer=counter.name,
        trimmed=tally.trimmed, rejected=tally.rejected, filtered=dict(tally.filtered),
        sha256=plan_sha256(requests), warnings=tuple(tally.warnings))


def _freeze(candidates: list[Candidate]) -> tuple[PlannedRequest, ...]:
    frozen: dict[int, dict[str, str]] = {}  # one dict per distinct message, shared by turns

    def as_dict(message: Message) -> dict[str, str]:
        key = id(message)
        if key not in frozen:
            frozen[key] = {"role": message.role, "content": message.content}
        return frozen[key]

    return tuple(
        PlannedRequest(index, c.conversation_id, c.turn, tuple(map(as_dict, c.messages)),
                       c.prompt_tokens, c.max_tokens, c.profile)
        for index, c in enumerate(candidates))


def write_plan(plan: RequestPlan, path: Path) -> None:
    """Parquet, one row per request; plan-level fields as JSON in the schema metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    requests = plan.requests
    message_type = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    table = pa.table({
        "index": pa.array([r.index for r in requests], pa.int64()),
        "conversation_id": pa.array([r.conversation_id for r in requests], pa.int64()),
        "turn": pa.array([r.turn for r in requests], pa.int32()),
        "messages": pa.array([list(r.messages) for r in requests], message_type),
        "prompt_tokens": pa.array([r.prompt_tokens for r in requests], pa.int64()),
        "max_tokens": pa.array([r.max_tokens for r in requests], pa.int64()),
        "profile": pa.array([r.profile for r in requests], pa.string()),
    })
    metadata = {"schema_version": PLAN_SCHEMA_VERSION, "profile": plan.profile,
                "seed": plan.seed, "tokenizer": plan.tokenizer, "trimmed": plan.trimmed,
                "rejected": plan.rejected, "filtered": plan.filtered, "sha256": plan.sha256,
                "warnings": list(plan.warnings)}
    table = table.replace_schema_metadata({PLAN_METADATA_KEY: json.dumps(metadata)})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")


def read_plan(path: Path) -> RequestPlan:
    """Read a plan written by `write_plan`; its sha256 is checked against its requests."""
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: not a readable request plan ({error})") from error
    raw = (table.schema.metadata or {}).get(PLAN_METADATA_KEY)
    if raw is None:
        raise ValueError(f"{path}: not a request plan (no {PLAN_METADATA_KEY.decode()} metadata)")
    meta = json.loads(raw)
    if meta.get("schema_version") != PLAN_SCHEMA_VERSION:
        raise ValueError(f"{path}: plan schema version {meta.get('schema_version')}, "
                         f"this suite reads {PLAN_SCHEMA_VERSION}")
    columns = {name: table.column(name).to_pylist() for name in table.column_names}
    profiles = columns.get("profile") or [meta["profile"]] * table.num_rows
    requests = tuple(
        PlannedRequest(index, conversation_id, turn, tuple(messages), prompt_tokens, max_tokens,
                       profile)
        for index, conversation_id, turn, messages, prompt_tokens, max_tokens, profile in zip(
            columns["index"], columns["conversation_id"], columns["turn"], columns["messages"],
            columns["prompt_tokens"], columns["max_tokens"], profiles, strict=True))
    if plan_sha256(requests) != meta["sha256"]:
        raise ValueError(f"{path}: the requests do not match the plan's sha256 (file altered)")
    return RequestPlan(
        requests=requests, profile=meta["profile"], seed=meta["seed"],
        tokenizer=meta["tokenizer"], trimmed=meta["trimmed"], rejected=meta["rejected"],
        filtered=dict(meta["filtered"]), sha256=meta["sha256"],
        warnings=tuple(meta["warnings"]))
