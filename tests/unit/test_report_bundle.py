"""Every page inlines plotly.js's basic partial bundle (vendored; opens offline) and draws
only trace types that bundle registers; a small run's page stays under 1.5 MB."""

from __future__ import annotations

import json
import re
from pathlib import Path

from plotly.offline import get_plotlyjs_version

from tests.support.synthetic import build_big_run, write_synthetic_experiment
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.reports.render.plotly_bundle import (
    BUNDLE_PATH,
    BUNDLE_TRACE_TYPES,
    PLOTLY_JS_VERSION,
    plotly_js,
)
from vllm_slo.reports.run_report import render_run

_SPEC = re.compile(r'<script type="application/json" id="([^"]+)-spec">(.*?)</script>', re.S)
SMALL_REPORT_LIMIT = 1_500_000


def trace_types(page: str) -> dict[str, set[str]]:
    """Figure id -> the trace types its spec draws."""
    return {match.group(1): {trace.get("type", "scatter")
                             for trace in json.loads(match.group(2))["data"]}
            for match in _SPEC.finditer(page)}


def test_the_bundle_is_the_basic_partial_one_of_plotly_pys_version() -> None:
    text = plotly_js()
    assert text.startswith(f"/**\n* plotly.js (basic - minified) v{PLOTLY_JS_VERSION}\n")
    assert 1_000_000 < BUNDLE_PATH.stat().st_size < 1_400_000
    # plotly.py writes the figure JSON for the plotly.js it bundles: keep the two in step
    assert get_plotlyjs_version() == PLOTLY_JS_VERSION
    assert (BUNDLE_PATH.parent / "LICENSE-plotly.js").read_text().startswith("MIT License")


def test_a_small_runs_report_inlines_the_bundle_and_stays_light(tmp_path: Path) -> None:
    run = build_big_run(tmp_path / "20270115T120000Z-small", 300, 64)
    render_run(run)
    page = (run / "report.html").read_text(encoding="utf-8")
    assert page.count(plotly_js()) == 1
    assert "<script src" not in page  # nothing is fetched: the page opens offline
    assert (run / "report.html").stat().st_size < SMALL_REPORT_LIMIT
    types = trace_types(page)
    assert {"fig-ecdf", "fig-timeline", "fig-throughput", "fig-server", "fig-health"} <= set(types)
    for figure, used in types.items():
        assert used <= BUNDLE_TRACE_TYPES, (figure, used)


def test_the_experiment_page_uses_the_same_bundle(tmp_path: Path) -> None:
    run = write_synthetic_experiment(tmp_path / "exp", {"a": 0.05, "b": 0.06}, trials=2,
                                     noise=0.05)
    render_experiment(run)
    page = (run / "report.html").read_text(encoding="utf-8")
    assert page.count(plotly_js()) == 1
    types = trace_types(page)
    assert types
    for figure, used in types.items():
        assert used <= BUNDLE_TRACE_TYPES, (figure, used)
