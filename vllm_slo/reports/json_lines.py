"""JSON-lines files the suite appends to while a run goes on (the load generator's monitor
records, the /metrics scrapes), read back tolerantly: a line torn by a crash, or anything that
is not a JSON object, is skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a file, one a line, in order; [] when the file does not exist."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records
