"""What the launched (or attached) vLLM server really was, from its own words: its start-up log
and `/metrics`. Pure: the caller reads server.log and a parsed /metrics scrape.

From the log (vLLM 0.26-0.32 wording): the engine version, the flags vLLM saw as non-default,
what it resolved (chunked prefill, prefix caching, eager mode, max sequence length), the
KV-cache size in tokens and "Maximum concurrency for N tokens per request: X x", and the
engine's start time. From `vllm:cache_config_info` (labels): block size, KV-cache blocks,
tokens and maximum concurrency as the engine exported them. `diagnose_start_failure` turns a
failed start-up's log into one paragraph: what went wrong and the remedy;
`diagnose_runtime_failure` does so for a server that died after it was ready.
"""

from __future__ import annotations

import ast
import contextlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_VERSION = re.compile(r"Initializing a V1 LLM engine \(v([^)]+)\) with config: (.*)$", re.M)
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$", re.M)
_KV_TOKENS = re.compile(r"(GPU|CPU) KV cache size: ([\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x")
# the scheduler's effective token budget, said whatever set it (vLLM's own default included)
_BUDGET = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
_INIT_S = re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")
_CONFIG_FLAGS = ("enable_chunked_prefill", "enable_prefix_caching", "enforce_eager")


@dataclass(frozen=True, slots=True)
class ServerFacts:
    vllm_version: str | None = None
    non_default_args: dict[str, Any] | None = None  # as vLLM printed them (its own names)
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    enforce_eager: bool | None = None
    max_seq_len: int | None = None
    # the token budget of a scheduler step as the server runs it: its log line when chunked
    # prefill is on (vLLM's default, which differs by platform and entrypoint, included), else
    # the value given on its command line; None when neither says
    max_num_batched_tokens: int | None = None
    kv_cache_device: str | None = None  # GPU | CPU
    kv_cache_tokens: int | None = None
    kv_cache_blocks: int | None = None
    block_size: int | None = None
    max_concurrency: float | None = None  # requests of `max_concurrency_at_tokens` at once
    max_concurrency_at_tokens: int | None = None
    engine_init_s: float | None = None


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _bool(text: str | None) -> bool | None:
    return {"True": True, "False": False}.get(text or "")


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "None") else None
    except ValueError:
        return None


def _float(text: str | None) -> float | None:
    """A label's finite number; None for "None", text that is no number, NaN or infinity."""
    try:
        value = float(text) if text not in (None, "None") else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def facts_from_log(log: str) -> dict[str, Any]:
    """Pure: the facts a vLLM start-up log states (the last start in the log wins)."""
    facts: dict[str, Any] = {}
    engines = _VERSION.findall(log)
    if engines:
        version, config = engines[-1]
        facts["vllm_version"] = version
        for flag in _CONFIG_FLAGS:
            found = re.search(rf"\b{flag}=(True|False)\b", config)
            if found:
                facts[flag] = _bool(found.group(1))
        seq = re.search(r"\bmax_seq_len=(\d+)", config)
        if seq:
            facts["max_seq_len"] = int(seq.group(1))
    non_default = _NON_DEFAULT.findall(log)
    if non_default:
        with contextlib.suppress(ValueError, SyntaxError):  # a repr literal_eval can't read
            facts["non_default_args"] = ast.literal_eval(non_default[-1])
    given = (facts.get("non_default_args") or {}).get("max_num_batched_tokens")
    budget = _BUDGET.findall(log)
    if budget:
        facts["max_num_batched_tokens"] = int(budget[-1])
    elif isinstance(given, int):
        facts["max_num_batched_tokens"] = given
    tokens = _KV_TOKENS.findall(log)
    if tokens:
        facts["kv_cache_device"], count = tokens[-1]
        facts["kv_cache_tokens"] = int(_number(count))
    concurrency = _CONCURRENCY.findall(log)
    if concurrency:
        at, times = concurrency[-1]
        facts["max_concurrency_at_tokens"] = int(_number(at))
        facts["max_concurrency"] = _number(times)
    init = _INIT_S.findall(log)
    if init:
        facts["engine_init_s"] = float(init[-1])
    return facts


def facts_from_metrics(values: Mapping[str, float]) -> dict[str, Any]:
    """Pure: the facts of `vllm:cache_config_info` in one parsed scrape (keys as
    `servers.metrics_scrape.parse_vllm_metrics` writes them: `name{label="value",...}`)."""
    info = next((key for key in values if key.startswith("vllm:cache_config_info{")), None)
    if info is None:
        return {}
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info))
    facts: dict[str, Any] = {}
    for fact, label in (("block_size", "block_size"), ("kv_cache_blocks", "num_gpu_blocks"),
                        ("kv_cache_tokens", "kv_cache_size_tokens")):
        value = _int(labels.get(label))
        if value is not None and value > 0:  # a count or size the engine could have
            facts[fact] = value
    concurrency = _float(labels.get("kv_cache_max_concurrency"))
    if concurrency is not None and concurrency > 0:
        facts["max_concurrency"] = concurrency
    if labels.get("enable_prefix_caching") in ("True", "False"):
        facts["enable_prefix_caching"] = _bool(labels["enable_prefix_caching"])
    return facts


def server_facts(log: str, metrics: Mapping[str, float] | None) -> ServerFacts:
    """The log's facts, completed by /metrics (the engine's exported values win where both
    say)."""
    merged = {**facts_from_log(log), **facts_from_metrics(metrics or {})}
    if merged.get("kv_cache_blocks") is None and merged.get("kv_cache_tokens") and \
            merged.get("block_size"):
        merged["kv_cache_blocks"] = merged["kv_cache_tokens"] // merged["block_size"]
    return ServerFacts(**merged)


#: `vllm serve` flags whose effective value a server states about itself (its log, /metrics)
EFFECTIVE_FLAGS = {"max-num-batched-tokens": "max_num_batched_tokens", "block-size": "block_size",
                   "max-model-len": "max_seq_len",
                   "enable-chunked-prefill": "enable_chunked_prefill",
                   "enable-prefix-caching": "enable_prefix_caching",
                   "enforce-eager": "enforce_eager"}


def effective_engine_args(facts: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: the `vllm serve` flags a server ran with as it states them itself (server_facts.json
    content), its defaults included: {"max-num-batched-tokens": 8192, ...}; a flag it did not
    state is left out."""
    return {flag: facts[fact] for flag, fact in EFFECTIVE_FLAGS.items()
            if facts.get(fact) is not None}


def describe(facts: ServerFacts) -> str:
    """Pure: one line for the terminal ("" when the server said nothing)."""
    parts = []
    if facts.kv_cache_tokens is not None:
        blocks = (f" ({facts.kv_cache_blocks:,} blocks of {facts.block_size})"
                  if facts.kv_cache_blocks is not None and facts.block_size else "")
        parts.append(f"{facts.kv_cache_device or ''} KV cache {facts.kv_cache_tokens:,} "
                     f"tokens{blocks}".strip())
    if facts.max_concurrency is not None:
        at = (f" at {facts.max_concurrency_at_tokens:,} tokens"
              if facts.max_concurrency_at_tokens else "")
        parts.append(f"max concurrency {facts.max_concurrency:g}x{at}")
    budget = ("" if facts.max_num_batched_tokens is None else
              f" ({facts.max_num_batched_tokens:,} tokens a step)")
    for name, flag, detail in (("chunked prefill", facts.enable_chunked_prefill, budget),
                               ("prefix caching", facts.enable_prefix_caching, "")):
        if flag is not None:
            parts.append(f"{name} {'on' if flag else 'off'}{detail}")
    if facts.enforce_eager is not None:
        parts.append("eager" if facts.enforce_eager else "CUDA graphs / compiled")
    return "server facts: " + ", ".join(parts) if parts else ""


@dataclass(frozen=True, slots=True)
class _Remedy:
    pattern: re.Pattern[str]
    cause: str
    remedy: str


_REMEDIES = (
    _Remedy(re.compile(r"(larger than the maximum number of tokens that can be stored in KV "
                       r"cache|To serve at least one request with the models?'s? max seq len|"
                       r"larger than the available KV cache)", re.I),
            "the KV cache is too small for one request of max-model-len tokens",
            "lower server.args.max-model-len, or give the KV cache more memory "
            "(gpu-memory-utilization up on a GPU, kv-cache-memory-bytes up on the CPU build)"),
    _Remedy(re.compile(r"(No available memory for the cache blocks|insufficient memory for "
                       r"the KV cache|Not enough memory)", re.I),
            "no memory was left for the KV cache after the weights and activations",
            "raise server.args.gpu-memory-utilization (or kv-cache-memory-bytes), lower "
            "max-model-len / max-num-seqs, or use a smaller model / more GPUs "
            "(tensor-parallel-size)"),
    _Remedy(re.compile(r"(CUDA out of memory|OutOfMemoryError|CUDA error: out of memory)", re.I),
            "the GPU ran out of memory while starting",
            "lower server.args.gpu-memory-utilization or max-model-len, or set "
            "enforce-eager: true (CUDA graphs take memory too); check nvidia-smi for other "
            "processes on the GPU"),
    _Remedy(re.compile(r"max_num_batched_tokens.*(smaller than|less than).*max_model_len|"
                       r"max_num_batched_tokens \(\d+\) must be", re.I),
            "max-num-batched-tokens cannot hold one prompt of max-model-len with chunked "
            "prefill off",
            "raise server.args.max-num-batched-tokens to at least max-model-len, or turn "
            "enable-chunked-prefill on"),
    _Remedy(re.compile(r"address already in use", re.I),
            "the server's port was taken",
            "another process holds the port; the suite retries on fresh ports, so something "
            "keeps taking them: check for a runaway server"),
)


# deaths of a server that had answered (its start-up's remedies would mislead there)
_RUNTIME_REMEDIES = (
    _Remedy(re.compile(r"CPU Generator does not use offset"),
            "vLLM's CPU build died discarding a token it had sampled for a request that "
            "sets `seed` (its per-request generator cannot rewind: vLLM CPU 0.32; seen with "
            "a prefill split across steps)",
            "drop `seed` from traffic.extra_body, or keep prefills whole: raise "
            "server.args.max-num-batched-tokens above what the concurrent prompts need "
            "together"),
)


def diagnose_start_failure(log_tail: str) -> str | None:
    """Pure: one paragraph — the cause and the remedy — for a start-up log tail that matches a
    known failure; None otherwise."""
    return _diagnose(log_tail, _REMEDIES)


def diagnose_runtime_failure(log: str) -> str | None:
    """Pure: `diagnose_start_failure` for a server that died after it was ready."""
    return _diagnose(log, _RUNTIME_REMEDIES)


def _diagnose(log_tail: str, remedies: tuple[_Remedy, ...]) -> str | None:
    for known in remedies:
        found = known.pattern.search(log_tail)
        if found:
            line = next((text.strip() for text in log_tail.splitlines()
                         if known.pattern.search(text)), found.group(0))
            return f"Diagnosis: {known.cause}. Remedy: {known.remedy}. (vLLM said: {line[:300]})"
    return None
