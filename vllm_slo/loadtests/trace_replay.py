"""Replaying a request trace (`traffic.profile: trace`), pure: which records of the trace are
sent and when, the prompt text that carries the trace's prefix sharing, and the prefix-cache
hit rate the trace implies.

**When.** A record's time relative to the trace's first record, `t`, is inside the window when
`start <= t < end`; it is sent `(t - start) / speedup` seconds after the traffic starts (the
open loop's schedule, warm-up included). Records past the run's traffic time are not read.
`rate_scale` r deals each record `floor((i+1) r) - floor(i r)` sends (a deterministic,
low-discrepancy split: any leading part of the replay is within one send of r × its records):
r < 1 thins the trace evenly, r > 1 adds copies spread evenly between the record's time and the
next one's. A copy keeps the record's lengths and block structure in a *lane* of its own
(copy j's block ids are (j, id)), so scaling adds load without adding cache hits the trace does
not have.

**What.** A block id stands for `block_tokens` tokens of text (512 in Mooncake): the text of
(lane, id) is the same seeded draw of one-token, space-led words for every request that names
it, so requests sharing their leading ids share exactly those tokens, KV-block aligned when
`block_tokens` is a multiple of the server's block size. A request's prompt is its blocks in
order, the last one cut to `input_tokens`; tokens beyond its blocks are words of its own.

**The implied hit rate.** With every block ever sent still cached (an unbounded cache), request
i hits the tokens of its leading blocks that earlier requests sent (a block sent shorter before
is shared as far as it went, and ends the run), at most `input_tokens - 1` (vLLM never takes a
prompt's last token from the cache); implied = Σ hits / Σ input tokens. What vLLM counts
differs by its chat template's tokens, its own block size's rounding, requests sent before an
earlier one's prefill finished, and evictions from a cache smaller than the trace's working set
(the last is a property of the server, not a fault of the replay).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from vllm_slo.loadtests.trace_formats import TraceFormatError, TraceRecord

BlockKey = tuple[int, int | str]  # (lane, block id)


@dataclass(frozen=True, slots=True)
class Replayed:
    """One send of the replay: its record, its lane (0: the record itself; j: the j-th copy
    `rate_scale` added) and when it is sent, in seconds from the start of traffic."""

    record: TraceRecord
    lane: int
    offset_s: float

    def blocks(self) -> tuple[BlockKey, ...]:
        return tuple((self.lane, block) for block in self.record.hash_ids)


@dataclass(frozen=True, slots=True)
class Selection:
    """What the replay sends, and what reading the trace found."""

    sends: tuple[Replayed, ...]
    window_records: tuple[TraceRecord, ...]  # the window's records read (before rate_scale)
    records_read: int
    filtered: dict[str, int] = field(default_factory=dict)
    stopped: str = "end of file"  # why reading stopped


def select(records: Iterable[TraceRecord], *, start_s: float = 0.0, end_s: float | None = None,
           speedup: float = 1.0, rate_scale: float = 1.0, max_requests: int | None = None,
           total_s: float = math.inf, max_sends: int | None = None) -> Selection:
    """The sends of a replay (see the module docstring), reading `records` only as far as the
    window, `max_requests` (the window's records), the run's `total_s` and `max_sends` need.
    Records with 0 input or 0 output tokens are counted (`filtered`) and skipped."""
    if speedup <= 0 or rate_scale <= 0:
        raise ValueError(f"speedup and rate_scale must be > 0, got {speedup!r}, {rate_scale!r}")
    kept: list[TraceRecord] = []
    times: list[float] = []  # offsets of `kept`, in run seconds
    filtered = {"empty_prompt": 0, "no_output": 0}
    first_s: float | None = None
    read = 0
    stopped = "end of file"
    next_offset_s: float | None = None  # the first record after the run: the last gap's end
    wanted_records = None if max_sends is None else math.ceil(max_sends / rate_scale) + 1
    for record in records:
        read += 1
        if first_s is None:
            first_s = record.timestamp_s
        relative = record.timestamp_s - first_s
        if relative < start_s:
            continue
        if end_s is not None and relative >= end_s:
            stopped = f"the window's end ({end_s:g} s of the trace)"
            break
        offset = (relative - start_s) / speedup
        if offset >= total_s:
            next_offset_s = offset
            stopped = f"the run's traffic time ({total_s:g} s)"
            break
        if record.input_tokens == 0 or record.output_tokens == 0:
            filtered["empty_prompt" if record.input_tokens == 0 else "no_output"] += 1
            continue
        kept.append(record)
        times.append(offset)
        if max_requests is not None and len(kept) >= max_requests:
            stopped = f"the request cap ({max_requests})"
            break
        if wanted_records is not None and len(kept) >= wanted_records:
            stopped = f"the plan's size ({max_sends} requests)"
            break
    sends: list[Replayed] = []
    for index, (record, offset) in enumerate(zip(kept, times, strict=True)):
        copies = math.floor((index + 1) * rate_scale + 1e-9) - math.floor(index * rate_scale
                                                                          + 1e-9)
        following = times[index + 1] if index + 1 < len(times) else next_offset_s
        gap = 0.0 if following is None else following - offset
        for lane in range(copies):
            at = offset + gap * lane / copies
            if at < total_s:
                sends.append(Replayed(record, lane, at))
    sends.sort(key=lambda send: send.offset_s)  # stable: a record's copies after it
    if max_sends is not None and len(sends) > max_sends:
        sends = sends[:max_sends]
    return Selection(tuple(sends), tuple(kept), read,
                     {reason: n for reason, n in filtered.items() if n}, stopped)


def check_blocks(send: Replayed, block_tokens: int, where: str) -> None:
    """A record whose block ids hold more blocks than its input fills is refused (its ids
    cannot all be its prompt's); fewer is fine (the rest of the prompt is its own)."""
    record = send.record
    needed = math.ceil(record.input_tokens / block_tokens)
    if len(record.hash_ids) > needed:
        raise TraceFormatError(
            f"{where}:{record.line}: field 'hash_ids': {len(record.hash_ids)} blocks of "
            f"{block_tokens} tokens, more than input tokens {record.input_tokens} fill (at most "
            f"{needed}); is the trace's block size (traffic.trace.block_tokens) right?")


class BlockTexts:
    """The text of each block, as one-token space-led pieces, drawn once per (lane, id)."""

    def __init__(self, fillers: Sequence[str], block_tokens: int, seed: int) -> None:
        if not fillers:
            raise ValueError("no one-token words to build trace prompts from")
        self.fillers = tuple(fillers)
        self.block_tokens = block_tokens
        self.seed = seed
        self._blocks: dict[BlockKey, list[str]] = {}

    def block(self, key: BlockKey) -> list[str]:
        pieces = self._blocks.get(key)
        if pieces is None:
            rng = random.Random(f"{self.seed}:trace:block:{key[0]}:{key[1]!r}")
            pieces = rng.choices(self.fillers, k=self.block_tokens)
            self._blocks[key] = pieces
        return pieces

    def pieces(self, send: Replayed, position: int, n_tokens: int | None = None) -> list[str]:
        """The prompt of `send` (plan position `position`) as `n_tokens` pieces (default: its
        input tokens): its blocks in order, then words of its own."""
        wanted = send.record.input_tokens if n_tokens is None else n_tokens
        out: list[str] = []
        for key in send.blocks():
            if len(out) >= wanted:
                break
            out.extend(self.block(key)[: wanted - len(out)])
        if len(out) < wanted:
            rng = random.Random(f"{self.seed}:trace:request:{position}")
            out.extend(rng.choices(self.fillers, k=wanted - len(out)))
        return out

    def text(self, send: Replayed, position: int, n_tokens: int | None = None) -> str:
        return "".join(self.pieces(send, position, n_tokens))


def implied_hits(sends: Iterable[tuple[Sequence[BlockKey], int]], block_tokens: int
                 ) -> Iterator[int]:
    """Per request (its block keys, its input tokens), in send order: the tokens an unbounded
    prefix cache holds for it (see the module docstring)."""
    cached: dict[BlockKey, int] = {}  # block -> tokens of it sent so far (a last block is short)
    for blocks, input_tokens in sends:
        hits = 0
        sharing = True
        for index, key in enumerate(blocks):
            here = min(block_tokens, input_tokens - index * block_tokens)
            if here <= 0:
                break
            before = cached.get(key, 0)
            if sharing:
                hits += min(before, here)
                sharing = before >= here
            if here > before:
                cached[key] = here
        yield max(0, min(hits, input_tokens - 1))


def hit_rate(hits: Sequence[int], inputs: Sequence[int]) -> float | None:
    total = sum(inputs)
    return sum(hits) / total if total > 0 else None


def _spread(values: Sequence[float] | np.ndarray, prefix: str) -> dict[str, float | None]:
    if len(values) == 0:
        return {f"{prefix}_mean": None, f"{prefix}_p50": None, f"{prefix}_p99": None}
    array = np.asarray(values, dtype=float)
    return {f"{prefix}_mean": float(array.mean()),
            f"{prefix}_p50": float(np.percentile(array, 50)),
            f"{prefix}_p99": float(np.percentile(array, 99))}


def statistics(times_s: Sequence[float], inputs: Sequence[int], outputs: Sequence[int],
               blocks: Sequence[Sequence[BlockKey | int | str]] = (),
               hits: Sequence[int] | None = None) -> dict[str, float | int | None]:
    """A stream of requests described: count, span and rate, inter-arrival gaps (mean, p50,
    p99, coefficient of variation: 1 for Poisson, above it burstier), input and output
    lengths, block reuse (block references and distinct blocks) and the implied hit rate."""
    times = np.sort(np.asarray(times_s, dtype=float))
    gaps = np.diff(times) if times.size > 1 else np.empty(0)
    span = float(times[-1] - times[0]) if times.size > 1 else 0.0
    facts: dict[str, float | int | None] = {
        "requests": int(times.size), "span_s": span,
        "rate_per_s": (times.size - 1) / span if span > 0 else None}
    facts.update(_spread(gaps, "gap_s"))
    facts["gap_cv"] = (float(gaps.std() / gaps.mean())
                       if gaps.size > 1 and gaps.mean() > 0 else None)
    facts.update(_spread(inputs, "input_tokens"))
    facts.update(_spread(outputs, "output_tokens"))
    references = sum(len(b) for b in blocks)
    distinct = len({key for b in blocks for key in b})
    facts["block_references"] = references
    facts["distinct_blocks"] = distinct
    facts["block_reuse"] = 1 - distinct / references if references else None
    facts["implied_hit_rate"] = None if hits is None else hit_rate(hits, inputs)
    return facts
