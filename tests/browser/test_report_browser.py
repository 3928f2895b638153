"""The reports in a real browser: headless Debian Chromium opens report.html (a run's, an
experiment's, a comparison's) from file://, with no network. Asserts no console errors, every
plot rendered (a Plotly SVG with non-zero size and drawn traces), the verdict table first,
nothing injected executes, and saves a full-page PNG screenshot into the run folder
(report.png, path printed) as a CI artefact.

Chromium: /usr/bin/chromium + /usr/bin/chromedriver (Debian `chromium`, `chromium-driver`;
`.ci/run` installs them), or CHROMIUM_BIN / CHROMEDRIVER_BIN. Without them the tests skip,
unless VLLM_SLO_REQUIRE_BROWSER is set (CI), where they fail. The synthetic run folders are
written under VLLM_SLO_ARTIFACTS_DIR (default: runs/browser/ in the repository, git-ignored).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.support import synthetic as synthesis
from vllm_slo.reports.run_report import RenderedRun, render_run

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CHROMIUM_BIN") or "/usr/bin/chromium"
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_BIN") or "/usr/bin/chromedriver"
SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'
# Recorded before any page script runs: a call means injected code executed.
TRAP = """
window.__calls = [];
window.__xss = undefined;
['alert', 'confirm', 'prompt'].forEach(function (name) {
  window[name] = function (message) { window.__calls.push(name + ':' + String(message)); };
});
"""


# Planted where an experiment lets free text in (variant and scenario names are restricted to
# [A-Za-z0-9_.-] by the scenario model, so not there): description, server args, provenance,
# failure texts; and in run folder names, which reach a comparison's labels and plots.
XSS = ("<script>window.__xss = 1; alert(1)</script>"
       " \"><img src=x onerror=\"window.__xss = 2; alert(2)\">"
       " '><svg onload='window.__xss = 3'> </script><script>window.__xss = 4</script>")
FOLDER_XSS = "<script>window.__xss=5<script>-'\"><img src=x onerror=alert(5)>"  # no "/"


def _missing() -> list[str]:
    return [path for path in (CHROMIUM, CHROMEDRIVER)
            if not (Path(path).is_file() or shutil.which(path))]


@pytest.fixture(scope="module")
def browser():
    missing = _missing()
    if missing:
        message = (f"Chromium not installed ({', '.join(missing)} missing): apt-get install "
                   f"chromium chromium-driver, or set CHROMIUM_BIN / CHROMEDRIVER_BIN")
        if os.environ.get("VLLM_SLO_REQUIRE_BROWSER"):
            pytest.fail(f"VLLM_SLO_REQUIRE_BROWSER is set but {message}")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which(CHROMIUM) or CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1400,1000",
                     "--allow-file-access-from-files"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    options.set_capability("unhandledPromptBehavior", "ignore")
    driver = webdriver.Chrome(service=Service(shutil.which(CHROMEDRIVER) or CHROMEDRIVER),
                              options=options)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": TRAP})
    driver.set_page_load_timeout(120)
    yield driver
    driver.quit()


def artefacts_dir() -> Path:
    root = Path(os.environ.get("VLLM_SLO_ARTIFACTS_DIR") or REPO / "runs" / "browser")
    root.mkdir(parents=True, exist_ok=True)
    return root


def synthetic_run(name: str, *, description: str = "", error_texts=None) -> RenderedRun:
    kwargs = {} if error_texts is None else {"error_texts": error_texts}
    table = synthesis.synthetic_table(3000, chunks=16, warmup_s=5.0, duration_s=40.0,
                                      failure_fraction=0.02, seed=11, **kwargs)
    scenario = synthesis.scenario_document("browser", duration_s=40.0, warmup_s=5.0,
                                           description=description)
    run_dir = artefacts_dir() / name  # fixed name: each session replaces its predecessor
    if run_dir.exists():
        shutil.rmtree(run_dir)
    synthesis.write_run_folder(run_dir, table, scenario,
                               server_records=synthesis.synthetic_server_records(45.0))
    return render_run(run_dir)


def open_report(driver, report_path: Path) -> None:
    driver.get(report_path.resolve().as_uri())
    deadline = time.monotonic() + 60
    script = ("return Array.from(document.querySelectorAll('[data-plot]'))"
              ".every(function (e) { return e.querySelector('.main-svg') !== null; });")
    while not driver.execute_script(script):
        assert time.monotonic() < deadline, "plots did not render within 60 s"
        time.sleep(0.2)


def severe_console_entries(driver) -> list[dict]:
    return [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def plot_facts(driver) -> list[dict]:
    return driver.execute_script("""
        return Array.from(document.querySelectorAll('[data-plot]')).map(function (e) {
          var svg = e.querySelector('.main-svg'), box = svg ? svg.getBoundingClientRect() : null;
          return {id: e.id, title: e.dataset.plot, width: box ? box.width : 0,
                  height: box ? box.height : 0,
                  traces: e.querySelectorAll('.scatterlayer .trace, .barlayer .trace').length,
                  drawn: e.querySelectorAll('.scatterlayer path.js-line, .scatterlayer path.point,'
                                            + ' .barlayer path').length};
        });""")


def save_screenshot(driver, report_path: Path) -> Path:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1400, min(int(height) + 40, 16000))
    path = report_path.parent / "report.png"
    assert driver.save_screenshot(str(path)), "screenshot failed"
    driver.set_window_size(1400, 1000)
    print(f"\nscreenshot: {path}")
    return path


def test_report_renders_in_chromium(browser) -> None:
    rendered = synthetic_run("browser-synthetic")
    open_report(browser, rendered.report_path)
    assert severe_console_entries(browser) == []
    facts = plot_facts(browser)
    assert [f["id"] for f in facts] == ["fig-ecdf", "fig-timeline", "fig-throughput",
                                        "fig-server", "fig-health"]
    for fact in facts:
        assert fact["width"] > 300 and fact["height"] > 300, fact
        assert fact["traces"] > 0 and fact["drawn"] > 0, fact
    # the verdict table comes first, one row per SLO with its verdict
    first_section = browser.execute_script(
        "return document.querySelector('main section').id")
    assert first_section == "verdicts"
    cells = browser.execute_script("""
        return Array.from(document.querySelectorAll('#verdict-table tr')).slice(1)
          .map(function (r) { return r.cells[0].innerText.trim(); });""")
    assert cells == [s["verdict"] for s in rendered.summary["slos"]]
    assert browser.execute_script("return window.__calls") == []
    screenshot = save_screenshot(browser, rendered.report_path)
    assert screenshot.stat().st_size > 50_000
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_injected_markup_is_shown_as_text_and_never_runs(browser) -> None:
    rendered = synthetic_run(f"browser-xss-{IMG}", description=f"{SCRIPT} {IMG}",
                             error_texts=(f"{SCRIPT}: boom", f"HTTP 500: {IMG}"))
    open_report(browser, rendered.report_path)
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        _ = browser.switch_to.alert.text  # no native dialog open either
    assert browser.execute_script("return window.__calls") == []  # no alert/confirm/prompt
    assert severe_console_entries(browser) == []  # an injected <img src=x> would 404 here
    assert browser.execute_script("return document.images.length") == 0
    scripts = browser.execute_script(
        "return Array.from(document.scripts).filter(function (s) {"
        "  return s.type !== 'application/json' && s.text.indexOf('alert(1)') >= 0; }).length")
    assert scripts == 0
    text = browser.execute_script("return document.body.innerText")
    assert f"{SCRIPT} {IMG}" in text  # the description, literally
    assert f"{SCRIPT}: boom" in text and f"HTTP 500: {IMG}" in text  # error examples
    assert IMG in browser.title  # the run folder's name
    save_screenshot(browser, rendered.report_path)


def assert_nothing_injected_ran(driver) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        _ = driver.switch_to.alert.text  # no native dialog open
    assert driver.execute_script("return window.__calls") == []  # no alert/confirm/prompt
    assert driver.execute_script("return window.__xss") is None  # no planted code ran
    assert severe_console_entries(driver) == []  # an injected <img src=x> would 404 here
    assert driver.execute_script("return document.images.length") == 0
    assert driver.execute_script("return document.querySelectorAll('svg [onload]').length") == 0
    inline = driver.execute_script(
        "return Array.from(document.scripts).filter(function (s) {"
        "  return s.type !== 'application/json' && s.text.indexOf('__xss') >= 0; }).length")
    assert inline == 0


def assert_plots_drawn(driver, ids: list[str]) -> None:
    facts = plot_facts(driver)
    assert [f["id"] for f in facts] == ids
    for fact in facts:
        assert fact["width"] > 300 and fact["height"] > 300, fact
        assert fact["traces"] > 0 and fact["drawn"] > 0, fact


def fresh(name: str) -> Path:
    root = artefacts_dir() / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return root


def test_experiment_report_renders_in_chromium(browser) -> None:
    from tests.support.synthetic import write_synthetic_experiment
    from vllm_slo.reports.experiment_report import render_experiment

    root = artefacts_dir() / "browser-experiment"
    shutil.rmtree(root, ignore_errors=True)
    write_synthetic_experiment(root, {"baseline": 0.05, "candidate": 0.08}, trials=4,
                               noise=0.05)
    rendered = render_experiment(root)
    open_report(browser, rendered.report_path)
    assert severe_console_entries(browser) == []
    facts = plot_facts(browser)
    assert [f["id"] for f in facts] == ["fig-trials", "fig-ecdf"]
    for fact in facts:
        assert fact["width"] > 300 and fact["height"] > 300, fact
        assert fact["traces"] > 0 and fact["drawn"] > 0, fact
    comparison = browser.execute_script(
        "return document.querySelector('#comparison pre').innerText")
    assert "ttft.p50" in comparison and "vs baseline" in comparison
    links = browser.execute_script(
        "return Array.from(document.querySelectorAll('#trials a')).map(a => a.href)")
    assert len(links) == 8 and all(link.endswith("/report.html") for link in links)
    assert save_screenshot(browser, rendered.report_path).stat().st_size > 50_000


def test_injected_markup_on_the_experiment_page_never_runs(browser) -> None:
    from vllm_slo.reports.experiment_report import render_experiment

    root = fresh("browser-experiment-xss")
    run = synthesis.write_hostile_experiment(root / f"exp-{FOLDER_XSS}", XSS)
    rendered = render_experiment(run)
    open_report(browser, rendered.report_path)
    assert_nothing_injected_ran(browser)
    assert_plots_drawn(browser, ["fig-trials", "fig-ecdf"])
    text = browser.execute_script("return document.body.innerText")
    assert f"described as {XSS}" in text  # the description, literally
    assert f"served-model-name=a {XSS}" in text  # a variant's server args
    scenario = browser.execute_script("return document.querySelector('#scenario').innerText")
    assert "<script>window.__xss = 1; alert(1)</script>" in scenario  # the YAML, as text
    assert f"server failed during the run: engine died: {XSS}" in text  # the invalid trial
    differences = browser.execute_script(
        "return document.querySelector('#provenance-differences').textContent")
    assert "vllm_version" in differences and "window.__xss = 1" in differences
    assert FOLDER_XSS in browser.title  # the run id
    save_screenshot(browser, rendered.report_path)


def test_injected_markup_on_the_comparison_page_never_runs(browser) -> None:
    from vllm_slo.saved_runs import compare_saved_runs

    root = fresh("browser-compare-xss")
    first = synthesis.write_hostile_experiment(root / f"base-{FOLDER_XSS}", XSS, variants=["a"],
                                               trials=3)
    second = synthesis.write_hostile_experiment(root / "cand-'\"><b>bold", XSS,
                                                variants=["a"], trials=3, seed=1)
    result = compare_saved_runs([first, second], None, 0.05, root / "cmp")
    assert result.report_path is not None
    open_report(browser, result.report_path)
    assert_nothing_injected_ran(browser)
    assert browser.execute_script("return document.querySelectorAll('main b').length") == 0
    assert_plots_drawn(browser, ["fig-trials", "fig-ecdf"])
    text = browser.execute_script("return document.body.innerText")
    labels = [f"base-{FOLDER_XSS}", "cand-'\"><b>bold"]
    for label in labels:
        assert label in text  # variant table, trial rows
    benchstat = browser.execute_script(
        "return document.querySelector('#comparison pre').innerText")
    assert labels[0] in benchstat and f"vs {labels[0]}" in benchstat
    assert f"described as {XSS}" in text  # the baseline's scenario
    scenario = browser.execute_script("return document.querySelector('#scenario').innerText")
    assert "<script>window.__xss = 1; alert(1)</script>" in scenario
    # the labels reach Plotly's legend as text, not markup
    legend = browser.execute_script(
        "return document.querySelector('#fig-ecdf .legend').textContent")
    assert labels[0] in legend and labels[1] in legend
    links = browser.execute_script(
        "return Array.from(document.querySelectorAll('#trials a')).map(a => a.href)")
    assert len(links) == 6 and all(link.startswith("file:///") for link in links)
    save_screenshot(browser, result.report_path)


def test_tune_report_renders_in_chromium(browser) -> None:
    """tune.html from made-up candidate results: the Pareto plot drawn, one ranking row per
    candidate, the recommended command shown with its gain over the scenario's own args (c01,
    as given: tune.baseline), and untrusted text (a scenario description, a server's
    start-failure log) shown as text, never run."""
    from vllm_slo.analysis.tune_summary import TuneResult
    from vllm_slo.analysis.tuning import CandidateResult
    from vllm_slo.reports.tune_report import write_tune
    from vllm_slo.scenarios.model import Scenario

    def candidate(name: str, seqs: int, goodput: tuple[float, ...], *,
                  failures: tuple[str, ...] = (), given: bool = False) -> CandidateResult:
        args = {"max-num-seqs": seqs}
        return CandidateResult(
            name=name, origin="as given" if given else "grid", changed={} if given else args,
            args=args, objective_values=() if failures else goodput, start_failures=failures,
            slo_verdict="none" if failures else "PASS", preemptions=0.0,
            throughput_values=tuple(100 * g for g in goodput) if not failures else (),
            latency_values=tuple(1 / g for g in goodput) if not failures else ())

    scenario = Scenario.model_validate({
        "name": "browser-tune", "description": XSS, "slo": {"ttft": ["p90 < 1s"]},
        "server": {"args": {"max-num-seqs": 2}},
        "tune": {"grid": {"max-num-seqs": [8, 32, 64]}, "trials": 4, "baseline": True}})
    candidates = [candidate("c01", 2, (2.0, 2.1, 1.9, 2.2), given=True),
                  candidate("c02", 8, (6.0, 6.2, 5.8, 6.1)),
                  candidate("c03", 32, (7.0, 6.6, 7.2, 6.9)),
                  candidate("c04", 64, (), failures=(f"CUDA out of memory {XSS}",))]
    run_dir = artefacts_dir() / "browser-tune"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir()
    rendered = write_tune(run_dir, TuneResult(scenario, "browser-tune", 4, candidates, [],
                                              "ttft.p90", "output_throughput.mean", False,
                                              "/models/tiny"))
    open_report(browser, rendered.report_path)
    assert_nothing_injected_ran(browser)
    (fact,) = plot_facts(browser)
    assert fact["id"] == "fig-pareto" and fact["width"] > 300 and fact["drawn"] > 0, fact
    names = browser.execute_script("""
        return Array.from(document.querySelectorAll('#ranking-table tr')).slice(1)
          .map(function (r) { return r.cells[1].innerText.trim(); });""")
    assert names == ["c03", "c02", "c01", "c04"]
    text = browser.execute_script("return document.body.innerText")
    assert "vllm serve /models/tiny --max-num-seqs 32" in text
    assert XSS.split(" ")[0] in text  # the description, literally
    gain = browser.find_element("id", "gain").text
    assert gain.startswith("Gain over the scenario's own args: c03 over c01 (as given): ×3."), gain
    save_screenshot(browser, rendered.report_path)
