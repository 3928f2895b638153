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

import logging
from array import array
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

# 2: chunk_offsets_s float32 (was float64); 3: status; 4: retry_after_s; 5: profile;
# 6: chunk_tokens, ttft_answer_s, reasoning_chunks, reasoning_tokens; adapter
# (status `bad_response`, issue 40, is a new word in the same column: still schema 6;
# session_turns and branch, nullable columns older files read as null: still schema 6)
SCHEMA_VERSION = 6
# what became of a request, one word (the error column keeps the details):
REQUEST_STATUSES = (
    "ok",
    "http_error",  # an HTTP status other than 200 (429, 500, 503, 400 ...)
    "transport_error",  # refused, reset, closed before the response ended: no usable answer
    "timeout",  # cut at traffic.request_timeout (a stalled stream, a server that never answers)
    "malformed_stream",  # a payload that is not JSON or not UTF-8
    "bad_response",  # a reply's value of the wrong type or range, or a body over the size cap
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
    # the requests the plan gave the request's session (profile agent: the parent's turns
    # and every sub-agent's); null: not a session
    pa.field("session_turns", pa.int32()),
    # the request's sub-agent within its session (agent fan_out); null: the parent chain
    pa.field("branch", pa.int32()),
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


_LOGGED_PROBLEMS = 10  # rows repaired or dropped named in the log; the rest only counted
_log = logging.getLogger(__name__)


class _Unfit(ValueError):
    """A row value its column cannot hold."""


def _fit_string(value: Any) -> Any:
    if type(value) is str:
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800")
            raise _Unfit("not valid Unicode") from None
        return value
    raise _Unfit(f"{type(value).__name__}, not a string")


def _fit_float(value: Any) -> Any:
    if type(value) is float:
        return value
    if isinstance(value, (float, int, np.floating, np.integer)) and not isinstance(
            value, (bool, np.bool_)):
        try:
            return float(value)
        except OverflowError:
            raise _Unfit("too large for a float") from None
    raise _Unfit(f"{type(value).__name__}, not a number")


def _fit_bool(value: Any) -> Any:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise _Unfit(f"{type(value).__name__}, not a bool")


def _int_fitter(bits: int) -> Callable[[Any], Any]:
    limit = 2 ** (bits - 1)

    def fit(value: Any) -> Any:
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            if -limit <= value < limit:
                return int(value)
            raise _Unfit(f"out of int{bits}'s range")
        raise _Unfit(f"{type(value).__name__}, not an integer")
    return fit


def _fitter(kind: pa.DataType) -> Callable[[Any], Any]:
    """The check of one column's values: returns the value as stored, or raises _Unfit."""
    if kind == pa.string():
        return _fit_string
    if kind == pa.float64():
        return _fit_float
    if kind == pa.bool_():
        return _fit_bool
    if pa.types.is_integer(kind):
        return _int_fitter(kind.bit_width)
    raise TypeError(f"no check for column type {kind}")


# (name, check) of every scalar column, in _SCALAR_FIELDS' order
_FITTERS = tuple((f.name, _fitter(f.type)) for f in _SCALAR_FIELDS)


def _fit_tokens(tokens: Any) -> array[int]:
    """A row's chunk tokens as int16 (a count beyond int16 stored as its nearest bound)."""
    try:
        return array("h", tokens)  # the common case: small ints, converted in C
    except (TypeError, OverflowError):
        pass
    out = array("h")
    for k in tokens:
        if not isinstance(k, (int, np.integer)) or isinstance(k, (bool, np.bool_)):
            raise _Unfit(f"a chunk's tokens is {type(k).__name__}, not an integer")
        out.append(min(max(int(k), -32768), 32767))
    return out


class RowBatcher:
    """Gathers rows into Arrow record batches in SAMPLE_SCHEMA: `append` a row, `take_batches`
    the rows gathered so far (the buffers start afresh). `SampleWriter` writes them to a file;
    a remote worker sends them to its master (`loadtests/remote_rows.py`).

    A row is a dict keyed by SAMPLE_SCHEMA's names (missing keys are null); its
    `chunk_offsets_s` is a sequence of float seconds or a numpy array (stored as float32).

    Rows are sacred (issue 40): `append` checks every value against its column before the row
    joins the batch and files it whole or not at all, so a flush never meets a value it
    cannot store. A value that does not fit its column is stored as null and the row marked
    failed (`bad_response`, the error naming column and value; counted in `rows_repaired`,
    the first ones logged): that never happens to rows built from checked replies
    (`loadtests/openai_stream.py`), only to a bug of the suite's own. Should building a batch
    still fail, its rows are written one by one and only the offending ones left out
    (`rows_dropped`, logged)."""

    def __init__(self) -> None:
        self.rows_repaired = 0  # written with unfit values as null, marked failed
        self.rows_dropped = 0  # left out: its one-row batch would not build either
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

    def _problem(self, counter: str, message: str) -> None:
        count = getattr(self, counter) + 1
        setattr(self, counter, count)
        if self.rows_repaired + self.rows_dropped <= _LOGGED_PROBLEMS:
            _log.warning("samples writer (%s): %s", counter.replace("_", " "), message)

    def append(self, row: dict[str, Any]) -> None:
        """File one row, whole (see the class docstring); never raises for a row's values."""
        get = row.get
        values: list[Any] = []
        unfit: list[str] = []
        for name, fit in _FITTERS:
            value = get(name)
            if value is None:
                values.append(None)
                continue
            try:
                values.append(fit(value))
            except _Unfit as exc:
                values.append(None)
                unfit.append(f"{name} = {_quote(value)} ({exc})")
        offsets = get(OFFSETS_COLUMN)
        flat = array("f")
        if offsets is not None:
            try:
                flat = _float32_offsets(offsets)
            except (TypeError, ValueError, OverflowError) as exc:
                offsets = None
                unfit.append(f"{OFFSETS_COLUMN} ({type(exc).__name__}: {exc})")
        tokens = get(TOKENS_COLUMN)
        token_values = array("h")
        if tokens is not None:
            try:
                token_values = _fit_tokens(tokens)
            except (_Unfit, TypeError, OverflowError) as exc:
                tokens = None
                unfit.append(f"{TOKENS_COLUMN} ({exc})")
        if unfit:
            values = self._mark_failed(values, "; ".join(unfit))
            self._problem("rows_repaired", f"row {_quote(get('request_id'))}: "
                          f"{'; '.join(unfit)} stored as null")
        for column, value in zip(self._columns.values(), values, strict=True):
            column.append(value)
        self._flat.extend(flat)
        self._missing.append(offsets is None)
        self._ends.append(len(self._flat))
        self._tokens.extend(token_values)
        self._tokens_missing.append(tokens is None)
        self._token_ends.append(len(self._tokens))
        self._rows += 1

    @staticmethod
    def _mark_failed(values: list[Any], reason: str) -> list[Any]:
        by_name = dict(zip((f.name for f in _SCALAR_FIELDS), values, strict=True))
        earlier = by_name.get("error")
        note = f"bad_response: the samples writer stored null for {reason}"
        by_name["error"] = note if not earlier else f"{earlier}; {note}"
        if by_name.get("ok"):
            by_name["status"] = "bad_response"
        by_name["ok"] = False
        return list(by_name.values())

    def _batch(self) -> pa.RecordBatch:
        return _build_batch(self._columns, self._flat, self._ends, self._missing,
                            self._tokens, self._token_ends, self._tokens_missing)

    def _row_batches(self) -> list[pa.RecordBatch]:
        """The buffered rows one batch each, leaving out (counted) any that does not build."""
        good = []
        for k in range(self._rows):
            start, end = self._ends[k], self._ends[k + 1]
            token_start, token_end = self._token_ends[k], self._token_ends[k + 1]
            try:
                good.append(_build_batch(
                    {name: [column[k]] for name, column in self._columns.items()},
                    self._flat[start:end], array("i", [0, end - start]), [self._missing[k]],
                    self._tokens[token_start:token_end],
                    array("i", [0, token_end - token_start]), [self._tokens_missing[k]]))
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                self._problem("rows_dropped", f"row {self._columns['request_id'][k]!r} "
                              f"left out: its batch would not build ({exc})")
        return good

    @property
    def rows_buffered(self) -> int:
        return self._rows

    def take_batches(self) -> list[pa.RecordBatch]:
        """The rows appended since the last call, as batches (usually one); buffers reset."""
        if not self._rows:
            return []
        try:
            batches = [self._batch()]
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            _log.warning("samples writer: a batch of %d rows would not build (%s): writing "
                         "them one by one", self._rows, exc)
            batches = self._row_batches()
        self._reset()
        return batches


class SampleWriter(RowBatcher):
    """Appends rows to an Arrow IPC stream; `flush()` writes buffered rows as one batch
    (RowBatcher says how rows are checked)."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = ipc.new_stream(self._sink, SAMPLE_SCHEMA)
        self.rows_written = 0

    def flush(self) -> None:
        batches = self.take_batches()
        if not batches:
            return
        for batch in batches:
            self._writer.write_batch(batch)
            self.rows_written += batch.num_rows
        self._sink.flush()

    def close(self) -> None:
        self.flush()
        self._writer.close()
        self._sink.close()


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _build_batch(columns: dict[str, list[Any]], flat: array[float], ends: array[int],
                 missing: list[bool], tokens: array[int], token_ends: array[int],
                 tokens_missing: list[bool]) -> pa.RecordBatch:
    arrays = [pa.array(columns[f.name], type=f.type) for f in _SCALAR_FIELDS]
    values = pa.array(np.frombuffer(flat, dtype=np.float32), type=OFFSET_TYPE)
    mask = pa.array(missing, type=pa.bool_()) if any(missing) else None
    offsets = pa.ListArray.from_arrays(
        pa.array(np.frombuffer(ends, dtype=np.int32)), values, mask=mask)
    tokens_mask = pa.array(tokens_missing, type=pa.bool_()) if any(tokens_missing) else None
    token_lists = pa.ListArray.from_arrays(
        pa.array(np.frombuffer(token_ends, dtype=np.int32)),
        pa.array(np.frombuffer(tokens, dtype=np.int16), type=TOKENS_TYPE), mask=tokens_mask)
    by_name = dict(zip((f.name for f in _SCALAR_FIELDS), arrays, strict=True))
    by_name[OFFSETS_COLUMN] = offsets
    by_name[TOKENS_COLUMN] = token_lists
    return pa.RecordBatch.from_arrays([by_name[f.name] for f in SAMPLE_SCHEMA],
                                      schema=SAMPLE_SCHEMA)


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
