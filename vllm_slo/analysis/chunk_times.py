"""Computations over every chunk timestamp of a run (pure; no I/O), written for runs of
250 M chunks: they read the float32 offsets where Arrow holds them (no copy of the list
column), and hold at most a few arrays of the chunks' size at a time.

- `gaps_in_arrival_order`: ITL gaps pooled over requests, in the order the gaps ended (the
  request's intended send + the later chunk's offset), ties in row order: what
  `statistics.time_ordered(*run_metrics.pooled_gaps(...))` gives, without its copies.
- `tokens_by_arrival`: output tokens per time bin by the arrival of the chunk that carried them
  (up to an optional end inside the last bin).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: Chunks handled at once by the loops that would otherwise need a temporary per chunk.
_STEP = 1 << 24


def list_values(offset_lists: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """The flat offsets (zero-copy where Arrow allows) and each row's [start, end) into them;
    a null list is an empty one."""
    if offset_lists.null_count:
        lengths = pc.list_value_length(offset_lists).fill_null(0).to_numpy()
        return (offset_lists.flatten().to_numpy(zero_copy_only=False),
                np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))
    bounds = offset_lists.offsets.to_numpy()
    flat = offset_lists.values.slice(int(bounds[0]), int(bounds[-1] - bounds[0]))
    values = flat.to_numpy(zero_copy_only=False)
    return values, (bounds - bounds[0]).astype(np.int64)


def _arrival_times(flat: np.ndarray, bounds: np.ndarray, send_unix_s: np.ndarray,
                   rows: np.ndarray) -> np.ndarray:
    """Per chunk: when it arrived (send + offset, float64) if it ends a gap of a selected row,
    +inf otherwise (first chunks, unselected rows)."""
    lengths = np.diff(bounds)
    start = np.where(rows, np.asarray(send_unix_s, dtype=np.float64), np.inf)
    arrival = np.repeat(start, lengths)
    arrival += flat
    arrival[bounds[:-1][lengths > 0]] = np.inf  # a row's first chunk ends no gap
    return arrival


def _order_by_packed_key(arrival: np.ndarray, kept: int) -> np.ndarray | None:
    """Indices of the `kept` finite entries of `arrival` in (time, index) order, sorting one
    uint64 key per chunk (the time's IEEE bits above the index bits) in place: the order of a
    stable argsort, at the cost of a plain sort. None when time span and count need more than
    64 bits (runs of many hours; the caller then argsorts). Consumes `arrival`."""
    n = arrival.size
    index_bits = max(1, int(n - 1).bit_length())
    bits = arrival.view(np.int64)  # positive doubles (and +inf) order as their bit patterns
    finite = np.isfinite(arrival)
    low = int(bits.min())
    high = int(np.max(bits, where=finite, initial=low))
    if low < 0 or (high - low).bit_length() + index_bits > 63:
        return None  # a negative time, or too many bits: keys would not order as times
    keys = arrival.view(np.uint64)
    for first in range(0, n, _STEP):
        chunk = keys[first:first + _STEP]
        chunk -= np.uint64(low)
        chunk <<= np.uint64(index_bits)
        chunk |= np.arange(first, first + chunk.size, dtype=np.uint64)
    keys[~finite] = np.iinfo(np.uint64).max
    del finite
    keys.sort()
    head = keys[:kept]
    head &= np.uint64((1 << index_bits) - 1)
    return head.astype(np.int32 if n < 2 ** 31 else np.int64)


def gaps_in_arrival_order(offset_lists: pa.ListArray, send_unix_s: np.ndarray,
                          rows: np.ndarray) -> np.ndarray:
    """Gaps between successive chunk offsets of the selected `rows` (bool mask), pooled and
    ordered by when each gap ended, ties in row order (float64 seconds)."""
    flat, bounds = list_values(offset_lists)
    if flat.size < 2:
        return np.empty(0)
    arrival = _arrival_times(flat, bounds, send_unix_s, np.asarray(rows, dtype=bool))
    ends_gap = ~np.isinf(arrival)  # NaN times (a NaN offset) stay, and sort last
    kept = int(np.count_nonzero(ends_gap))
    if kept == 0:
        return np.empty(0)
    order = None if np.isnan(arrival).any() else _order_by_packed_key(arrival, kept)
    if order is None:
        positions = np.flatnonzero(ends_gap)
        order = positions[np.argsort(arrival[positions], kind="stable")]
    del arrival, ends_gap
    gaps = np.empty(order.size)
    for first in range(0, order.size, _STEP):  # later chunk minus earlier, in float64
        at = order[first:first + _STEP]
        gaps[first:first + at.size] = flat[at]
        at -= 1
        gaps[first:first + at.size] -= flat[at]
    return gaps


def tokens_by_arrival(offset_lists: pa.ListArray, start_unix_s: np.ndarray,
                      output_tokens: np.ndarray, rows: np.ndarray, window_start_unix_s: float,
                      bin_s: float, n_bins: int, end_unix_s: float | None = None
                      ) -> np.ndarray:
    """Output tokens per bin by the arrival time of the chunk that carried them, over the
    selected `rows`: each request's usage count is spread evenly over its content chunks
    (exact when a chunk is one token). Chunks are summed in row order, as one pass would.
    `end_unix_s`: chunks arriving at or after it count nowhere (a span ending inside its
    last bin: that bin holds only what arrived before the end)."""
    per_bin = np.zeros(n_bins)
    flat, bounds = list_values(offset_lists)
    if flat.size == 0:
        return per_bin
    counts = np.diff(bounds)
    selected = np.asarray(rows, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(counts > 0, np.nan_to_num(output_tokens) / counts, 0.0)
    share = np.where(selected, share, np.nan)  # NaN weight: not counted
    start = np.asarray(start_unix_s, dtype=np.float64)
    cuts = np.unique(np.concatenate([[0], np.searchsorted(
        bounds, np.arange(0, flat.size, _STEP), side="right") - 1]))
    for first_row, end_row in zip(cuts, [*cuts[1:], counts.size], strict=True):
        lengths = counts[first_row:end_row]
        arrival = np.repeat(start[first_row:end_row], lengths)
        arrival += flat[bounds[first_row]:bounds[end_row]]
        weight = np.repeat(share[first_row:end_row], lengths)
        index = np.floor((arrival - window_start_unix_s) / bin_s)
        inside = (index >= 0) & (index < n_bins) & np.isfinite(weight)
        if end_unix_s is not None:
            inside &= arrival < end_unix_s
        per_bin += np.bincount(index[inside].astype(np.int64), weights=weight[inside],
                               minlength=n_bins)[:n_bins]
    return per_bin
