"""Plotly figures for the HTML report, built from samples (plots downsample; statistics never
do). Returns Plotly JSON strings; the template only places them."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
import pyarrow as pa
from plotly.subplots import make_subplots

from reports.metrics import LATENCY_METRICS, METRIC_TITLES, RunSeries

MAX_ECDF_POINTS = 1000
MAX_SCATTER_POINTS = 5000
_LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 50, "b": 50},
           "height": 420}


def ecdf_points(values: np.ndarray, max_points: int = MAX_ECDF_POINTS
                ) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF at ≤ max_points quantiles (exact for small inputs)."""
    ordered = np.sort(values)
    n = ordered.size
    if n == 0:
        return ordered, ordered
    probabilities = np.arange(1, n + 1) / n
    if n <= max_points:
        return ordered, probabilities
    index = np.unique(np.linspace(0, n - 1, max_points).round().astype(int))
    return ordered[index], probabilities[index]


def latency_ecdf_figure(series_by_label: dict[str, RunSeries]) -> str:
    figure = make_subplots(rows=2, cols=2,
                           subplot_titles=[METRIC_TITLES[m] for m in LATENCY_METRICS])
    for index, metric in enumerate(LATENCY_METRICS):
        row, col = divmod(index, 2)
        for label, series in series_by_label.items():
            x, y = ecdf_points(series.latency(metric) * 1e3)
            figure.add_trace(go.Scatter(x=x, y=y, mode="lines", name=label,
                                        legendgroup=label, showlegend=index == 0),
                             row=row + 1, col=col + 1)
        figure.update_xaxes(title_text="ms", row=row + 1, col=col + 1)
        figure.update_yaxes(title_text="fraction ≤ x", range=[0, 1], row=row + 1, col=col + 1)
    figure.update_layout(title="Latency distributions (ECDF, measured window)",
                         **{**_LAYOUT, "height": 640})
    return figure.to_json()


def _thin(n: int, max_points: int) -> np.ndarray:
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(int))


def timeline_figure(table: pa.Table, warmup_s: float) -> str:
    """TTFT and E2E per request against send time, failures marked, warm-up shaded."""
    table = table.sort_by("intended_send_unix_s")
    sent = np.asarray(table.column("intended_send_unix_s").to_numpy(), dtype=np.float64)
    figure = go.Figure()
    if sent.size:
        elapsed = sent - sent.min()
        ok = np.asarray(table.column("ok").to_numpy(zero_copy_only=False), dtype=bool)
        for column, label in (("ttft_s", "TTFT"), ("e2e_s", "E2E")):
            values = np.asarray(table.column(column).to_numpy(zero_copy_only=False),
                                dtype=np.float64)
            keep = _thin(int(ok.sum()), MAX_SCATTER_POINTS)
            figure.add_trace(go.Scattergl(x=elapsed[ok][keep], y=values[ok][keep] * 1e3,
                                          mode="markers", name=label,
                                          marker={"size": 4, "opacity": 0.6}))
        if (~ok).any():
            keep = _thin(int((~ok).sum()), MAX_SCATTER_POINTS)
            figure.add_trace(go.Scattergl(
                x=elapsed[~ok][keep], y=np.zeros(keep.size), mode="markers", name="failed",
                marker={"size": 7, "symbol": "x", "color": "#c0392b"}))
        if warmup_s > 0:
            figure.add_vrect(x0=0, x1=warmup_s, fillcolor="#999", opacity=0.15, line_width=0,
                             annotation_text="warm-up", annotation_position="top left")
    figure.update_layout(title="Latency over time (per request, by send time)",
                         xaxis_title="seconds since first request", yaxis_title="ms", **_LAYOUT)
    return figure.to_json()


def throughput_figure(series: RunSeries) -> str:
    figure = go.Figure()
    seconds = np.arange(series.output_tokens_per_bin.size)
    figure.add_trace(go.Scatter(x=seconds, y=series.output_tokens_per_bin, mode="lines",
                                name="output tok/s"))
    figure.add_trace(go.Scatter(x=seconds, y=series.completions_per_bin, mode="lines",
                                name="completed req/s", yaxis="y2"))
    figure.update_layout(title="Throughput over the measured window (1 s bins)",
                         xaxis_title="seconds into the measured window",
                         yaxis={"title": "output tok/s"},
                         yaxis2={"title": "req/s", "overlaying": "y", "side": "right"},
                         **_LAYOUT)
    return figure.to_json()
