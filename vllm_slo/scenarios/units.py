"""Parsing of human-written durations, rates and thresholds into SI base units (seconds)."""

from __future__ import annotations

import re

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|min|h)?\s*$")
_DURATION_FACTORS_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, None: 1.0}


def parse_duration_s(value: object) -> float:
    """`30s`, `500ms`, `2m`, `1h`, `1.5` (seconds) -> seconds. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 30s, 500ms or 2m, got {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"a duration cannot be negative, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration like 30s, 500ms or 2m, got {value!r}")
    match = _DURATION.match(value)
    if match is None:
        raise ValueError(f"expected a duration like 30s, 500ms or 2m, got {value!r}")
    return float(match.group(1)) * _DURATION_FACTORS_S[match.group(2)]


def format_duration_s(seconds: float) -> str:
    """Compact human form: 0.0123 -> '12.3ms', 2.5 -> '2.50s'."""
    if seconds != seconds:  # NaN
        return "n/a"
    if abs(seconds) < 1.0:
        return f"{seconds * 1e3:.1f}ms"
    if abs(seconds) < 120.0:
        return f"{seconds:.2f}s"
    return f"{seconds / 60.0:.1f}min"
