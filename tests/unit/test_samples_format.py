"""The samples format: SampleWriter's column buffers write what a batch of row dicts would,
offsets as float32; schema-1 files (float64 offsets) still read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from vllm_slo.reports.samples import conform, load_samples, read_streams
from vllm_slo.run_folder.samples_format import (
    OFFSETS_COLUMN,
    SAMPLE_SCHEMA,
    SAMPLES_FILE,
    SCHEMA_VERSION,
    SampleWriter,
    read_stream_tolerant,
)


def _row(i: int, offsets) -> dict:
    return {"request_id": f"r{i}", "process_id": 3, "user_id": i, "plan_index": 10 + i,
            "conversation_id": None, "turn": 1, "phase": "measure", "endpoint": "chat",
            "intended_send_unix_s": 1.8e9 + i * 0.25, "send_unix_s": 1.8e9 + i * 0.25 + 1e-4,
            "send_lag_s": 1e-4, "queued_for_slot": i % 2 == 0, "ttft_s": 0.05 + i,
            "e2e_s": 1.5, OFFSETS_COLUMN: offsets, "output_tokens": 7, "prompt_tokens": 5,
            "prompt_tokens_planned": 4, "max_tokens": 8, "status_code": 200, "ok": True,
            "error": "x" if i == 2 else None, "finish_reason": "length",
            "not_in_the_schema": "ignored"}


def _schema_v1() -> pa.Schema:
    index = SAMPLE_SCHEMA.get_field_index(OFFSETS_COLUMN)
    return SAMPLE_SCHEMA.set(index, pa.field(OFFSETS_COLUMN, pa.list_(pa.float64())))


def test_writer_writes_what_a_batch_of_row_dicts_holds(tmp_path: Path) -> None:
    rows = [_row(0, [0.05, 0.0700001, 123.456789]), _row(1, np.array([0.1, 0.2])),
            _row(2, []), _row(3, None), _row(4, (1, 2.5))]
    del rows[4]["user_id"]  # a missing key is null
    writer = SampleWriter(tmp_path / "s.arrows")
    for row in rows[:2]:
        writer.append(row)
    writer.flush()
    for row in rows[2:]:
        writer.append(row)
    writer.close()
    assert writer.rows_written == 5
    table = read_stream_tolerant(tmp_path / "s.arrows")
    assert table.schema.equals(SAMPLE_SCHEMA, check_metadata=True)
    assert table.schema.metadata[b"vllm_slo_samples_schema"] == str(SCHEMA_VERSION).encode()
    assert table.column(OFFSETS_COLUMN).type == pa.list_(pa.float32())
    expected = pa.Table.from_pylist(
        [{**row, OFFSETS_COLUMN: None if row[OFFSETS_COLUMN] is None
          else [float(v) for v in row[OFFSETS_COLUMN]]} for row in rows], schema=SAMPLE_SCHEMA)
    assert table.equals(expected)
    offsets = table.column(OFFSETS_COLUMN).to_pylist()
    assert offsets[0] == [float(np.float32(v)) for v in (0.05, 0.0700001, 123.456789)]
    assert offsets[2] == [] and offsets[3] is None and offsets[4] == [1.0, 2.5]


def test_flush_without_rows_writes_nothing(tmp_path: Path) -> None:
    writer = SampleWriter(tmp_path / "s.arrows")
    writer.flush()
    writer.close()
    assert writer.rows_written == 0
    assert read_stream_tolerant(tmp_path / "s.arrows").num_rows == 0


def test_schema_1_files_with_float64_offsets_still_read(tmp_path: Path) -> None:
    old = pa.Table.from_pylist([_row(0, [0.1, 0.3]), _row(1, [])], schema=_schema_v1())
    samples = tmp_path / "samples"
    samples.mkdir()
    with pa.OSFile(str(samples / "old.arrows"), "wb") as sink, \
            ipc.new_stream(sink, old.schema) as stream:
        stream.write_table(old)
    streams = read_streams([samples / "old.arrows"])
    assert streams.schema.equals(SAMPLE_SCHEMA)
    assert streams.column(OFFSETS_COLUMN).to_pylist() == [
        [float(np.float32(0.1)), float(np.float32(0.3))], []]
    pq.write_table(old.drop_columns(["prompt_tokens_planned"]), tmp_path / SAMPLES_FILE)
    loaded = load_samples(tmp_path)
    assert loaded.schema.equals(SAMPLE_SCHEMA)
    assert loaded.column("prompt_tokens_planned").null_count == 2
    assert loaded.column(OFFSETS_COLUMN).to_pylist() == streams.column(OFFSETS_COLUMN).to_pylist()


def test_conform_keeps_a_current_table_as_it_is() -> None:
    table = pa.Table.from_pylist([_row(0, [0.5])], schema=SAMPLE_SCHEMA)
    assert conform(table).equals(table)


def test_truncated_stream_reads_its_complete_batches(tmp_path: Path) -> None:
    path = tmp_path / "s.arrows"
    writer = SampleWriter(path)
    for i in range(2):
        writer.append(_row(i, [0.1 * (i + 1)]))
        writer.flush()
    writer.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    table = read_stream_tolerant(path)
    assert table.num_rows == 1
    assert table.column("request_id").to_pylist() == ["r0"]


@pytest.mark.parametrize("bad", [[0.1, None]])
def test_a_none_offset_reads_nan(tmp_path: Path, bad: list) -> None:
    writer = SampleWriter(tmp_path / "s.arrows")
    writer.append(_row(0, bad))
    writer.close()
    values = read_stream_tolerant(tmp_path / "s.arrows").column(OFFSETS_COLUMN).to_pylist()[0]
    assert values[0] == pytest.approx(0.1) and np.isnan(values[1])
