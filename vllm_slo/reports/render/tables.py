"""Text tables laid out in benchstat's way, for the terminal, the experiment page's <pre> block
and summary.json's `benchstat`: each column padded to its widest cell, two spaces between
columns, a dashed rule under the header, then the table's notes (legend, test, footnotes) one
line each. The analysis builds the tables as data (`analysis.wording.TextTable`)."""

from __future__ import annotations

from collections.abc import Sequence

from vllm_slo.analysis.wording import TextTable


def table_text(table: TextTable) -> str:
    rows = [table.header, *table.rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(table.header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
             .rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join([*lines, *table.notes])


def tables_text(tables: Sequence[TextTable]) -> str:
    """Tables one after another, a blank line between them ("" without any): an experiment's
    benchstat table, then its decision table."""
    return "\n\n".join(table_text(table) for table in tables)
