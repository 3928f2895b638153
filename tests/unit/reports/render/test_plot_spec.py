"""Figures written as plain Plotly JSON (reports/render/plot_spec.py): the grid is laid out as
plotly's own `make_subplots`, a band as its `add_vrect`, and every figure the reports write is
one plotly's validators accept (the report skips them; these tests do not)."""

from __future__ import annotations

import base64
import json
import math
import re

import numpy as np
import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots
from test_report_outputs import make_run

from vllm_slo.reports.render.html import build_view
from vllm_slo.reports.render.plot_spec import Grid, figure, set_axis, spec_json, template, vrect
from vllm_slo.reports.run_report import load_run


@pytest.mark.parametrize("options", [
    {"rows": 1, "cols": 1},
    {"rows": 2, "cols": 1, "shared_xaxes": True, "vertical_spacing": 0.08,
     "subplot_titles": ["a", "b"]},
    {"rows": 4, "cols": 2, "vertical_spacing": 0.07, "subplot_titles": list("abcdefg")},
    {"rows": 1, "cols": 2, "horizontal_spacing": 0.12, "subplot_titles": ["a", "b"]},
    {"rows": 2, "cols": 2, "vertical_spacing": 0.16, "horizontal_spacing": 0.1,
     "subplot_titles": ["a", "b", "c"]},
    {"rows": 3, "cols": 3, "subplot_titles": ["", "b"]},
])
def test_the_grid_is_laid_out_as_make_subplots_lays_it_out(options: dict) -> None:
    reference = make_subplots(**options).to_plotly_json()["layout"]
    reference.pop("template", None)
    grid = Grid(rows=options["rows"], cols=options["cols"],
                titles=tuple(options.get("subplot_titles", ())),
                vertical_spacing=options.get("vertical_spacing"),
                horizontal_spacing=options.get("horizontal_spacing"),
                shared_x=options.get("shared_xaxes", False))
    layout = grid.layout()
    reference.setdefault("annotations", [])  # plotly writes none without titles
    assert layout == reference


def test_a_cell_outside_the_grid_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no cell \(3, 1\) in a 2 x 1 grid"):
        Grid(rows=2).x(3, 1)


def test_a_band_is_drawn_as_add_vrect_draws_it() -> None:
    reference = make_subplots(rows=2, cols=1)
    for row in (1, 2):
        reference.add_trace(go.Scatter(x=[0, 9], y=[0, 1]), row=row, col=1)
    reference.add_vrect(x0=0, x1=5, fillcolor="#8a8f98", opacity=0.15, line_width=0, row=2,
                        col=1, annotation_text="warm-up", annotation_position="top left")
    layout = reference.to_plotly_json()["layout"]
    grid = Grid(rows=2)
    shape, label = vrect(0, 5, grid.x(2), grid.y(2), "#8a8f98", 0.15, "warm-up")
    assert [shape] == layout["shapes"] and [label] == layout["annotations"]
    assert vrect(0, 5, "x", "y", "#8a8f98", 0.15)[1] is None


def test_layout_keys_win_and_annotations_add_to_the_titles() -> None:
    grid = Grid(rows=2, titles=("top", "bottom"))
    layout: dict = {"annotations": [{"text": "mine"}], "height": 300}
    set_axis(layout, grid.y(2), title="ms", rangemode="tozero")
    spec = figure([], layout, grid)["layout"]
    assert [a["text"] for a in spec["annotations"]] == ["top", "bottom", "mine"]
    assert spec["yaxis2"]["title"] == {"text": "ms"} and spec["yaxis2"]["anchor"] == "x2"
    assert spec["height"] == 300 and spec["template"]["layout"]
    assert set(spec["template"]["data"]) == {"scatter", "bar"}


def test_numpy_arrays_are_written_as_plotly_writes_them() -> None:
    from _plotly_utils.utils import to_typed_array_spec

    arrays = [np.array([1.5, math.nan, 2.0]), np.arange(3), np.arange(3, dtype=np.float32),
              np.array([2**40, 1])]
    trace = json.loads(spec_json(figure([{"type": "scatter", "x": array, "name": str(k)}
                                         for k, array in enumerate(arrays)], {})))["data"]
    assert [t["x"] for t in trace] == [to_typed_array_spec(a) for a in arrays[:3]] + [
        [2**40, 1]]  # an int64 beyond int32: a plain list, as plotly.py leaves it
    decoded = np.frombuffer(base64.b64decode(trace[0]["x"]["bdata"]), dtype="<f8")
    assert decoded[0] == 1.5 and math.isnan(decoded[1]) and decoded[2] == 2.0
    lists = json.loads(spec_json(figure([{"type": "bar", "x": ["a", "b"], "y": [1, None]}],
                                        {})))["data"][0]
    assert lists["x"] == ["a", "b"] and lists["y"] == [1, None]  # lists stay lists


def test_every_figure_of_a_run_report_is_valid_plotly(tmp_path) -> None:
    loaded = load_run(make_run(tmp_path))
    view = build_view(loaded.document, loaded.series, loaded.table, loaded.server_records)
    for shown in view.all_figures():
        spec = json.loads(shown.plotly_json)
        checked = go.Figure(spec)  # raises on a property plotly does not know
        assert len(checked.data) == len(spec["data"]) > 0, shown.element_id
        assert checked.layout.template.layout.font is not None  # the template arrived whole


def _valid_plotly(spec: dict, name: str) -> None:
    checked = go.Figure(spec)  # raises on a property plotly does not know
    assert len(checked.data) == len(spec["data"]) > 0, name


def test_every_figure_of_a_capacity_page_is_valid_plotly() -> None:
    from test_capacity_report import above_range_document, search_document, two_trial_document

    from vllm_slo.reports.render import capacity_html

    for document in (search_document(), above_range_document(), two_trial_document()):
        for build in (capacity_html.latency_figure, capacity_html.throughput_figure,
                      capacity_html.server_figure):
            text = build(document)
            assert text is not None, build.__name__
            _valid_plotly(json.loads(text), build.__name__)


def test_the_experiment_pages_trial_dots_are_valid_plotly(tmp_path) -> None:
    from tests.support.synthetic import write_synthetic_experiment
    from vllm_slo.reports.experiment_report import render_experiment

    root = write_synthetic_experiment(tmp_path / "exp", {"a": 0.05, "b": 0.08}, trials=3,
                                      noise=0.05)
    page = render_experiment(root).report_path.read_text(encoding="utf-8")
    specs = [json.loads(text) for text in re.findall(
        r'<script type="application/json" id="[^"]*-spec">(.*?)</script>', page, re.S)]
    assert specs, "no figure on the experiment page"
    for number, spec in enumerate(specs):
        _valid_plotly(spec, f"figure {number}")


def test_the_template_is_plotlys_white_for_the_trace_types_used() -> None:
    import plotly.io as pio

    white = pio.templates["plotly_white"].to_plotly_json()
    assert template() == {"layout": white["layout"],
                          "data": {"scatter": white["data"]["scatter"],
                                   "bar": white["data"]["bar"]}}


def test_the_tunes_pareto_figure_is_valid_plotly() -> None:
    from vllm_slo.reports.render.figures import pareto_figure

    spec = json.loads(pareto_figure({"c01": (900.0, 0.21), "c02": (1200.0, 0.35),
                                     "c03": (float("nan"), 0.3)}, ["c01", "c02"],
                                    "ttft.p50", "output_throughput.mean"))
    _valid_plotly(spec, "pareto")
    assert spec["data"][0]["text"] == ["c01", "c02"]  # a candidate without a value is left out
    assert spec["data"][1]["y"] == [210.0, 350.0]  # latency in ms
    assert spec["layout"]["xaxis"]["title"]["text"].startswith("output_throughput.mean")
