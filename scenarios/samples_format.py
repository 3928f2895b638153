"""The per-request row format of a run folder, shared by the side that writes it (the Locust
processes, `loadtests/`) and the side that reads it (`reports/`): one row per request in one
columnar schema, appended by each Locust process to its own Arrow IPC stream
(`samples/samples-<host>-<pid>.arrows`) and flushed about every second, so a crash loses
seconds, not the run; a truncated stream is read up to its last complete batch.
Durations are seconds (float64); wall-clock columns are Unix seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

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

# Time order of rows: intended send time, ties broken by request id, so the order (and every
# autocorrelation estimated on it) never depends on how the per-process streams were
# concatenated.
ROW_ORDER = [("intended_send_unix_s", "ascending"), ("request_id", "ascending")]
