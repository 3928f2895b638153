"""A capacity folder's report.html in a real browser: headless Debian Chromium opens it from
file://, with no network. Asserts no console errors, every figure drew (a Plotly SVG with
non-zero size and drawn traces), nothing injected executes, and saves a full-page PNG
screenshot beside the report (report.png in the test's tmp folder, path printed).

The browser, its skip logic (no Chromium: skip, unless VLLM_SLO_REQUIRE_BROWSER is set) and
the page checks are tests/browser/test_report_browser.py's; the capacity documents are
tests/unit/test_capacity_report.py's realistic search.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.browser.test_report_browser import (
    XSS,
    assert_nothing_injected_ran,
    browser,  # noqa: F401 (the Chromium fixture)
    open_report,
    plot_facts,
    save_screenshot,
    severe_console_entries,
)
from tests.unit.test_capacity_report import (
    above_range_document,
    search_document,
    two_trial_document,
    write_variants,
)
from vllm_slo.analysis.capacity import CapacityDocument
from vllm_slo.reports.capacity_report import RenderedCapacity, render_capacity, write_capacity

pytestmark = pytest.mark.browser


def render(folder: Path, document: CapacityDocument) -> RenderedCapacity:
    folder.mkdir(parents=True)
    write_capacity(folder, document)
    return render_capacity(folder)


def assert_figures_drew(driver, ids: list[str]) -> None:
    facts = plot_facts(driver)
    assert [f["id"] for f in facts] == ids
    for fact in facts:
        assert fact["width"] > 300 and fact["height"] > 300, fact
        assert fact["traces"] > 0 and fact["drawn"] > 0, fact


def test_capacity_report_renders_in_chromium(browser, tmp_path: Path) -> None:  # noqa: F811
    rendered = render(tmp_path / "capacity", two_trial_document())
    open_report(browser, rendered.report_path)
    assert severe_console_entries(browser) == []
    assert_figures_drew(browser, ["fig-latency-1", "fig-throughput-1", "fig-server-1"])
    # the capacity band and line are drawn in every panel (shapes layer)
    bands = browser.execute_script(
        "return document.querySelectorAll('#fig-latency-1 .shapelayer path').length")
    assert bands >= 2
    text = browser.execute_script("return document.body.innerText")
    assert "10.26 req/s" in text and "ttft p90 < 500ms" in text
    rows = browser.execute_script(
        "return document.querySelectorAll('#steps-1 tr').length")
    assert rows == 1 + len(rendered.documents[""].steps)
    assert browser.execute_script("return window.__calls") == []
    screenshot = save_screenshot(browser, rendered.report_path)
    assert screenshot.parent == tmp_path / "capacity"
    assert screenshot.stat().st_size > 50_000
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_open_interval_and_variants_render(browser, tmp_path: Path) -> None:  # noqa: F811
    rendered = render(tmp_path / "open", above_range_document())
    open_report(browser, rendered.report_path)
    assert severe_console_entries(browser) == []
    assert_figures_drew(browser, ["fig-latency-1", "fig-throughput-1", "fig-server-1"])
    folder = tmp_path / "ab"
    write_variants(folder)
    variants = render_capacity(folder)
    open_report(browser, variants.report_path)
    assert severe_console_entries(browser) == []
    assert_figures_drew(browser, [f"fig-{kind}-{n}" for n in (1, 2)
                                  for kind in ("latency", "throughput", "server")])
    save_screenshot(browser, variants.report_path)


def test_injected_markup_is_shown_as_text_and_never_runs(browser, tmp_path: Path  # noqa: F811
                                                         ) -> None:
    document = search_document(name=f"x{XSS}", description=XSS)
    step = document.steps[1]
    unstable = dataclasses.replace(step.stability, reason=XSS)
    slos = tuple(dataclasses.replace(s, slo=f"{XSS}: {s.slo}") for s in step.slos)
    steps = (document.steps[0], dataclasses.replace(step, stability=unstable, slos=slos),
             *document.steps[2:])
    rendered = render(tmp_path / "xss", dataclasses.replace(document, steps=steps,
                                                              reason=XSS))
    open_report(browser, rendered.report_path)
    assert_nothing_injected_ran(browser)
    text = browser.execute_script("return document.body.innerText")
    assert XSS in text  # description, reason, stability and SLO column, literally
    assert f"x{XSS}" in browser.title
    legend = browser.execute_script(
        "return document.querySelector('#fig-latency-1 .legend').textContent")
    assert "<script>" in legend  # the SLO's name in the legend, as text
    assert_figures_drew(browser, ["fig-latency-1", "fig-throughput-1", "fig-server-1"])
    save_screenshot(browser, rendered.report_path)
