"""Samples on disk, read back: the per-process streams (format: `run_folder.samples_format`)
consolidated into `samples.parquet` (pandas/polars read it directly), older files conformed to
the current schema, and the load generator's own CPU records."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from vllm_slo.run_folder.samples_format import (
    ROW_ORDER,
    SAMPLE_SCHEMA,
    SAMPLES_DIR,
    SAMPLES_FILE,
    read_stream_tolerant,
)
from vllm_slo.scenarios.errors import ScenarioError


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
    tables = [conform(read_stream_tolerant(path)) for path in paths]
    if not tables:
        return SAMPLE_SCHEMA.empty_table()
    return pa.concat_tables(tables).sort_by(ROW_ORDER)


def consolidate(run_dir: Path) -> pa.Table:
    """Merge the per-process streams into samples.parquet, time-ordered by intended send."""
    table = read_streams(stream_files(run_dir))
    pq.write_table(table, run_dir / SAMPLES_FILE)
    return table


def conform(table: pa.Table) -> pa.Table:
    """A table in the current schema: columns added since it was written are null-filled, and
    columns whose type changed are cast (schema 1's float64 chunk offsets become float32)."""
    columns = []
    for field in SAMPLE_SCHEMA:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        columns.append(column if column.type == field.type else column.cast(field.type))
    return pa.Table.from_arrays(columns, schema=SAMPLE_SCHEMA)


@dataclass(frozen=True, slots=True)
class LoadedSamples:
    """A run's rows and, when samples.parquet exists but could not be read, why the rows came
    from the streams instead (a warning the report shows)."""

    table: pa.Table
    warning: str | None = None


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}"


def read_samples(run_dir: Path) -> LoadedSamples:
    """samples.parquet if consolidated and readable, else whatever the streams hold (a
    truncated or corrupt samples.parquet is left as it is and named in the warning); one
    chunk a column (the analysis reads the chunk offsets as one flat array: 1 GB for 250 M
    chunks), and the read buffers handed back to the system. A damaged samples.parquet with
    no stream to fall back on is a ScenarioError naming it."""
    parquet = run_dir / SAMPLES_FILE
    warning = None
    if parquet.is_file():
        try:
            table = conform(pq.read_table(parquet))
        except (pa.ArrowException, OSError, ValueError) as error:
            streams = stream_files(run_dir)
            if not streams:
                raise ScenarioError(
                    f"{parquet} is damaged ({_first_line(error)}) and there is no "
                    f"{SAMPLES_DIR}/*.arrows to read the rows from") from None
            table = read_streams(streams)
            warning = (f"{SAMPLES_FILE} is damaged ({_first_line(error)}); the "
                       f"{table.num_rows} rows of {SAMPLES_DIR}/*.arrows ({len(streams)} "
                       "file(s)) were read instead")
    else:
        table = read_streams(stream_files(run_dir))
    table = table.combine_chunks()
    pa.default_memory_pool().release_unused()
    return LoadedSamples(table, warning)


def load_samples(run_dir: Path) -> pa.Table:
    """The run's rows (`read_samples`), without the note on where they came from."""
    return read_samples(run_dir).table
