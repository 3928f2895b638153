"""Plotly figures for the HTML report, and the plot-only series they are drawn from.

Plots downsample and aggregate; statistics never do (every number in a table comes from
`reports.metrics`/`reports.statistics` on all rows). Each figure function takes a mapping
`label -> series` so a comparison page can overlay variants with the same code; a single run
passes one label. Figures are returned as Plotly JSON strings; the template only places them.

Time axes are "seconds since the run's first intended send" so client and server series line
up; the warm-up (and cool-down, when rows exist) is shaded.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from vllm_slo.analysis.run_metrics import RunSeries
from vllm_slo.analysis.server_metrics import ServerSeries
from vllm_slo.reports.render.plot_spec import (
    Grid,
    Spec,
    bar,
    figure,
    scatter,
    set_axis,
    spec_json,
    vrect,
)
from vllm_slo.scenarios.metrics import LATENCY_METRICS, METRICS, MetricKind, parse_cell

MAX_ECDF_POINTS = 1000
MAX_SCATTER_POINTS = 4000
MAX_TIME_BINS = 300
NICE_BIN_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
_LAYOUT: dict[str, Any] = {"margin": {"l": 60, "r": 20, "t": 50, "b": 50}, "height": 420,
                           "legend": {"orientation": "h", "y": -0.18}}
_SHADE = {"warm-up": "#8a8f98", "cool-down": "#8a8f98"}
PALETTE = ("#3566b8", "#d9730d", "#2e9e5b", "#8e44ad", "#c0392b", "#16a2b8", "#7f6a00")
_STAT_COLOURS = {"p50": "#3566b8", "p99": "#d9730d"}
_FAILED = "#c0392b"
_SUBPLOT_MARGIN = {**_LAYOUT["margin"], "t": 90}


def colour(index: int) -> str:
    """The colour of the index-th variant (a single run uses the first)."""
    return PALETTE[index % len(PALETTE)]


def plot_text(text: str) -> str:
    """Text placed into a Plotly label: Plotly renders a subset of HTML tags in labels, so
    anything user-supplied (variant names, error kinds) is entity-escaped first."""
    return html.escape(str(text), quote=False)


# --------------------------------------------------------------------------------------------
# plot-only series


@dataclass(frozen=True, slots=True)
class Phases:
    """Where the warm-up ends and the measured window ends, in seconds since the first send."""

    start_unix_s: float
    measure_start_s: float | None
    measure_end_s: float | None
    end_s: float
    has_cooldown: bool

    def regions(self) -> list[tuple[str, float, float]]:
        regions = []
        if self.measure_start_s is not None and self.measure_start_s > 0:
            regions.append(("warm-up", 0.0, self.measure_start_s))
        if self.has_cooldown and self.measure_end_s is not None and self.end_s > self.measure_end_s:
            regions.append(("cool-down", self.measure_end_s, self.end_s))
        return regions


@dataclass(frozen=True, slots=True)
class Timeline:
    """Per-time-bin aggregates over the whole run (warm-up included) and a thinned set of
    per-request points. Latency bins by intended send time, throughput by completion time."""

    phases: Phases
    bin_s: float
    bin_start_s: np.ndarray
    latency_bins: dict[str, dict[str, np.ndarray]]  # metric -> {"p50": ..., "p99": ...}, NaN empty
    output_tokens_per_s: np.ndarray
    completed_per_s: np.ndarray
    failed_per_s: np.ndarray
    points_s: np.ndarray  # send time of the thinned successful requests
    points: dict[str, np.ndarray]  # metric -> latency (s) of those requests
    failed_points_s: np.ndarray


def _floats(table: pa.Table, name: str) -> np.ndarray:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def nice_bin_s(span_s: float, max_bins: int = MAX_TIME_BINS) -> float:
    """The smallest of 1, 2, 5, 10, 15, 30 s, 1 min, ... giving at most `max_bins` bins."""
    for candidate in NICE_BIN_S:
        if span_s / candidate <= max_bins:
            return float(candidate)
    return float(math.ceil(span_s / max_bins))


def thin_index(n: int, max_points: int) -> np.ndarray:
    """Evenly spaced indices (all of them when n <= max_points)."""
    if n <= max_points:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, max_points).round().astype(int))


def _binned_percentiles(bins: np.ndarray, values: np.ndarray, n_bins: int,
                        percentiles: Iterable[float]) -> dict[str, np.ndarray]:
    percentiles = tuple(percentiles)
    out = {f"p{q:g}": np.full(n_bins, np.nan) for q in percentiles}
    keep = np.isfinite(values)
    bins, values = bins[keep], values[keep]
    if values.size == 0:
        return out
    order = np.lexsort((values, bins))
    bins, values = bins[order], values[order]
    edges = np.flatnonzero(np.diff(bins)) + 1
    for group_bins, group in zip(np.split(bins, edges), np.split(values, edges), strict=True):
        for q in percentiles:
            out[f"p{q:g}"][group_bins[0]] = np.quantile(group, q / 100.0)
    return out


def build_timeline(table: pa.Table, window_s: float | None = None,
                   max_bins: int = MAX_TIME_BINS, max_points: int = MAX_SCATTER_POINTS
                   ) -> Timeline:
    """`window_s`: the scenario's measured duration; the measured window then ends at its
    first send + window_s (else at the first cool-down send, else the last measured send)."""
    table = table.select(["intended_send_unix_s", "e2e_s", "ttft_s", "phase", "ok",
                          "output_tokens"])
    sent = _floats(table, "intended_send_unix_s")
    if sent.size > 1 and not (np.diff(sent) >= 0).all():
        table = table.sort_by("intended_send_unix_s")
        sent = _floats(table, "intended_send_unix_s")
    start = float(sent.min()) if sent.size else 0.0
    elapsed = sent - start
    e2e = _floats(table, "e2e_s")
    done = elapsed + np.nan_to_num(e2e, nan=0.0)
    phase = np.asarray(table.column("phase").to_numpy(zero_copy_only=False), dtype=object)
    ok = np.asarray(table.column("ok").to_numpy(zero_copy_only=False), dtype=bool)
    measured = phase == "measure"
    end_s = float(max(done.max(), elapsed.max())) if sent.size else 0.0
    cooldown = phase == "cooldown"
    measure_start = measure_end = None
    if measured.any():
        measure_start = float(elapsed[measured].min())
        if window_s is not None:
            measure_end = measure_start + window_s
        elif cooldown.any():
            measure_end = float(elapsed[cooldown].min())
        else:
            measure_end = float(elapsed[measured].max())
    phases = Phases(start, measure_start, measure_end, end_s, bool(cooldown.any()))
    bin_s = nice_bin_s(max(end_s, 1.0), max_bins)
    n_bins = max(1, math.floor(end_s / bin_s) + 1)
    send_bin = np.minimum((elapsed // bin_s).astype(int), n_bins - 1)
    done_bin = np.minimum((done // bin_s).astype(int), n_bins - 1)
    tokens = np.nan_to_num(_floats(table, "output_tokens"))
    latency_bins = {}
    values = {"ttft": _floats(table, "ttft_s"), "e2e": e2e}
    for metric, series in values.items():
        latency_bins[metric] = _binned_percentiles(send_bin[ok], series[ok], n_bins, (50, 99))
    output_tokens = np.bincount(done_bin[ok], weights=tokens[ok], minlength=n_bins)
    completed = np.bincount(done_bin[ok], minlength=n_bins).astype(float)
    failed = np.bincount(done_bin[~ok], minlength=n_bins).astype(float)
    good = np.flatnonzero(ok)[thin_index(int(ok.sum()), max_points)]
    bad = np.flatnonzero(~ok)[thin_index(int((~ok).sum()), max_points)]
    return Timeline(
        phases=phases, bin_s=bin_s, bin_start_s=np.arange(n_bins) * bin_s,
        latency_bins=latency_bins, output_tokens_per_s=output_tokens / bin_s,
        completed_per_s=completed / bin_s, failed_per_s=failed / bin_s,
        points_s=elapsed[good], points={m: v[good] for m, v in values.items()},
        failed_points_s=elapsed[bad])


@dataclass(frozen=True, slots=True)
class Health:
    """How far the measurement can be trusted: the client's send lag (measured rows) and
    content chunks per output token (successful measured rows)."""

    send_lag_s: np.ndarray
    chunks_per_token: np.ndarray


def build_health(table: pa.Table, series: RunSeries) -> Health:
    phase = table.column("phase")
    good = pc.and_(pc.equal(phase, "measure"), table.column("ok"))
    chunks = pc.list_value_length(table.column("chunk_offsets_s")).fill_null(0)
    tokens = table.column("output_tokens")
    keep = pc.and_(good, pc.greater(tokens.fill_null(0), 0))
    chunk_counts = np.asarray(chunks.filter(keep).to_numpy(), dtype=np.float64)
    token_counts = np.asarray(tokens.filter(keep).to_numpy(), dtype=np.float64)
    return Health(send_lag_s=series.send_lag_s, chunks_per_token=chunk_counts / token_counts)


# --------------------------------------------------------------------------------------------
# figures


#: Above this many values an ECDF sorts float32 copies (1 GB for 250 M ITL gaps, and faster):
#: the plotted quantiles move by float32 rounding (< 1e-7 relative), invisible on a plot.
ECDF_FLOAT32_ABOVE = 1 << 22


def ecdf_points(values: np.ndarray, max_points: int = MAX_ECDF_POINTS
                ) -> tuple[np.ndarray, np.ndarray]:
    """The empirical CDF at ≤ max_points quantiles (exact for small inputs); the first and last
    order statistics are always kept, so the tails reach their true extremes."""
    values = np.asarray(values)
    if values.size > ECDF_FLOAT32_ABOVE:
        values = values.astype(np.float32)
    finite = np.isfinite(values)
    ordered = values[finite] if not finite.all() else (
        values.copy() if values.size <= ECDF_FLOAT32_ABOVE else values)
    del finite
    ordered.sort()
    n = ordered.size
    if n == 0:
        return ordered, ordered
    if n <= max_points:
        return ordered.astype(np.float64), np.arange(1, n + 1) / n
    # denser towards the upper tail, where the SLOs live: half the points evenly, half on a
    # log scale of the exceedance probability
    even = np.linspace(0, n - 1, max_points // 2)
    tail = n - np.geomspace(1, n, max_points - max_points // 2)
    index = np.unique(np.clip(np.concatenate([even, tail]).round().astype(int), 0, n - 1))
    return ordered[index].astype(np.float64), (index + 1) / n


def _layout(title: str | None, height: int, margin: Mapping[str, int] = _SUBPLOT_MARGIN,
            **extra: Any) -> Spec:
    layout: Spec = {"margin": dict(margin), "height": height, "legend": _LAYOUT["legend"],
                    **extra}
    if title is not None:
        layout["title"] = {"text": title}
    return layout


def latency_ecdf_figure(series_by_label: Mapping[str, RunSeries],
                        metrics: Sequence[str] = LATENCY_METRICS) -> str:
    """One ECDF panel per latency metric in `metrics` (a run's page leaves out those that
    cannot apply to it: `applicable.shown_latency_metrics`), two panels a row."""
    grid_rows = (len(metrics) + 1) // 2
    grid = Grid(rows=grid_rows, cols=2, vertical_spacing=0.28 / grid_rows,
                titles=tuple(METRICS[m].title for m in metrics))
    traces: list[Spec] = []
    thinned = any(series.latency(m).size > MAX_ECDF_POINTS for m in metrics
                  for series in series_by_label.values())
    note = f"; ≤ {MAX_ECDF_POINTS:,} quantiles a curve" if thinned else ""
    layout = _layout("Latency distributions (ECDF, measured window, successful "
                     f"requests{note})", 350 * grid_rows,
                     showlegend=not _single(series_by_label))
    for index, metric in enumerate(metrics):
        row, col = divmod(index, 2)
        for number, (label, series) in enumerate(series_by_label.items()):
            x, y = ecdf_points(series.latency(metric))
            traces.append(scatter(x * 1e3, y, grid, row + 1, col + 1, mode="lines",
                                  name=plot_text(label), legendgroup=plot_text(label),
                                  showlegend=index == 0,
                                  line={"shape": "hv", "color": colour(number)}))
        set_axis(layout, grid.x(row + 1, col + 1), title="ms")
        set_axis(layout, grid.y(row + 1, col + 1), title="fraction ≤ x", range=[0, 1.02])
    return spec_json(figure(traces, layout, grid))


def _shade(layout: Spec, grid: Grid, phases: Phases) -> None:
    """The warm-up (and cool-down) band on every cell, labelled on the first."""
    shapes, labels = layout.setdefault("shapes", []), layout.setdefault("annotations", [])
    for name, x0, x1 in phases.regions():
        for row in range(1, grid.rows + 1):
            for col in range(1, grid.cols + 1):
                first = row == 1 and col == 1
                shape, label = vrect(x0, x1, grid.x(row, col), grid.y(row, col), _SHADE[name],
                                     0.15, name if first else None)
                shapes.append(shape)
                if label is not None:
                    labels.append(label)


def _single(mapping: Mapping[str, Any]) -> bool:
    return len(mapping) == 1


def timeline_figure(timelines: Mapping[str, Timeline]) -> str:
    """TTFT and E2E against send time: per-bin p50 and p99 lines (all requests) and, for a
    single run, a thinned cloud of individual requests; failed requests marked at the bottom."""
    grid = Grid(rows=2, cols=1, shared_x=True, vertical_spacing=0.08,
                titles=("Time to first token", "End-to-end latency"))
    traces: list[Spec] = []
    layout = _layout("Latency over time (by intended send time)", 640)
    for row, metric in enumerate(("ttft", "e2e"), start=1):
        for number, (label, timeline) in enumerate(timelines.items()):
            prefix = "" if _single(timelines) else f"{plot_text(label)} "
            if _single(timelines) and timeline.points_s.size:
                points: Spec = {"legendgroup": "points", "showlegend": row == 1}
                if row == 1:
                    points["name"] = f"requests (≤ {MAX_SCATTER_POINTS:,} shown)"
                traces.append(scatter(
                    timeline.points_s, timeline.points[metric] * 1e3, grid, row,
                    mode="markers", marker={"size": 3, "opacity": 0.35, "color": "#7f8c9d"},
                    **points))
            centers = timeline.bin_start_s + timeline.bin_s / 2
            for key, dash in (("p50", "solid"), ("p99", "dot")):
                line_colour = _STAT_COLOURS[key] if _single(timelines) else colour(number)
                traces.append(scatter(
                    centers, timeline.latency_bins[metric][key] * 1e3, grid, row, mode="lines",
                    name=f"{prefix}{key} per {timeline.bin_s:g}s bin",
                    line={"dash": dash, "color": line_colour},
                    legendgroup=f"{label}-{key}", showlegend=row == 1, connectgaps=False))
            if timeline.failed_points_s.size:
                traces.append(scatter(
                    timeline.failed_points_s, np.zeros(timeline.failed_points_s.size), grid,
                    row, mode="markers", name=f"{prefix}failed requests",
                    legendgroup=f"{label}-f", showlegend=row == 1,
                    marker={"size": 7, "symbol": "x", "color": _FAILED}))
        set_axis(layout, grid.y(row), title="ms", rangemode="tozero")
    first = next(iter(timelines.values()), None)
    if first is not None:
        _shade(layout, grid, first.phases)
    set_axis(layout, grid.x(2), title="seconds since the first request")
    return spec_json(figure(traces, layout, grid))


def throughput_figure(timelines: Mapping[str, Timeline]) -> str:
    """Output tokens/s and completed/failed requests/s by completion time, whole run."""
    grid = Grid(rows=2, cols=1, shared_x=True, vertical_spacing=0.08,
                titles=("Output tokens per second", "Requests completed per second"))
    traces: list[Spec] = []
    first = next(iter(timelines.values()), None)
    title = (f"Throughput over time ({first.bin_s:g} s bins, by completion time)"
             if first is not None else None)
    layout = _layout(title, 580)
    for number, (label, timeline) in enumerate(timelines.items()):
        prefix = "" if _single(timelines) else f"{plot_text(label)} "
        centers = timeline.bin_start_s + timeline.bin_s / 2
        traces.append(scatter(centers, timeline.output_tokens_per_s, grid, 1, mode="lines",
                              line={"shape": "hvh", "color": colour(number)},
                              name=f"{prefix}output tok/s"))
        traces.append(scatter(centers, timeline.completed_per_s, grid, 2, mode="lines",
                              line={"shape": "hvh", "color": colour(number)},
                              name=f"{prefix}ok req/s"))
        if timeline.failed_per_s.any():
            traces.append(scatter(centers, timeline.failed_per_s, grid, 2, mode="lines",
                                  line={"shape": "hvh", "color": _FAILED, "dash": "dot"},
                                  name=f"{prefix}failed req/s"))
    if first is not None:
        _shade(layout, grid, first.phases)
    set_axis(layout, grid.y(1), title=METRICS["output_throughput"].unit, rangemode="tozero")
    set_axis(layout, grid.y(2), title=METRICS["request_throughput"].unit, rangemode="tozero")
    set_axis(layout, grid.x(2), title="seconds since the first request")
    return spec_json(figure(traces, layout, grid))


SERVER_PANELS = ("Requests running / waiting", "KV-cache usage", "Preemptions per scrape interval",
                 "Prefix-cache hit rate per scrape interval")


def server_panels(series: ServerSeries) -> list[str]:
    """The panels this server exported data for (titles from SERVER_PANELS)."""
    present = [series.running is not None or series.waiting is not None,
               series.kv_cache_usage is not None, series.preemptions is not None,
               series.prefix_cache_hit_rate is not None]
    return [title for title, ok in zip(SERVER_PANELS, present, strict=True) if ok]


def server_metrics_figure(series_by_label: Mapping[str, ServerSeries],
                          phases: Phases | None = None) -> str | None:
    """vLLM's own view of the run (from /metrics scrapes); None when no series has data."""
    panels: list[str] = []
    for series in series_by_label.values():
        panels.extend(p for p in server_panels(series) if p not in panels)
    panels.sort(key=SERVER_PANELS.index)
    if not panels:
        return None
    rows = math.ceil(len(panels) / 2)
    cols = 1 if len(panels) == 1 else 2
    grid = Grid(rows=rows, cols=cols, titles=tuple(panels),
                vertical_spacing=0.16 if rows > 1 else 0.1, horizontal_spacing=0.1)
    position = {title: (i // cols + 1, i % cols + 1) for i, title in enumerate(panels)}
    single = _single(series_by_label)
    traces: list[Spec] = []
    layout = _layout("Server metrics (vLLM /metrics, scraped every ~2 s)", 330 * rows + 110)
    for number, (label, series) in enumerate(series_by_label.items()):
        prefix = "" if single else f"{plot_text(label)} "

        def line(role: int, dash: str = "solid", number: int = number) -> dict[str, str]:
            return {"color": colour(role if single else number), "dash": dash}

        def on(title: str, trace: Any = scatter, **properties: Any) -> None:
            traces.append(trace(grid=grid, row=position[title][0], col=position[title][1],
                                **properties))

        if series.running is not None:
            on(SERVER_PANELS[0], x=series.scrape_s, y=series.running, mode="lines+markers",
               line=line(0), name=f"{prefix}running")
        if series.waiting is not None:
            on(SERVER_PANELS[0], x=series.scrape_s, y=series.waiting, mode="lines+markers",
               line=line(1, "dot"), name=f"{prefix}waiting")
        if series.kv_cache_usage is not None:
            on(SERVER_PANELS[1], x=series.scrape_s, y=series.kv_cache_usage * 100,
               mode="lines+markers", line=line(2), name=f"{prefix}KV-cache %")
        if series.preemptions is not None:
            on(SERVER_PANELS[2], bar, x=series.interval_end_s, y=series.preemptions,
               name=f"{prefix}preemptions", marker={"color": line(3)["color"]})
        if series.prefix_cache_hit_rate is not None:
            on(SERVER_PANELS[3], x=series.interval_end_s, y=series.prefix_cache_hit_rate * 100,
               mode="lines+markers", line=line(5), name=f"{prefix}prefix-cache hit %")
    for title, (row, col) in position.items():
        unit = {SERVER_PANELS[0]: "requests", SERVER_PANELS[1]: "%",
                SERVER_PANELS[2]: "count", SERVER_PANELS[3]: "%"}[title]
        y_axis: Spec = {"title": unit, "rangemode": "tozero"}
        if unit == "%":
            y_axis["range"] = [0, 101]
        set_axis(layout, grid.y(row, col), **y_axis)
        set_axis(layout, grid.x(row, col), title="s since the first request")
    if phases is not None:
        _shade(layout, grid, phases)
    return spec_json(figure(traces, layout, grid))


def chunks_per_token_histogram(values: np.ndarray, bins: int = 40
                               ) -> tuple[np.ndarray, np.ndarray]:
    """Counts over `bins` equal bins spanning the data (and 1.0), so the plot carries 40
    numbers however many requests there were."""
    values = values[np.isfinite(values)]
    if values.size == 0:
        return np.histogram(values, bins=bins, range=(0.0, 1.05))
    low = max(0.0, float(values.min()) - 0.02)
    high = max(1.05, float(values.max()) + 0.02)
    return np.histogram(values, bins=bins, range=(low, high))


def health_figure(health_by_label: Mapping[str, Health]) -> str:
    """Send lag ECDF and the distribution of content chunks per output token."""
    grid = Grid(rows=1, cols=2, horizontal_spacing=0.12, titles=(
        "Send lag (actual − intended send), ECDF", "Content chunks per output token"))
    single = _single(health_by_label)
    traces: list[Spec] = []
    layout = _layout("Measurement health", 420, barmode="overlay")
    for number, (label, health) in enumerate(health_by_label.items()):
        name = plot_text(label)
        prefix = "" if single else f"{name} "
        x, y = ecdf_points(health.send_lag_s)
        traces.append(scatter(x * 1e3, y, grid, 1, 1, mode="lines", name=f"{prefix}send lag",
                              line={"shape": "hv", "color": colour(number)}, legendgroup=name))
        counts, edges = chunks_per_token_histogram(health.chunks_per_token)
        traces.append(bar((edges[:-1] + edges[1:]) / 2, counts, grid, 1, 2,
                          width=np.diff(edges), name=f"{prefix}chunks/token", legendgroup=name,
                          opacity=1.0 if single else 0.6,
                          marker={"color": colour(number if not single else 1)}))
    set_axis(layout, grid.x(1, 1), title="ms", rangemode="tozero")
    set_axis(layout, grid.y(1, 1), title="fraction ≤ x", range=[0, 1.02])
    set_axis(layout, grid.x(1, 2), title="chunks / output token (1 = one token per chunk)")
    set_axis(layout, grid.y(1, 2), title="requests")
    return spec_json(figure(traces, layout, grid))


def cell_axis(cell: str) -> tuple[float, str]:
    """A figure axis for a cell: the factor its values are multiplied by and the unit shown
    (latencies in ms, the others in their own unit)."""
    metric = parse_cell(cell).metric
    return (1e3, "ms") if metric.kind is MetricKind.LATENCY else (1.0, metric.unit)


def _axis_title(cell: str, unit: str) -> str:
    return f"{cell}{f' ({unit})' if unit else ''}, median over trials"


def pareto_figure(points: Mapping[str, tuple[float, float]], front: Sequence[str],
                  latency_cell: str, throughput_cell: str) -> str:
    """Each started candidate's median throughput (x) against its median latency (y); the
    front as a line through its points. `points`: candidate -> (throughput, latency)."""
    shown = {name: xy for name, xy in points.items() if all(map(math.isfinite, xy))}
    x_scale, x_unit = cell_axis(throughput_cell)
    y_scale, y_unit = cell_axis(latency_cell)
    grid = Grid()
    on_front = [shown[name] for name in front if name in shown]
    traces = [
        scatter([x * x_scale for x, _ in shown.values()], [y * y_scale for _, y in shown.values()],
                grid, mode="markers+text", text=[plot_text(name) for name in shown],
                textposition="top center", name="candidates",
                marker={"size": 10, "color": "#8a8f98"}),
        scatter([x * x_scale for x, _ in on_front], [y * y_scale for _, y in on_front], grid,
                mode="lines+markers", name="Pareto front", marker={"size": 12, "color": colour(0)},
                line={"color": colour(0)})]
    layout = _layout(None, _LAYOUT["height"], _LAYOUT["margin"])
    set_axis(layout, grid.x(), title=_axis_title(throughput_cell, x_unit))
    set_axis(layout, grid.y(), title=_axis_title(latency_cell, y_unit))
    return spec_json(figure(traces, layout, grid))
