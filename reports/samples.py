"""Samples on disk: one row per request, in one columnar schema.

While a run goes, each Locust process appends record batches to its own Arrow IPC stream
(`samples/samples-<host>-<pid>.arrows`), flushed about every second, so a crash loses seconds,
not the run; a truncated stream is read up to its last complete batch. After the run the
streams are consolidated into `samples.parquet` (pandas/polars read it directly).
Durations are seconds (float64); wall-clock columns are Unix seconds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

SCHEMA_VERSION = 1
SAMPLES_DIR = "samples"
SAMPLES_FILE = "samples.parquet"

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
    pa.field("chunk_offsets_s", pa.list_(pa.float64())),  # content chunks - intended send
    pa.field("output_tokens", pa.int32()),  # from the usage chunk
    pa.field("prompt_tokens", pa.int32()),  # from the usage chunk
    pa.field("prompt_tokens_planned", pa.int32()),  # message contents, by the tokenizer
    pa.field("max_tokens", pa.int32()),
    pa.field("status_code", pa.int32(), nullable=False),
    pa.field("ok", pa.bool_(), nullable=False),
    pa.field("error", pa.string()),
    pa.field("finish_reason", pa.string()),
], metadata={"vllm_slo_samples_schema": str(SCHEMA_VERSION)})


class SampleWriter:
    """Appends rows to an Arrow IPC stream; `flush()` writes buffered rows as one batch."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = ipc.new_stream(self._sink, SAMPLE_SCHEMA)
        self._rows: list[dict[str, Any]] = []
        self.rows_written = 0

    def append(self, row: dict[str, Any]) -> None:
        self._rows.append(row)

    def flush(self) -> None:
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        self._writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=SAMPLE_SCHEMA))
        self._sink.flush()
        self.rows_written += len(rows)

    def close(self) -> None:
        self.flush()
        self._writer.close()
        self._sink.close()


def read_stream_tolerant(path: Path) -> pa.Table:
    """All complete batches of an Arrow IPC stream, also when the writer died mid-file."""
    batches = []
    try:
        with pa.OSFile(str(path), "rb") as source:
            reader = ipc.open_stream(source)
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
                except (pa.ArrowInvalid, OSError):
                    break  # truncated tail: keep what was complete
    except (pa.ArrowInvalid, OSError):
        pass  # not even a schema was written
    return pa.Table.from_batches(batches, schema=SAMPLE_SCHEMA)


def client_cpu_fractions(run_dir: Path) -> list[float]:
    """Per-second CPU use of each Locust process (fraction of one core), all processes."""
    fractions = []
    for path in sorted((run_dir / SAMPLES_DIR).glob("client-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                fractions.append(float(json.loads(line)["cpu_fraction"]))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a crash
    return fractions


def stream_files(run_dir: Path) -> list[Path]:
    return sorted((run_dir / SAMPLES_DIR).glob("*.arrows"))


def read_streams(paths: Iterable[Path]) -> pa.Table:
    tables = [read_stream_tolerant(path) for path in paths]
    if not tables:
        return SAMPLE_SCHEMA.empty_table()
    return pa.concat_tables(tables).sort_by("intended_send_unix_s")


def consolidate(run_dir: Path) -> pa.Table:
    """Merge the per-process streams into samples.parquet, time-ordered by intended send."""
    table = read_streams(stream_files(run_dir))
    pq.write_table(table, run_dir / SAMPLES_FILE)
    return table


def conform(table: pa.Table) -> pa.Table:
    """A table in the current schema: columns added since it was written are null-filled."""
    columns = [table.column(f.name) if f.name in table.column_names
               else pa.nulls(table.num_rows, f.type) for f in SAMPLE_SCHEMA]
    return pa.Table.from_arrays(columns, schema=SAMPLE_SCHEMA) if columns else table


def load_samples(run_dir: Path) -> pa.Table:
    """samples.parquet if consolidated, else whatever the streams hold."""
    parquet = run_dir / SAMPLES_FILE
    if parquet.is_file():
        return conform(pq.read_table(parquet))
    return read_streams(stream_files(run_dir))
