"""The per-request row format of a run folder, shared by the side that writes it (the Locust
processes, `loadtests/`) and the side that reads it (`reports/`): one row per request in one
columnar schema, appended by each Locust process to its own Arrow IPC stream
(`samples/samples-<host>-<pid>.arrows`) and flushed about every second, so a crash loses
seconds, not the run; a truncated stream is read up to its last complete batch.
Durations are seconds (float64); wall-clock columns are Unix seconds.

`chunk_offsets_s` (the arrival of every content chunk, in seconds after the request's intended
send) is float32 since schema 2: 4 bytes a chunk, so 250 M chunks are 1 GB, at a resolution of
2^-24 of the offset (≤ 0.5 µs below 8 s, ≤ 4 µs below 60 s, ≤ 61 µs below 1,000 s). Schema 1
files (float64 offsets) stay readable: `reports.samples.conform` casts them.

`chunk_tokens` (schema 6) holds the tokens each of those chunks carried, from the server's
per-chunk usage (int16, 2 bytes a chunk); null where the server sent none (and in every row
written before schema 6): the analysis then says those tokens are unknown, never guesses.
The chunks are the token chunks of any kind, reasoning and answer; `ttft_answer_s` is the
first answer chunk's, `reasoning_chunks` how many of them carried reasoning only.

`SampleWriter` runs inside the Locust process's event loop: `append` files a row's values into
per-column buffers (the offsets into one flat float32 array) and `flush` builds each column
once, so a flush of 200 rows × 256 chunks costs about a millisecond, not the tens of
milliseconds of building a batch from row dicts (`benchmarks/analysis_scale.py --writer`).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

# 2: chunk_offsets_s float32 (was float64); 3: status; 4: retry_after_s; 5: profile;
# 6: chunk_tokens, ttft_answer_s, reasoning_chunks, reasoning_tokens; adapter
SCHEMA_VERSION = 6
# what became of a request, one word (the error column keeps the details):
REQUEST_STATUSES = (
    "ok",
    "http_error",  # an HTTP status other than 200 (429, 500, 503, 400 ...)
    "transport_error",  # refused, reset, closed before the response ended: no usable answer
    "timeout",  # cut at traffic.request_timeout (a stalled stream, a server that never answers)
    "malformed_stream",  # a payload that is not JSON or not UTF-8
    "stream_error",  # an SSE error event inside a 200 stream (vLLM's load shedding)
    "incomplete_stream",  # the stream ended without [DONE]
    "no_tokens",  # a 200 stream without any content token
    "cancelled",  # still in flight when the run stopped (Locust's stop_timeout, Ctrl-C)
)
SAMPLES_DIR = "samples"
SAMPLES_FILE = "samples.parquet"
OFFSETS_COLUMN = "chunk_offsets_s"
OFFSET_TYPE = pa.float32()
TOKENS_COLUMN = "chunk_tokens"
TOKENS_TYPE = pa.int16()
_LIST_COLUMNS = (OFFSETS_COLUMN, TOKENS_COLUMN)

SAMPLE_SCHEMA = pa.schema([
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("process_id", pa.int32(), nullable=False),
    pa.field("user_id", pa.int32()),
    pa.field("plan_index", pa.int64()),  # position in the run's request plan
    pa.field("conversation_id", pa.int64()),
    pa.field("turn", pa.int32()),
    pa.field("phase", pa.string(), nullable=False),  # warmup | measure | cooldown
    pa.field("endpoint", pa.string(), nullable=False),  # chat | completions
    pa.field("intended_send_unix_s", pa.float64(), nullable=False),
    pa.field("send_unix_s", pa.float64(), nullable=False),
    pa.field("send_lag_s", pa.float64(), nullable=False),  # actual - intended
    pa.field("queued_for_slot", pa.bool_()),  # open loop: every in-flight slot was busy
    pa.field("ttft_s", pa.float64()),  # first content chunk - intended send; null if none
    pa.field("e2e_s", pa.float64()),  # end of response - intended send
    pa.field(OFFSETS_COLUMN, pa.list_(OFFSET_TYPE)),  # content chunks - intended send
    pa.field("output_tokens", pa.int32()),  # from the usage chunk
    pa.field("prompt_tokens", pa.int32()),  # from the usage chunk
    pa.field("prompt_tokens_planned", pa.int32()),  # message contents, by the tokenizer
    pa.field("max_tokens", pa.int32()),
    pa.field("status_code", pa.int32(), nullable=False),
    pa.field("ok", pa.bool_(), nullable=False),
    pa.field("error", pa.string()),
    pa.field("finish_reason", pa.string()),
    pa.field("status", pa.string()),  # one of REQUEST_STATUSES; null in schema-1/2 files
    pa.field("retry_after_s", pa.float64()),  # an HTTP error's Retry-After (seconds); null if none
    pa.field("profile", pa.string()),  # the plan's profile of the request (a mix: its part)
    pa.field("adapter", pa.string()),  # traffic.lora: the name the request was sent to
    pa.field(TOKENS_COLUMN, pa.list_(TOKENS_TYPE)),  # tokens each chunk carried; null: unknown
    pa.field("ttft_answer_s", pa.float64()),  # first answer chunk - intended send; null if none
    pa.field("reasoning_chunks", pa.int32()),  # chunks carrying reasoning and no answer
    pa.field("reasoning_tokens", pa.int32()),  # server's count, else per-chunk sum; null: unknown
], metadata={"vllm_slo_samples_schema": str(SCHEMA_VERSION)})

_SCALAR_FIELDS = tuple(f for f in SAMPLE_SCHEMA if f.name not in _LIST_COLUMNS)


def _float32_offsets(offsets: Sequence[float] | np.ndarray) -> array[float]:
    """One row's offsets as a float32 array (None elements, which nothing writes, read NaN)."""
    if isinstance(offsets, np.ndarray):
        return array("f", np.ascontiguousarray(offsets, dtype=np.float32).tobytes())
    try:
        return array("f", offsets)
    except TypeError:
        return array("f", [float("nan") if v is None else v for v in offsets])


class SampleWriter:
    """Appends rows to an Arrow IPC stream; `flush()` writes buffered rows as one batch.

    A row is a dict keyed by SAMPLE_SCHEMA's names (missing keys are null); its
    `chunk_offsets_s` is a sequence of float seconds or a numpy array (stored as float32)."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = ipc.new_stream(self._sink, SAMPLE_SCHEMA)
        self.rows_written = 0
        self._reset()

    def _reset(self) -> None:
        self._columns: dict[str, list[Any]] = {f.name: [] for f in _SCALAR_FIELDS}
        self._flat = array("f")
        self._ends = array("i", [0])  # list offsets into _flat
        self._missing: list[bool] = []  # rows without chunk_offsets_s (a null list)
        self._tokens = array("h")
        self._token_ends = array("i", [0])
        self._tokens_missing: list[bool] = []
        self._rows = 0

    def append(self, row: dict[str, Any]) -> None:
        get = row.get
        for name, column in self._columns.items():
            column.append(get(name))
        offsets = get(OFFSETS_COLUMN)
        if offsets is not None:
            self._flat.extend(_float32_offsets(offsets))
        self._missing.append(offsets is None)
        self._ends.append(len(self._flat))
        tokens = get(TOKENS_COLUMN)
        if tokens is not None:
            self._tokens.extend(min(int(k), 32767) for k in tokens)
        self._tokens_missing.append(tokens is None)
        self._token_ends.append(len(self._tokens))
        self._rows += 1

    def _batch(self) -> pa.RecordBatch:
        arrays = [pa.array(self._columns[f.name], type=f.type) for f in _SCALAR_FIELDS]
        values = pa.array(np.frombuffer(self._flat, dtype=np.float32), type=OFFSET_TYPE)
        mask = pa.array(self._missing, type=pa.bool_()) if any(self._missing) else None
        offsets = pa.ListArray.from_arrays(
            pa.array(np.frombuffer(self._ends, dtype=np.int32)), values, mask=mask)
        tokens_mask = (pa.array(self._tokens_missing, type=pa.bool_())
                       if any(self._tokens_missing) else None)
        tokens = pa.ListArray.from_arrays(
            pa.array(np.frombuffer(self._token_ends, dtype=np.int32)),
            pa.array(np.frombuffer(self._tokens, dtype=np.int16), type=TOKENS_TYPE),
            mask=tokens_mask)
        by_name = dict(zip((f.name for f in _SCALAR_FIELDS), arrays, strict=True))
        by_name[OFFSETS_COLUMN] = offsets
        by_name[TOKENS_COLUMN] = tokens
        return pa.RecordBatch.from_arrays([by_name[f.name] for f in SAMPLE_SCHEMA],
                                          schema=SAMPLE_SCHEMA)

    def flush(self) -> None:
        if not self._rows:
            return
        batch, rows = self._batch(), self._rows
        self._reset()
        self._writer.write_batch(batch)
        self._sink.flush()
        self.rows_written += rows

    def close(self) -> None:
        self.flush()
        self._writer.close()
        self._sink.close()


def read_stream_tolerant(path: Path) -> pa.Table:
    """All complete batches of an Arrow IPC stream, also when the writer died mid-file, in the
    schema the file was written with (`reports.samples.conform` brings older ones to today's);
    an empty table in SAMPLE_SCHEMA when not even a schema was written."""
    batches = []
    schema = SAMPLE_SCHEMA
    try:
        with pa.OSFile(str(path), "rb") as source:
            reader = ipc.open_stream(source)
            schema = reader.schema
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError):
                    break  # truncated tail: keep what was complete
    except (pa.ArrowInvalid, OSError):
        pass  # not even a schema was written
    return pa.Table.from_batches(batches, schema=schema)

# Time order of rows: intended send time, ties broken by request id, so the order (and every
# autocorrelation estimated on it) never depends on how the per-process streams were
# concatenated.
ROW_ORDER = [("intended_send_unix_s", "ascending"), ("request_id", "ascending")]
