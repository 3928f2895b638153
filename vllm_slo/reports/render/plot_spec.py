"""Plotly figures as the plain JSON plotly.js reads: traces and layout written as dicts, with a
subplot grid laid out as plotly's `make_subplots` lays it out.

Plotly's Python objects (`go.Figure`, `make_subplots`, `update_layout`) check every property
through a tree of validators, paid by every trial of an experiment or a capacity search; the
report needs only the JSON, which these functions write directly (benchmarks/figure_cost.py
times both routes). Arrays stay numpy until `spec_json`, which writes them as plotly.js's
typed arrays, as plotly.py does. The unit tests hold the specs to plotly's validators.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import plotly.io as pio

#: Trace types the figures use: the report inlines plotly.js's basic bundle (scatter, bar, pie).
TRACE_TYPES = ("scatter", "bar")

Spec = dict[str, Any]


@cache
def template() -> Spec:
    """plotly_white with the trace defaults of the trace types used only: every figure carries
    its template, and the full one (defaults for 24 trace types) is 7 KB a figure. Read from
    plotly's own template file (equal to `plotly.io.templates["plotly_white"]`, a unit test
    checks), without building plotly's objects."""
    path = resources.files("plotly") / "package_data" / "templates" / "plotly_white.json"
    white = json.loads(path.read_text(encoding="utf-8"))
    return {"layout": white["layout"],
            "data": {name: white["data"][name] for name in TRACE_TYPES if name in white["data"]}}


def axis_name(letter: str, index: int) -> str:
    """`x`, `x2`, `x3`, ... (the trace's reference); `axis_key` gives the layout's key."""
    return letter if index == 1 else f"{letter}{index}"


def axis_key(reference: str) -> str:
    """`x2` -> `xaxis2` (the layout key of a trace's axis reference)."""
    return f"{reference[0]}axis{reference[1:]}"


@dataclass(frozen=True, slots=True)
class Grid:
    """A rows x cols grid of subplots, row 1 at the top, as `make_subplots(rows, cols, ...)`
    places it: equal cells, `vertical_spacing` and `horizontal_spacing` as fractions of the
    figure between them (plotly's defaults: 0.2/cols; 0.3/rows, or 0.5/rows under titles),
    each cell's title centred above it. `shared_x`: one column whose x axes all follow the
    bottom one, labelled there."""

    rows: int = 1
    cols: int = 1
    titles: tuple[str, ...] = ()
    vertical_spacing: float | None = None
    horizontal_spacing: float | None = None
    shared_x: bool = False

    def index(self, row: int, col: int) -> int:
        if not (1 <= row <= self.rows and 1 <= col <= self.cols):
            raise ValueError(f"no cell ({row}, {col}) in a {self.rows} x {self.cols} grid")
        return (row - 1) * self.cols + col

    def x(self, row: int = 1, col: int = 1) -> str:
        return axis_name("x", self.index(row, col))

    def y(self, row: int = 1, col: int = 1) -> str:
        return axis_name("y", self.index(row, col))

    def _domains(self) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
        """Each column's x domain (left to right) and each row's y domain (top to bottom)."""
        h_space = 0.2 / self.cols if self.horizontal_spacing is None else self.horizontal_spacing
        v_space = ((0.5 if self.titles else 0.3) / self.rows if self.vertical_spacing is None
                   else self.vertical_spacing)
        width = (1.0 - h_space * (self.cols - 1)) / self.cols
        height = (1.0 - v_space * (self.rows - 1)) / self.rows
        columns = [(c * (width + h_space), c * (width + h_space) + width)
                   for c in range(self.cols)]
        from_bottom = [(r * (height + v_space), r * (height + v_space) + height)
                       for r in range(self.rows)]
        return columns, from_bottom[::-1]

    def layout(self) -> Spec:
        """The axes (domains, anchors) and the cells' titles, to merge into a figure's layout."""
        columns, rows = self._domains()
        layout: Spec = {}
        titles: list[Spec] = []
        for row in range(1, self.rows + 1):
            for col in range(1, self.cols + 1):
                x, y = self.x(row, col), self.y(row, col)
                x_axis: Spec = {"anchor": y, "domain": list(columns[col - 1])}
                if self.shared_x and row < self.rows:
                    x_axis.update(matches=self.x(self.rows, col), showticklabels=False)
                layout[axis_key(x)] = x_axis
                layout[axis_key(y)] = {"anchor": x, "domain": list(rows[row - 1])}
                k = self.index(row, col) - 1
                if k < len(self.titles) and self.titles[k]:
                    titles.append({
                        "text": self.titles[k], "showarrow": False, "font": {"size": 16},
                        "x": sum(columns[col - 1]) / 2, "xanchor": "center", "xref": "paper",
                        "y": rows[row - 1][1], "yanchor": "bottom", "yref": "paper"})
        layout["annotations"] = titles
        return layout


def figure(traces: list[Spec], layout: Spec, grid: Grid | None = None) -> Spec:
    """A figure spec: the traces, the grid's axes and titles, then `layout` (its keys win; its
    `annotations` and `shapes` are added to the grid's), and the compact template."""
    merged: Spec = {"template": template()}
    if grid is not None:
        merged.update(grid.layout())
    for key, value in layout.items():
        if key in ("annotations", "shapes"):
            merged[key] = [*merged.get(key, []), *value]
        elif key.startswith(("xaxis", "yaxis")) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return {"data": traces, "layout": merged}


def scatter(x: Any, y: Any, grid: Grid, row: int = 1, col: int = 1, **properties: Any) -> Spec:
    """A scatter trace on the grid's cell (row, col)."""
    return {"type": "scatter", "x": x, "y": y, "xaxis": grid.x(row, col),
            "yaxis": grid.y(row, col), **properties}


def bar(x: Any, y: Any, grid: Grid, row: int = 1, col: int = 1, **properties: Any) -> Spec:
    """A bar trace on the grid's cell (row, col)."""
    return {"type": "bar", "x": x, "y": y, "xaxis": grid.x(row, col), "yaxis": grid.y(row, col),
            **properties}


def set_axis(layout: Spec, reference: str, **properties: Any) -> None:
    """Merge `properties` into the layout's axis for a trace reference (`x2`, `y`): `title` is
    given as text."""
    axis = layout.setdefault(axis_key(reference), {})
    if "title" in properties:
        properties["title"] = {"text": properties["title"]}
    axis.update(properties)


def vrect(x0: float, x1: float, x: str, y: str, fill: str, opacity: float,
          label: str | None = None) -> tuple[Spec, Spec | None]:
    """A band over x0..x1 the full height of the subplot on axes (x, y), as `add_vrect` draws
    it, and its label at the band's top left (None without a label)."""
    shape = {"type": "rect", "x0": x0, "x1": x1, "xref": x, "y0": 0, "y1": 1,
             "yref": f"{y} domain", "fillcolor": fill, "opacity": opacity, "line": {"width": 0}}
    if label is None:
        return shape, None
    return shape, {"text": label, "showarrow": False, "x": x0, "xref": x, "xanchor": "left",
                   "y": 1, "yref": f"{y} domain", "yanchor": "top"}


def vline(x: float, x_axis: str, y_axis: str, line: Spec) -> Spec:
    """A vertical line at x the full height of the subplot on axes (x_axis, y_axis), as
    `add_vline` draws it."""
    return {"type": "line", "x0": x, "x1": x, "xref": x_axis, "y0": 0, "y1": 1,
            "yref": f"{y_axis} domain", "line": line}


#: numpy dtypes plotly.js reads as typed arrays, and their short names there
_TYPED_ARRAYS = {"int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2", "int32": "i4",
                 "uint32": "u4", "float32": "f4", "float64": "f8"}


def typed_array(values: np.ndarray) -> Spec | np.ndarray:
    """A numeric numpy array as plotly.js's typed-array spec (dtype and base64 bytes: about
    11 characters a float64 where its decimal text takes up to 24); int64 in the narrowest
    of int8, int16, int32 that holds it, as plotly.py writes it. Anything else is returned as
    is (written as a JSON list)."""
    if values.ndim != 1 or values.size == 0:
        return values
    if values.dtype == np.int64:
        low, high = values.min(), values.max()
        narrow = next((t for t in (np.int8, np.int16, np.int32)
                       if np.iinfo(t).min <= low and high <= np.iinfo(t).max), None)
        if narrow is None:
            return values
        values = values.astype(narrow)
    short = _TYPED_ARRAYS.get(str(values.dtype))
    if short is None:
        return values
    little_endian = values.astype(values.dtype.newbyteorder("<"), copy=False)
    return {"dtype": short, "bdata": base64.b64encode(little_endian.tobytes()).decode("ascii")}


def _with_typed_arrays(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return typed_array(value)
    if isinstance(value, dict):
        return {key: _with_typed_arrays(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_with_typed_arrays(item) for item in value]
    return value


def spec_json(spec: Spec) -> str:
    """The figure as plotly.js's JSON: numpy arrays as typed arrays (NaN stays NaN, so a line's
    empty bins stay gaps), everything else through plotly's own encoder."""
    text: str = pio.to_json(_with_typed_arrays(spec), validate=False)  # plotly is untyped
    return text
