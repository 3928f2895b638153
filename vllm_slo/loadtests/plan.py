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

Each profile's generator is a module of `loadtests/profiles/` (chat, long-doc, sharegpt,
mix), registered by name in `profiles.PROFILES`.

The plan is written as Parquet (`write_plan`), plan-level fields in the schema metadata.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from vllm_slo.loadtests.plan_fitting import Candidate, Message, Tally
from vllm_slo.loadtests.prefix_shaping import shape_candidates
from vllm_slo.loadtests.profiles import PROFILES
from vllm_slo.loadtests.prompts import WordTexts
from vllm_slo.loadtests.tokens import TokenCounter
from vllm_slo.scenarios.traffic_spec import TrafficSpec

PLAN_SCHEMA_VERSION = 1
PLAN_METADATA_KEY = b"vllm_slo.plan"


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    index: int
    conversation_id: int
    turn: int
    messages: tuple[dict[str, str], ...]  # OpenAI chat messages (system/user/assistant)
    prompt_tokens: int  # tokens of all message contents by the counter (no chat template)
    max_tokens: int
    profile: str = ""  # the profile that made it (a mix's component; not sent, not hashed)
    arrival_s: float | None = None  # arrival kind trace: its send time (not sent, not hashed)
    # profile agent: the request's sub-agent within its session (None: the parent chain, or
    # not a session; not sent, not hashed)
    branch: int | None = None


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
    # traffic.prefix_cache.target_hit_rate: the shaping's expectations and a warm run's primers
    prefix_cache: dict[str, object] | None = None
    primers: tuple[tuple[dict[str, str], ...], ...] = ()
    facts: dict[str, object] | None = None  # the profile's own facts (trace: its statistics)


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


# ------------------------------------------------------------------------------ public API
def build_plan(traffic: TrafficSpec, counter: TokenCounter, max_model_len: int | None,
               n_requests: int, block_size: int | None = None) -> RequestPlan:
    """Pre-sample `n_requests` requests of `traffic.profile` (see the module docstring);
    with `traffic.prefix_cache.target_hit_rate`, shaped to it (`prefix_shaping`: needs the
    server's `block_size`). A bad configuration or data file raises ValueError saying what is
    wrong."""
    if n_requests < 1:
        raise ValueError(f"n_requests must be at least 1, got {n_requests}")
    tally = Tally()
    candidates = PROFILES[traffic.profile].plan(traffic, traffic.seed, counter, max_model_len,
                                                traffic.overlong, n_requests, tally)
    target = traffic.prefix_cache.target_hit_rate
    prefix_cache: dict[str, object] | None = None
    primers: tuple[tuple[dict[str, str], ...], ...] = ()
    if target is not None:
        if block_size is None:
            raise ValueError("prefix_cache.target_hit_rate needs the server's block size (from "
                             "its /metrics cache_config_info or server.args.block-size)")
        shaped = shape_candidates(candidates, target, block_size, counter, WordTexts(counter),
                                  traffic.seed, max_model_len, tally)
        candidates, primers = shaped.candidates, shaped.primers
        prefix_cache = {"block_size": block_size,
                        "expected_hit_rate": shaped.shares.expected_hit_rate,
                        "shared_blocks_max": max(shaped.shares.blocks, default=0),
                        "shared_blocks_mean": (sum(shaped.shares.blocks)
                                               / max(1, len(shaped.shares.blocks))),
                        "capped": shaped.shares.capped}
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
        sha256=plan_sha256(requests), warnings=tuple(tally.warnings),
        prefix_cache=prefix_cache, primers=primers, facts=dict(tally.facts) or None)


def _freeze(candidates: list[Candidate]) -> tuple[PlannedRequest, ...]:
    frozen: dict[int, dict[str, str]] = {}  # one dict per distinct message, shared by turns

    def as_dict(message: Message) -> dict[str, str]:
        key = id(message)
        if key not in frozen:
            frozen[key] = {"role": message.role, "content": message.content}
        return frozen[key]

    return tuple(
        PlannedRequest(index, c.conversation_id, c.turn, tuple(map(as_dict, c.messages)),
                       c.prompt_tokens, c.max_tokens, c.profile, c.arrival_s, c.branch)
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
        "arrival_s": pa.array([r.arrival_s for r in requests], pa.float64()),
        "branch": pa.array([r.branch for r in requests], pa.int32()),
    })
    metadata = {"schema_version": PLAN_SCHEMA_VERSION, "profile": plan.profile,
                "seed": plan.seed, "tokenizer": plan.tokenizer, "trimmed": plan.trimmed,
                "rejected": plan.rejected, "filtered": plan.filtered, "sha256": plan.sha256,
                "warnings": list(plan.warnings), "prefix_cache": plan.prefix_cache,
                "primers": [list(primer) for primer in plan.primers], "facts": plan.facts}
    table = table.replace_schema_metadata({PLAN_METADATA_KEY: json.dumps(metadata)})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd")


def read_plan(source: Path | bytes) -> RequestPlan:
    """Read a plan written by `write_plan` (its file, or the file's bytes as a remote worker
    gets them); its sha256 is checked against its requests."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path("<the master's plan>") if isinstance(source, bytes) else Path(source)
    try:
        table = pq.read_table(pa.BufferReader(source) if isinstance(source, bytes) else path)
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
    arrivals = columns.get("arrival_s") or [None] * table.num_rows
    branches = columns.get("branch") or [None] * table.num_rows  # older plans: no sub-agents
    requests = tuple(
        PlannedRequest(index, conversation_id, turn, tuple(messages), prompt_tokens, max_tokens,
                       profile, arrival_s, branch)
        for (index, conversation_id, turn, messages, prompt_tokens, max_tokens, profile,
             arrival_s, branch)
        in zip(columns["index"], columns["conversation_id"], columns["turn"],
               columns["messages"], columns["prompt_tokens"], columns["max_tokens"], profiles,
               arrivals, branches, strict=True))
    if plan_sha256(requests) != meta["sha256"]:
        raise ValueError(f"{path}: the requests do not match the plan's sha256 (file altered)")
    return RequestPlan(
        requests=requests, profile=meta["profile"], seed=meta["seed"],
        tokenizer=meta["tokenizer"], trimmed=meta["trimmed"], rejected=meta["rejected"],
        filtered=dict(meta["filtered"]), sha256=meta["sha256"],
        warnings=tuple(meta["warnings"]), prefix_cache=meta.get("prefix_cache"),
        primers=tuple(tuple(primer) for primer in meta.get("primers") or ()),
        facts=meta.get("facts"))
