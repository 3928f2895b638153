"""report.html of a capacity folder: per search (each variant's) the capacity with its
interval, the limiting SLO and why the search stopped; three figures against load (each SLO's
statistic with its interval and threshold beside TTFT / E2E percentiles; output throughput and
goodput; vLLM's KV-cache usage and waiting requests), the capacity a vertical line and its
interval a shaded band in each; every step as a table row linking its run's report; and, with
variants, each one's capacity ratio against the first. All formatting is here, in a
`CapacityView`; reports/templates/capacity.html.j2 only lays it out (autoescape, no logic).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import yaml

from vllm_slo.analysis.capacity import CapacityDocument, CapacityStep, Interval, StepSlo
from vllm_slo.analysis.capacity_comparison import CapacityChange, CapacityRatio
from vllm_slo.analysis.capacity_race import RaceResult
from vllm_slo.redaction import redact_secrets, redact_text
from vllm_slo.reports.render.capacity_text import render_race_lines
from vllm_slo.reports.render.figures import _LAYOUT, colour, plot_text
from vllm_slo.reports.render.html import FigureView, render_template
from vllm_slo.reports.render.plot_spec import (
    Grid,
    Spec,
    figure,
    scatter,
    set_axis,
    spec_json,
    vline,
    vrect,
)
from vllm_slo.reports.render.plotly_bundle import plotly_js
from vllm_slo.reports.render.text import outcome
from vllm_slo.run_folder.run_files import REPORT_FILE, VARIANTS_DIR
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.scenarios.metrics import METRICS, MetricKind, format_per_second
from vllm_slo.scenarios.units import format_duration_s
from vllm_slo.stats.capacity_search import CapacityEstimate

OPEN_BOUND = "–"
# a step's outcome and an SLO verdict as the page's badge classes (reports/templates/_report.css)
OUTCOME_CLASSES = {"under": "pass", "over": "fail", "near": "inconclusive", "invalid": "invalid"}
CHANGE_CLASSES = {CapacityChange.HIGHER: "pass", CapacityChange.LOWER: "fail",
                  CapacityChange.EQUIVALENT: "measured",
                  CapacityChange.UNDECIDED: "inconclusive"}
# invalid over a missed `require` over undecided over pass (capacity_report's order)
SEVERITY = {ExitCode.PASS: 0, ExitCode.INCONCLUSIVE: 1, ExitCode.SLO_FAILED: 2,
            ExitCode.INVALID_MEASUREMENT: 3}
TRIAL_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star")
PERCENTILES = ("p50", "p90", "p99")
PERCENTILE_COLOURS = {"p50": "#9db4d9", "p90": "#6f8fc4", "p99": "#3a5d9c"}
SLO_COLOURS = ("#d9730d", "#8e44ad", "#2e9e5b", "#c0392b", "#16a2b8", "#7f6a00")
CAPACITY_COLOUR = "#1d2330"
BAND_COLOUR = "#2e9e5b"
BAND_OPACITY = 0.15
SERIES_METRICS = ("ttft", "e2e")  # the steps' p50 / p90 / p99 points (CapacityStep.ttft_s, e2e_s)


@dataclass(frozen=True, slots=True)
class SloCell:
    verdict: str  # PASS | FAIL | INCONCLUSIVE, or "" where the step has no such SLO
    verdict_class: str
    observed: str  # "480.0ms [450.0ms, 512.0ms]"


@dataclass(frozen=True, slots=True)
class StepRow:
    index: str
    trial: str
    load: str
    achieved: str
    window: str  # "2.00min (×2, attempt 1)"
    outcome: str
    outcome_class: str
    slos: list[SloCell]  # one per SearchView.slo_names
    stability: str  # "stable" or why not
    stability_class: str  # "" or "warning"
    goodput: str
    problems: str  # the step's invalid reasons, or ""
    report: str  # its run's report.html, relative to this page


@dataclass(frozen=True, slots=True)
class TrialRow:
    trial: str
    capacity: str
    interval: str
    limiting_slo: str
    status: str
    reason: str


@dataclass(frozen=True, slots=True)
class SearchView:
    anchor: str  # the section's id
    name: str  # the variant, or the scenario's name
    outcome: str
    outcome_class: str
    capacity: str  # "9.87 req/s", or "not bracketed"
    interval: str  # "[9.5, 10.4] req/s"
    confidence: str  # "95%"
    limiting_slo: str
    status: str
    reason: str
    exit_code: str  # "0 (PASS)"
    facts: list[tuple[str, str]]
    band_note: str  # how the figures draw the interval (open ends say so)
    trial_rows: list[TrialRow]  # only with several trials
    slo_names: list[str]
    step_rows: list[StepRow]
    figures: list[FigureView]
    figure_notes: list[str]  # figures or series left out, and why


@dataclass(frozen=True, slots=True)
class RatioRow:
    variant: str
    ratio: str
    interval: str
    confidence: str
    change: str
    change_class: str


@dataclass(frozen=True, slots=True)
class CapacityView:
    title: str
    started: str
    description: str
    outcome: str
    outcome_class: str
    headline: str
    searches: list[SearchView]
    baseline: str  # the variant the ratios are against ("" : no comparison)
    ratio_rows: list[RatioRow]
    race_lines: list[str]  # a capacity race's standings (tune.objective: capacity), or []
    scenario_yaml: str
    plotly_js: str


# --------------------------------------------------------------------------------------------
# text


def _number(value: float | None) -> str:
    return OPEN_BOUND if value is None else f"{value:.4g}"


def interval_text(low: float | None, high: float | None) -> str:
    """`[9.5, 10.4]`; an open side reads `–`."""
    return f"[{_number(low)}, {_number(high)}]"


def capacity_text(estimate: CapacityEstimate, unit: str) -> str:
    return "not bracketed" if estimate.value is None else f"{estimate.value:.4g} {unit}"


def slo_metric(label: str) -> str:
    """The metric an SLO label names: `ttft p90 < 500ms`, `chat: ttft p90 < 1s`,
    `adapter:sql: ttft p95 < 1s` -> `ttft`."""
    return label.rsplit(": ", 1)[-1].split(" ", 1)[0]


def value_formatter(metric: str) -> Callable[[float], str]:
    """How a value of `metric` prints (with its unit): the registry's, `.4g` for an unknown."""
    known = METRICS.get(metric)
    if known is None:
        return lambda value: f"{value:.4g}"
    return lambda value: known.format_value(value) + known.suffix


def observed_text(value: float | None, low: float | None, high: float | None,
                  fmt: Callable[[float], str]) -> str:
    if value is None:
        return "n/a"
    bounds = [OPEN_BOUND if bound is None else fmt(bound) for bound in (low, high)]
    return f"{fmt(value)} [{bounds[0]}, {bounds[1]}]"


def rate_text(interval: Interval, unit: str) -> str:
    if interval.value is None:
        return "n/a"
    bounds = [OPEN_BOUND if bound is None else format_per_second(bound)
              for bound in (interval.ci_low, interval.ci_high)]
    return f"{format_per_second(interval.value)} {unit} [{bounds[0]}, {bounds[1]}]"


def window_text(step: CapacityStep) -> str:
    window = format_duration_s(step.window_s)
    return f"{window} (×{2 ** step.attempt}, attempt {step.attempt})" if step.attempt else window


def _exit_code_text(code: int) -> str:
    try:
        return f"{code} ({ExitCode(code).name})"
    except ValueError:
        return str(code)


def band_note(estimate: CapacityEstimate, unit: str) -> str:
    """How the figures mark the capacity, open ends named."""
    low, high = estimate.low, estimate.high
    share = f"{estimate.confidence:.0%}"
    if low is None and high is None:
        return "No interval: no step under and none over capacity, so nothing is shaded."
    line = ("" if estimate.value is None else
            f"The vertical line is the capacity, {estimate.value:.4g} {unit}. ")
    text = (f"{line}The shaded band is its {share} interval {interval_text(low, high)} {unit}: "
            f"from the highest load under capacity to the lowest load over it.")
    if low is None:
        text += " It is open below (no step was under capacity): shaded to the figure's edge."
    if high is None:
        text += " It is open above (no step was over capacity): shaded to the figure's edge."
    return text


def slo_cells(step: CapacityStep, names: Sequence[str]) -> list[SloCell]:
    by_name = {s.slo: s for s in step.slos}
    cells = []
    for name in names:
        slo = by_name.get(name)
        if slo is None:
            cells.append(SloCell("", "", "—"))
            continue
        fmt = value_formatter(slo_metric(slo.slo))
        cells.append(SloCell(slo.verdict.value, slo.verdict.value.lower(),
                             observed_text(slo.value, slo.ci_low, slo.ci_high, fmt)))
    return cells


def step_rows(document: CapacityDocument, report_prefix: str) -> list[StepRow]:
    names = slo_names(document.steps)
    return [StepRow(
        index=str(index), trial=str(step.trial), load=_number(step.load),
        achieved="n/a" if step.achieved is None else f"{step.achieved:.4g}",
        window=window_text(step), outcome=step.outcome,
        outcome_class=OUTCOME_CLASSES.get(step.outcome, "invalid"),
        slos=slo_cells(step, names),
        stability="stable" if step.stability.stable else redact_text(
            step.stability.reason or "unstable"),
        stability_class="" if step.stability.stable else "warning",
        goodput=rate_text(step.goodput_per_s, "req/s"),
        problems=redact_text("; ".join(step.invalid_reasons)),
        report=f"{report_prefix}{step.run_dir}/{REPORT_FILE}")
        for index, step in enumerate(document.steps, start=1)]


def slo_names(steps: Sequence[CapacityStep]) -> list[str]:
    """Every SLO the steps judged, in their order."""
    names: list[str] = []
    for step in steps:
        names.extend(s.slo for s in step.slos if s.slo not in names)
    return names


# --------------------------------------------------------------------------------------------
# figures


def x_range(document: CapacityDocument) -> tuple[float, float]:
    """The load axis: every step's load, what it achieved and the capacity's ends, padded."""
    capacity = document.capacity
    values = [s.load for s in document.steps]
    values += [s.achieved for s in document.steps if s.achieved is not None]
    values += [v for v in (capacity.value, capacity.low, capacity.high) if v is not None]
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return (0.0, 1.0)
    low, high = min(values), max(values)
    pad = 0.06 * (high - low) if high > low else 0.1 * abs(high) or 1.0
    return (max(0.0, low - pad) if low >= 0 else low - pad, high + pad)


def _trials(steps: Sequence[CapacityStep]) -> list[int]:
    return sorted({s.trial for s in steps})


def _by_trial(steps: Sequence[CapacityStep]) -> list[tuple[int, str, list[CapacityStep]]]:
    """(trial, legend suffix, its steps); no suffix with one trial."""
    trials = _trials(steps)
    return [(trial, "" if len(trials) == 1 else f" · trial {trial}",
             [s for s in steps if s.trial == trial]) for trial in trials]


def _symbol(trial: int) -> str:
    return TRIAL_SYMBOLS[(trial - 1) % len(TRIAL_SYMBOLS)]


def _hover(step: CapacityStep, unit: str) -> str:
    again = f", attempt {step.attempt} (window ×{2 ** step.attempt})" if step.attempt else ""
    return plot_text(f"{step.load:.4g} {unit}{again}: {step.outcome}")


def _scaled(value: float | None, scale: float) -> float | None:
    return None if value is None or not math.isfinite(value) else value * scale


def _error_bars(points: Sequence[tuple[float | None, float | None, float | None]],
                scale: float) -> dict[str, object]:
    """Asymmetric error bars from (value, low, high); an open side draws none."""
    plus = [None if v is None or h is None else (h - v) * scale for v, _, h in points]
    minus = [None if v is None or lo is None else (v - lo) * scale for v, lo, _ in points]
    return {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus,
            "thickness": 1.5, "width": 4}


def mark_capacity(traces: list[Spec], layout: Spec, grid: Grid, estimate: CapacityEstimate,
                  unit: str, span: tuple[float, float]) -> None:
    """The capacity as a vertical line and its interval as a band in every panel; an open
    end is shaded to the axis's edge. Shapes have no legend entries: two legend-only traces
    name them."""
    low = span[0] if estimate.low is None else estimate.low
    high = span[1] if estimate.high is None else estimate.high
    share = f"{estimate.confidence:.0%}"
    cells = [(row, col) for row in range(1, grid.rows + 1) for col in range(1, grid.cols + 1)]
    shapes = layout.setdefault("shapes", [])
    if estimate.low is not None or estimate.high is not None:
        for row, col in cells:
            band, _ = vrect(low, high, grid.x(row, col), grid.y(row, col), BAND_COLOUR,
                            BAND_OPACITY)
            shapes.append({**band, "layer": "below"})
        opens = [side for side, bound in (("below", estimate.low), ("above", estimate.high))
                 if bound is None]
        note = f"; open {' and '.join(opens)}: shaded to the edge" if opens else ""
        traces.append({
            "type": "scatter", "x": [None], "y": [None], "mode": "markers",
            "hoverinfo": "skip",
            "name": f"capacity interval {interval_text(estimate.low, estimate.high)} "
                    f"({share}){note}",
            "marker": {"symbol": "square", "size": 14, "color": BAND_COLOUR, "opacity": 0.4}})
    if estimate.value is not None:
        line = {"color": CAPACITY_COLOUR, "width": 2, "dash": "dash"}
        shapes.extend(vline(estimate.value, grid.x(row, col), grid.y(row, col), line)
                      for row, col in cells)
        traces.append({"type": "scatter", "x": [None], "y": [None], "mode": "lines",
                       "hoverinfo": "skip", "name": f"capacity {estimate.value:.4g} "
                                                    f"{plot_text(unit)}", "line": line})


def _grid(titles: Sequence[str]) -> tuple[Grid, list[tuple[int, int]]]:
    cols = 1 if len(titles) == 1 else 2
    rows = math.ceil(len(titles) / cols)
    grid = Grid(rows=rows, cols=cols, titles=tuple(titles),
                vertical_spacing=0.3 / rows if rows > 1 else 0.1, horizontal_spacing=0.1)
    return grid, [(i // cols + 1, i % cols + 1) for i in range(len(titles))]


def _finish(traces: list[Spec], layout: Spec, grid: Grid, title: str,
            document: CapacityDocument, span: tuple[float, float]) -> str:
    for row in range(1, grid.rows + 1):
        for col in range(1, grid.cols + 1):
            set_axis(layout, grid.x(row, col), title=f"load ({plot_text(document.unit)})",
                     range=list(span))
    mark_capacity(traces, layout, grid, document.capacity, document.unit, span)
    layout.update(title={"text": title}, height=360 * grid.rows + 170,
                  margin={**_LAYOUT["margin"], "t": 90},
                  legend={"orientation": "h", "y": -0.12, "yanchor": "top"})
    return spec_json(figure(traces, layout, grid))


def _metric_axis(metric: str) -> tuple[float, str, str]:
    """(scale, axis unit, panel title) of a metric's panel: latencies in ms."""
    known = METRICS.get(metric)
    if known is None:
        return 1.0, "", metric
    if known.kind is MetricKind.LATENCY:
        return 1e3, "ms", f"{known.title} (ms)"
    if known.kind is MetricKind.FRACTION:
        return 100.0, "%", f"{known.title} (%)"
    return 1.0, known.unit, f"{known.title} ({known.unit})" if known.unit else known.title


def latency_metrics(document: CapacityDocument) -> list[str]:
    """The panels of the latency figure: TTFT and E2E where the steps hold percentiles, then
    every other metric an SLO names, in order."""
    metrics = [m for m in SERIES_METRICS if any(
        v is not None for s in document.steps for v in getattr(s, f"{m}_s").values())]
    for name in slo_names(document.steps):
        metric = slo_metric(name)
        if metric not in metrics:
            metrics.append(metric)
    return metrics


def latency_figure(document: CapacityDocument) -> str | None:
    """Each SLO's statistic with its interval against load, its threshold a horizontal line;
    beside them the TTFT and E2E p50 / p90 / p99 point values."""
    metrics = latency_metrics(document)
    if not metrics:
        return None
    span = x_range(document)
    grid, cells = _grid([_metric_axis(m)[2] for m in metrics])
    traces: list[Spec] = []
    layout: Spec = {}
    unit = document.unit
    names = slo_names(document.steps)
    for metric, (row, col) in zip(metrics, cells, strict=True):
        scale, axis_unit, _ = _metric_axis(metric)
        if metric in SERIES_METRICS:
            for key in PERCENTILES:
                for trial, suffix, steps in _by_trial(document.steps):
                    values = [getattr(s, f"{metric}_s").get(key) for s in steps]
                    if all(v is None for v in values):
                        continue
                    traces.append(scatter(
                        [s.load for s in steps], [_scaled(v, scale) for v in values], grid,
                        row, col, mode="markers", name=f"{metric.upper()} {key}{suffix}",
                        legendgroup=f"{metric}-{key}", text=[_hover(s, unit) for s in steps],
                        marker={"symbol": _symbol(trial), "size": 7, "opacity": 0.8,
                                "color": PERCENTILE_COLOURS[key]}))
        for number, name in enumerate(names):
            if slo_metric(name) != metric:
                continue
            line_colour = SLO_COLOURS[number % len(SLO_COLOURS)]
            label = plot_text(name)
            for trial, suffix, steps in _by_trial(document.steps):
                rows: list[tuple[CapacityStep, StepSlo]] = [
                    (s, slo) for s in steps for slo in s.slos if slo.slo == name]
                if not rows:
                    continue
                traces.append(scatter(
                    [s.load for s, _ in rows], [_scaled(slo.value, scale) for _, slo in rows],
                    grid, row, col,
                    error_y=_error_bars([(slo.value, slo.ci_low, slo.ci_high)
                                         for _, slo in rows], scale),
                    mode="markers", name=f"{label}: statistic [{document.capacity.confidence:.0%}"
                                         f" CI]{suffix}",
                    legendgroup=f"slo-{number}",
                    text=[f"{_hover(s, unit)} · {slo.verdict.value}" for s, slo in rows],
                    marker={"symbol": _symbol(trial), "size": 10, "color": line_colour,
                            "line": {"width": 1, "color": "#ffffff"}}))
            threshold = next((slo.threshold for s in document.steps for slo in s.slos
                              if slo.slo == name and math.isfinite(slo.threshold)), None)
            if threshold is not None:
                traces.append(scatter(
                    list(span), [threshold * scale] * 2, grid, row, col, mode="lines",
                    name=f"threshold: {label}", legendgroup=f"slo-{number}",
                    hoverinfo="name+y",
                    line={"color": line_colour, "dash": "dot", "width": 2}))
        set_axis(layout, grid.y(row, col), title=axis_unit, rangemode="tozero")
    return _finish(traces, layout, grid, "Latency against load (SLO statistics with their "
                                         "intervals, thresholds dotted)", document, span)


def _interval_points(traces: list[Spec], grid: Grid, document: CapacityDocument,
                     get: Callable[[CapacityStep], Interval], name: str, number: int,
                     row: int, col: int) -> None:
    for trial, suffix, steps in _by_trial(document.steps):
        intervals = [get(s) for s in steps]
        traces.append(scatter(
            [s.load for s in steps], [_scaled(i.value, 1.0) for i in intervals], grid, row, col,
            error_y=_error_bars([(i.value, i.ci_low, i.ci_high) for i in intervals], 1.0),
            mode="markers", name=f"{name}{suffix}", legendgroup=name,
            text=[_hover(s, document.unit) for s in steps],
            marker={"symbol": _symbol(trial), "size": 9, "color": colour(number)}))


def throughput_figure(document: CapacityDocument) -> str:
    """Output tokens/s and goodput (requests/s meeting every per-request SLO) against load,
    each with its interval; goodput beside the offered rate where the load is a rate."""
    span = x_range(document)
    grid, cells = _grid(["Output throughput (tok/s)", "Goodput (req/s)"])
    traces: list[Spec] = []
    layout: Spec = {}
    _interval_points(traces, grid, document, lambda s: s.output_tokens_per_s, "output tok/s",
                     0, *cells[0])
    _interval_points(traces, grid, document, lambda s: s.goodput_per_s, "goodput req/s", 2,
                     *cells[1])
    if document.unit == "req/s":
        traces.append(scatter(list(span), list(span), grid, *cells[1], mode="lines",
                              name="goodput = offered rate", hoverinfo="skip",
                              line={"color": "#8a8f98", "dash": "dot", "width": 1}))
    for (row, col), unit in zip(cells, ("tok/s", "req/s"), strict=True):
        set_axis(layout, grid.y(row, col), title=unit, rangemode="tozero")
    return _finish(traces, layout, grid, "Throughput and goodput against load (with their "
                                         "intervals)", document, span)


SERVER_SERIES = (("kv_cache_usage_mean", "KV-cache usage, mean over the window (%)", 100.0,
                  "%", "KV-cache %"),
                 ("waiting_mean", "Waiting requests, mean over the window", 1.0, "requests",
                  "waiting"))


def server_figure(document: CapacityDocument) -> str | None:
    """vLLM's KV-cache usage and waiting requests (means over each step's window) against
    load; a series no step has is left out, and the figure when neither is there."""
    present = [series for series in SERVER_SERIES
               if any(getattr(s, series[0]) is not None for s in document.steps)]
    if not present:
        return None
    span = x_range(document)
    grid, cells = _grid([series[1] for series in present])
    traces: list[Spec] = []
    layout: Spec = {}
    for number, ((field, _, scale, unit, name), (row, col)) in enumerate(
            zip(present, cells, strict=True)):
        for trial, suffix, steps in _by_trial(document.steps):
            traces.append(scatter(
                [s.load for s in steps], [_scaled(getattr(s, field), scale) for s in steps],
                grid, row, col, mode="markers", name=f"{name}{suffix}", legendgroup=name,
                text=[_hover(s, document.unit) for s in steps],
                marker={"symbol": _symbol(trial), "size": 9, "color": colour(3 + number)}))
        y_axis: Spec = {"title": unit, "rangemode": "tozero"}
        if unit == "%":
            y_axis["range"] = [0, 101]
        set_axis(layout, grid.y(row, col), **y_axis)
    return _finish(traces, layout, grid, "vLLM's queue against load (/metrics, means over each "
                                         "step's window)", document, span)


def search_figures(document: CapacityDocument, number: int
                   ) -> tuple[list[FigureView], list[str]]:
    figures, notes = [], []
    latency = latency_figure(document)
    if latency is None:
        notes.append("No latency figure: no step holds a latency value or an SLO.")
    else:
        figures.append(FigureView(f"fig-latency-{number}", "Latency against load", latency))
    figures.append(FigureView(f"fig-throughput-{number}", "Throughput and goodput against load",
                              throughput_figure(document)))
    server = server_figure(document)
    missing = [title for field, title, *_ in SERVER_SERIES
               if all(getattr(s, field) is None for s in document.steps)]
    if server is None:
        notes.append("No KV-cache or waiting-request figure: no step's server exported "
                     "either gauge (server_metrics.jsonl missing or without them).")
    else:
        figures.append(FigureView(f"fig-server-{number}", "vLLM's queue against load", server))
        notes.extend(f"Left out, no step has it: {title}." for title in missing)
    return figures, notes


# --------------------------------------------------------------------------------------------
# the page


def search_view(name: str, document: CapacityDocument, number: int) -> SearchView:
    capacity = document.capacity
    code = document.exit_code
    verdict = outcome(code)
    facts = [("load searched", f"{document.load} ({document.unit})"),
             ("tolerance", f"{document.tolerance:.1%} (the bracket's high / low − 1)")]
    if document.require is not None:
        facts.append(("require", f">= {document.require:g} {document.unit}"))
    facts += [("steps", f"{len(document.steps)} in {document.elapsed_s / 60:.1f} min"),
              ("started (UTC)", document.started_utc)]
    trial_rows = [TrialRow(str(t.trial), "not bracketed" if t.value is None else
                           f"{t.value:.4g} {document.unit}", interval_text(t.low, t.high),
                           t.limiting_slo or "—", t.status.value, redact_text(t.reason))
                  for t in document.trials] if len(document.trials) > 1 else []
    figures, notes = search_figures(document, number)
    prefix = f"{VARIANTS_DIR}/{name}/" if name else ""
    return SearchView(
        anchor=f"search-{number}", name=name or document.scenario_name, outcome=verdict,
        outcome_class=verdict.lower(), capacity=capacity_text(capacity, document.unit),
        interval=f"{interval_text(capacity.low, capacity.high)} {document.unit}",
        confidence=f"{capacity.confidence:.0%}",
        limiting_slo=document.limiting_slo or "— (none: the queue's growth, or unknown)",
        status=document.status.value, reason=redact_text(document.reason),
        exit_code=_exit_code_text(code), facts=facts,
        band_note=band_note(capacity, document.unit), trial_rows=trial_rows,
        slo_names=slo_names(document.steps), step_rows=step_rows(document, prefix),
        figures=figures, figure_notes=notes)


def ratio_rows(ratios: Mapping[str, CapacityRatio]) -> list[RatioRow]:
    return [RatioRow(name, "n/a" if r.value is None else f"{r.value:.3f}×",
                     interval_text(r.low, r.high), f"{r.confidence:.0%}", r.change.value,
                     CHANGE_CLASSES[r.change]) for name, r in ratios.items()]


def _severity(code: int) -> int:
    try:
        return SEVERITY.get(ExitCode(code), 3)
    except ValueError:
        return 3


def build_capacity_view(documents: Mapping[str, CapacityDocument],
                        ratios: Mapping[str, CapacityRatio],
                        race: RaceResult | None = None) -> CapacityView:
    first = next(iter(documents.values()))
    code = (race.exit_code if race is not None
            else max((d.exit_code for d in documents.values()), key=_severity))
    verdict = outcome(code)
    searches = [search_view(name, doc, number)
                for number, (name, doc) in enumerate(documents.items(), start=1)]
    if len(searches) == 1:
        only = searches[0]
        headline = (f"capacity {only.capacity} {only.interval} ({only.confidence})"
                    f" · {only.status}")
    elif race is not None:
        best = race.best_entry
        headline = (f"{len(searches)} candidates · best {best.name}: "
                    f"{_number(best.value)} {race.unit}" if best else
                    f"{len(searches)} candidates · no capacity known")
    else:
        headline = f"{len(searches)} variants · against {next(iter(documents))}"
    scenario = redact_secrets(dict(first.scenario))
    return CapacityView(
        title=f"Capacity: {first.scenario_name}", started=first.started_utc,
        description=redact_text(str(scenario.get("description") or "")),
        outcome=verdict, outcome_class=verdict.lower(), headline=headline, searches=searches,
        baseline=next(iter(documents)) if ratios else "", ratio_rows=ratio_rows(ratios),
        race_lines=[redact_text(line) for line in render_race_lines(race)] if race else [],
        scenario_yaml=yaml.safe_dump(scenario, sort_keys=False, allow_unicode=True),
        plotly_js=plotly_js())


def render_capacity_html(documents: Mapping[str, CapacityDocument],
                         ratios: Mapping[str, CapacityRatio],
                         race: RaceResult | None = None) -> str:
    return render_template("capacity.html.j2", build_capacity_view(documents, ratios, race))
