"""Readers of public request-trace formats (`traffic.profile: trace`), pure and streaming.

Each reader yields one `TraceRecord` per line of the file, read a line at a time: a 1 GB file
is never held in memory, and the caller stops reading when it has what it needs (a time window,
a request cap). Every format is read strictly; a bad line is a `TraceFormatError` naming the
file, the line and the column or field:

- mooncake: JSON lines; `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (a
  list of block ids, required);
- azure: CSV with a header; `TIMESTAMP` (a date and time), `ContextTokens`,
  `GeneratedTokens`;
- burstgpt: CSV with a header; `Timestamp` (s), `Request tokens`, `Response tokens`;
- generic: a `.csv` file with a header, else JSON lines; `timestamp_s` (s), `input_tokens`,
  `output_tokens`, and optionally `hash_ids` and `session_id`.

Other columns and fields are ignored. In a generic CSV, `hash_ids` is a space-separated list.
Timestamps must not decrease from one line to the next (equal ones are fine): a file out of
order is refused, not sorted, because sorting needs the whole file in memory; sort it first
(`sort -t, -k1,1n` for a CSV whose first column is the time). Lengths must be whole numbers
of at least 0; a record with 0 input or 0 output tokens is yielded (the caller counts and
skips it: BurstGPT logs failed requests with 0 response tokens).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

TraceFormat = Literal["mooncake", "azure", "burstgpt", "generic"]
FORMATS: tuple[TraceFormat, ...] = ("mooncake", "azure", "burstgpt", "generic")

# format -> (time, input, output) column names; hash ids / session where the format has them
_COLUMNS: dict[str, tuple[str, str, str]] = {
    "mooncake": ("timestamp", "input_length", "output_length"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "generic": ("timestamp_s", "input_tokens", "output_tokens"),
}
HASH_IDS = "hash_ids"
SESSION_ID = "session_id"


class TraceFormatError(ValueError):
    """A trace file that cannot be read as its format: names the file, line and column."""


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One request of a trace, in the suite's units."""

    line: int  # 1-based line of the file it came from
    timestamp_s: float  # as the file gives it, in seconds (not yet relative to the first)
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int | str, ...] = ()  # prefix blocks, in order; () when the format has none
    session_id: str | None = None


def read_trace(path: str | Path, fmt: str) -> Iterator[TraceRecord]:
    """The records of `path` read as `fmt`, one line at a time, in file order (timestamps
    checked non-decreasing). TraceFormatError on the first bad line; ValueError for an
    unknown format or an unreadable file."""
    file = Path(path).expanduser()
    if fmt not in _COLUMNS:
        raise ValueError(f"unknown trace format {fmt!r}: one of {', '.join(FORMATS)}")
    if not file.is_file():
        raise ValueError(f"{file}: no such trace file")
    jsonl = fmt == "mooncake" or (fmt == "generic" and file.suffix.lower() != ".csv")
    records = _jsonl_records(file, fmt) if jsonl else _csv_records(file, fmt)
    previous: TraceRecord | None = None
    try:
        for record in records:
            if previous is not None and record.timestamp_s < previous.timestamp_s:
                time_column = _COLUMNS[fmt][0]
                raise TraceFormatError(
                    f"{file}:{record.line}: {time_column!r} goes back in time "
                    f"({record.timestamp_s:.6g} s, line {previous.line} had "
                    f"{previous.timestamp_s:.6g} s): a trace is read in time order and not "
                    "sorted (that would read the whole file into memory); sort the file by "
                    "its timestamps first")
            previous = record
            yield record
    except UnicodeDecodeError as error:
        raise TraceFormatError(f"{file}: not UTF-8 text ({error})") from None
    except OSError as error:
        raise ValueError(f"{file}: cannot read the trace ({error})") from error


# ------------------------------------------------------------------------------ JSON lines
def _jsonl_records(file: Path, fmt: str) -> Iterator[TraceRecord]:
    time_key, input_key, output_key = _COLUMNS[fmt]
    with file.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            where = f"{file}:{number}"
            try:
                item = json.loads(text)
            except json.JSONDecodeError as error:
                raise TraceFormatError(f"{where}: column {error.colno}: not valid JSON "
                                       f"({error.msg})") from None
            if not isinstance(item, dict):
                raise TraceFormatError(f"{where}: a {fmt} line is a JSON object, got a JSON "
                                       f"{type(item).__name__}")
            raw_time = _required(item, time_key, where)
            timestamp = _number(raw_time, time_key, where)
            if fmt == "mooncake":
                timestamp /= 1000.0  # milliseconds
            hash_ids: tuple[int | str, ...] = ()
            if fmt == "mooncake" or HASH_IDS in item:
                hash_ids = _hash_id_list(_required(item, HASH_IDS, where), where)
            session = item.get(SESSION_ID) if fmt == "generic" else None
            if session is not None and not isinstance(session, str | int):
                raise TraceFormatError(f"{where}: field {SESSION_ID!r}: a string or a whole "
                                       f"number, got {session!r}")
            yield TraceRecord(
                number, timestamp,
                _length(_required(item, input_key, where), input_key, where),
                _length(_required(item, output_key, where), output_key, where),
                hash_ids, None if session is None else str(session))


def _required(item: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in item:
        raise TraceFormatError(f"{where}: field {key!r} is missing (the line has "
                               f"{', '.join(map(repr, item)) or 'no fields'})")
    return item[key]


def _hash_id_list(value: Any, where: str) -> tuple[int | str, ...]:
    if not isinstance(value, list):
        raise TraceFormatError(f"{where}: field {HASH_IDS!r}: a list of block ids, got "
                               f"{value!r}")
    for index, block in enumerate(value):
        if isinstance(block, bool) or not isinstance(block, int | str):
            raise TraceFormatError(f"{where}: field {HASH_IDS!r}[{index}]: a block id is a "
                                   f"whole number or a string, got {block!r}")
    return tuple(value)


# ------------------------------------------------------------------------------------- CSV
def _csv_records(file: Path, fmt: str) -> Iterator[TraceRecord]:
    time_key, input_key, output_key = _COLUMNS[fmt]
    with file.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise TraceFormatError(f"{file}: empty: a {fmt} trace starts with a header line")
        names = [name.strip() for name in header]
        wanted = [time_key, input_key, output_key]
        missing = [name for name in wanted if name not in names]
        if missing:
            raise TraceFormatError(
                f"{file}:1: column {', '.join(map(repr, missing))} missing from the header "
                f"(a {fmt} trace has {', '.join(map(repr, wanted))}; the header has "
                f"{', '.join(map(repr, names))})")
        at = {name: names.index(name) for name in wanted}
        hash_at = names.index(HASH_IDS) if fmt == "generic" and HASH_IDS in names else None
        session_at = (names.index(SESSION_ID)
                      if fmt == "generic" and SESSION_ID in names else None)
        for row in reader:
            number = reader.line_num
            if not row or not any(cell.strip() for cell in row):
                continue
            where = f"{file}:{number}"
            if len(row) != len(names):
                raise TraceFormatError(f"{where}: {len(row)} columns, the header has "
                                       f"{len(names)}")
            cell = row[at[time_key]].strip()
            timestamp = (_azure_time(cell, time_key, where) if fmt == "azure"
                         else _number(_parse_number(cell, time_key, where), time_key, where))
            hash_ids: tuple[int | str, ...] = ()
            if hash_at is not None:
                hash_ids = tuple(int(b) if b.lstrip("-").isdigit() else b
                                 for b in row[hash_at].split())
            session = row[session_at].strip() if session_at is not None else ""
            yield TraceRecord(
                number, timestamp,
                _length(_parse_number(row[at[input_key]].strip(), input_key, where),
                        input_key, where),
                _length(_parse_number(row[at[output_key]].strip(), output_key, where),
                        output_key, where),
                hash_ids, session or None)


def _parse_number(cell: str, column: str, where: str) -> float | int:
    try:
        return int(cell)
    except ValueError:
        pass
    try:
        return float(cell)
    except ValueError:
        raise TraceFormatError(f"{where}: column {column!r}: not a number: {cell!r}") from None


def _azure_time(cell: str, column: str, where: str) -> float:
    """`2023-11-16 18:15:46.6805900` (the Azure traces' 7-digit fractions): seconds since the
    epoch, the time taken as UTC."""
    base, _, fraction = cell.partition(".")
    try:
        moment = datetime.fromisoformat(base)
        seconds = float(f"0.{fraction}") if fraction else 0.0
    except ValueError:
        raise TraceFormatError(f"{where}: column {column!r}: not a date and time like "
                               f"'2023-11-16 18:15:46.6805900': {cell!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp() + seconds


# ---------------------------------------------------------------------------------- values
def _number(value: Any, column: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        raise TraceFormatError(f"{where}: column {column!r}: a finite number, got {value!r}")
    return float(value)


def _length(value: Any, column: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or (isinstance(value, float) and not value.is_integer()):
        raise TraceFormatError(f"{where}: column {column!r}: a whole number of tokens, got "
                               f"{value!r}")
    if value < 0:
        raise TraceFormatError(f"{where}: column {column!r}: a negative length ({value!r})")
    return int(value)
