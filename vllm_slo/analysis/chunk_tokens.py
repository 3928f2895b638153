"""Token accounting of multi-token chunks and reasoning phases (pure; no I/O).

Definitions (docs/measurement.md):
- `itl` stays the gap between successive token chunks (vLLM `bench serve`'s ITL): a stall
  is one long value, whatever the chunk carried.
- `itl_token`: a chunk of k tokens that arrived g after the previous token chunk counts as k
  gaps of g/k (the tokens' mean spacing over that gap), pooled over requests in the order the
  gaps ended. Its mean over a run is the token-weighted TPOT; its percentiles say what share
  of *tokens* came at what pace (per-chunk ITL under speculative decoding or
  `--stream-interval` over-weights the few long gaps of big chunks). The tokens of a
  request's first chunk arrive with its TTFT and count in no gap. Chunks that carried 0
  tokens by the usage count (none known on vLLM) add their gap to the next chunk's.
  Only requests whose every chunk came with per-chunk usage count; the others are counted
  and named (`StreamFacts.requests_without_chunk_tokens`), never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np
import pyarrow as pa

from vllm_slo.analysis.chunk_times import list_values
from vllm_slo.serialise import derive


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamFacts:
    """What the streams carried over the measured successful requests: tokens per chunk (by
    per-chunk usage) and the reasoning phase. None: nothing to count it over."""

    chunks: int  # token chunks of requests with per-chunk counts
    tokens_per_chunk_mean: float | None
    multi_token_chunk_share: float | None  # chunks that carried 2 tokens or more
    tokens_per_chunk_max: int | None
    chunk_tokens_source: str = field(init=False)  # where the per-chunk counts came from
    requests_without_chunk_tokens: int  # ok requests whose server sent no per-chunk usage
    reasoning_requests: int  # ok requests with at least one reasoning chunk
    reasoning_without_answer: int  # ... of which never sent answer content
    reasoning_tokens_mean: float | None  # per reasoning request (server's count where sent)

    def __post_init__(self) -> None:
        derive(self, chunk_tokens_source=_chunk_tokens_source(
            self.chunks, self.requests_without_chunk_tokens))

    @classmethod
    def from_json_dict(cls, data: dict[str, object]) -> StreamFacts:
        given = {f.name: data[f.name] for f in fields(cls) if f.init}
        return cls(**given)  # type: ignore[arg-type]


def _chunk_tokens_source(chunks: int, requests_without_chunk_tokens: int) -> str:
    """Where the per-chunk counts came from, in words."""
    if requests_without_chunk_tokens == 0:
        return "per-chunk usage" if chunks else "none"
    if chunks:
        return "per-chunk usage (some requests unknown)"
    return "unknown (no per-chunk usage)"


def token_gaps_in_arrival_order(offset_lists: pa.ListArray, token_lists: pa.ListArray,
                                send_unix_s: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """`itl_token` over the selected `rows` (bool mask) that have per-chunk counts (a
    non-null list as long as the row's offsets): each gap g ending in a chunk of k tokens
    as k values g/k, gaps ordered by when they ended (ties in row order)."""
    offsets, bounds = list_values(offset_lists)
    tokens, token_bounds = list_values(token_lists)
    known = np.asarray(token_lists.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    lengths = np.diff(bounds)
    usable = np.asarray(rows, dtype=bool) & known & (np.diff(token_bounds) == lengths)
    if not usable.any():
        return np.empty(0)
    pick = np.repeat(usable, lengths)
    chunk_offsets = np.asarray(offsets[pick], dtype=np.float64)
    chunk_tokens = np.asarray(tokens[np.repeat(usable, np.diff(token_bounds))],
                              dtype=np.int64)
    row_of = np.repeat(np.flatnonzero(usable), lengths[usable])
    carried = chunk_tokens > 0
    carried[np.r_[True, row_of[1:] != row_of[:-1]]] = True  # a row's first chunk: its start
    chunk_offsets, chunk_tokens, row_of = (chunk_offsets[carried], chunk_tokens[carried],
                                           row_of[carried])
    same_row = np.r_[False, row_of[1:] == row_of[:-1]]  # the chunk ends a gap of its row
    gaps = np.diff(chunk_offsets, prepend=0.0)[same_row]
    counts = chunk_tokens[same_row]
    ends = (np.asarray(send_unix_s, dtype=np.float64)[row_of] + chunk_offsets)[same_row]
    order = np.argsort(ends, kind="stable")
    gaps, counts = gaps[order], counts[order]
    return np.repeat(gaps / counts, counts)


def stream_facts(token_lists: pa.ListArray, good: np.ndarray, reasoning_chunks: np.ndarray,
                 answered: np.ndarray, reasoning_tokens: np.ndarray) -> StreamFacts:
    """The facts over the `good` rows (measured, ok): `reasoning_chunks` per row (0 for
    rows written before schema 6), `answered` whether it had an answer chunk (rows before
    schema 6: whether it had any chunk), `reasoning_tokens` (NaN: unknown)."""
    tokens, token_bounds = list_values(token_lists)
    known = np.asarray(token_lists.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    use = good & known
    picked = np.asarray(tokens[np.repeat(use, np.diff(token_bounds))], dtype=np.int64)
    reasoning = good & (reasoning_chunks > 0)
    thought = reasoning_tokens[reasoning]
    thought = thought[~np.isnan(thought)]
    return StreamFacts(
        chunks=int(picked.size),
        tokens_per_chunk_mean=float(picked.mean()) if picked.size else None,
        multi_token_chunk_share=(float(np.count_nonzero(picked >= 2)) / picked.size
                                 if picked.size else None),
        tokens_per_chunk_max=int(picked.max()) if picked.size else None,
        requests_without_chunk_tokens=int(np.count_nonzero(good & ~known)),
        reasoning_requests=int(np.count_nonzero(reasoning)),
        reasoning_without_answer=int(np.count_nonzero(reasoning & ~answered)),
        reasoning_tokens_mean=float(thought.mean()) if thought.size else None)
