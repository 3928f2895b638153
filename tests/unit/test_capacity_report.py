"""A capacity folder's report.html and capacity.json: a realistic search built in code (loads
4, 16, 8, 11.3, 9.5, 10.4 req/s; one step unstable, one near and run again with its window
doubled), written with `write_capacity` and rendered by `render_capacity`. capacity.json
validates against reports/schema/capacity.schema.json and reads back equal; the page holds the
capacity, the limiting SLO, every step, the three figures and the threshold, no network
script, and shows markup in names as text. Variants get a section each and a comparison.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from vllm_slo.analysis.capacity import (
    CapacityDocument,
    CapacityStep,
    Interval,
    Stability,
    StepSlo,
    TrialCapacity,
)
from vllm_slo.reports.capacity_report import render_capacity, write_capacity
from vllm_slo.reports.render.capacity_html import band_note, slo_metric
from vllm_slo.run_folder.run_files import VARIANTS_DIR
from vllm_slo.stats.capacity_search import CapacityEstimate, SearchStatus
from vllm_slo.stats.statistics import Verdict

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "reports" / "schema" / "capacity.schema.json").read_text())
TTFT_SLO = "ttft p90 < 500ms"
E2E_SLO = "e2e p99 < 10s"
LOADS = (4.0, 16.0, 8.0, 11.3, 9.5, 10.4, 10.4)


def _slo(label: str, threshold: float, value: float, spread: float) -> StepSlo:
    low, high = value * (1 - spread), value * (1 + spread)
    verdict = (Verdict.PASS if high < threshold else Verdict.FAIL if low > threshold
               else Verdict.INCONCLUSIVE)
    return StepSlo(slo=label, verdict=verdict, value=value, ci_low=low, ci_high=high,
                   threshold=threshold, upper_bound=True)


def make_step(load: float, ttft_p90: float, *, attempt: int = 0, spread: float = 0.08,
              stable: bool = True, trial: int = 1, index: int = 1,
              server: bool = True) -> CapacityStep:
    """A step whose TTFT p90 is `ttft_p90` (its interval ± `spread`), E2E p99 well inside."""
    slos = (_slo(TTFT_SLO, 0.5, ttft_p90, spread), _slo(E2E_SLO, 10.0, 2.0 + ttft_p90, 0.05))
    verdicts = {s.verdict for s in slos}
    outcome = ("over" if Verdict.FAIL in verdicts or not stable else
               "near" if Verdict.INCONCLUSIVE in verdicts else "under")
    goodput = load * (1.0 if outcome == "under" else 0.7)
    return CapacityStep(
        trial=trial, load=load, attempt=attempt, window_s=60.0 * 2 ** attempt,
        achieved=load * 0.99, outcome=outcome, slos=slos,
        stability=Stability(
            stable=stable,
            ttft_quarter_medians_s=(0.1, 0.2, 0.4, 0.9) if not stable else (0.1, 0.1, 0.1, 0.1),
            waiting_quarter_means=None if not server else (1.0, 6.0, 12.0, 20.0) if not stable
            else (0.0, 0.5, 0.2, 0.3),
            reason=None if stable else "TTFT median rose quarter after quarter, 100 ms to "
                                       "900 ms"),
        goodput_per_s=Interval(value=goodput, ci_low=goodput * 0.95, ci_high=goodput * 1.05),
        output_tokens_per_s=Interval(value=load * 180.0, ci_low=load * 175.0,
                                     ci_high=load * 185.0),
        ttft_s={"p50": ttft_p90 * 0.5, "p90": ttft_p90, "p99": ttft_p90 * 1.6},
        e2e_s={"p50": 1.5 + ttft_p90, "p90": 1.9 + ttft_p90, "p99": None},
        kv_cache_usage_mean=min(0.98, load / 16.0) if server else None,
        waiting_mean=max(0.0, load - 9.0) if server else None,
        exit_code=0 if outcome == "under" else 1 if outcome == "over" else 3,
        invalid_reasons=(),
        run_dir=f"steps/step-{index:02d}-{load:.4g}req_s" + (f"-x{2 ** attempt}" if attempt
                                                             else ""))


def search_steps(trial: int = 1, scale: float = 1.0, server: bool = True
                 ) -> tuple[CapacityStep, ...]:
    """4 under, 16 over (unstable), 8 under, 11.3 over, 9.5 under, 10.4 near, 10.4 over on
    its doubled window: the crossing between 9.5 and 10.4 (× `scale`)."""
    plan = [(4.0, 0.12, 0, True), (16.0, 2.4, 0, False), (8.0, 0.21, 0, True),
            (11.3, 0.71, 0, True), (9.5, 0.36, 0, True), (10.4, 0.49, 0, True),
            (10.4, 0.52, 1, True)]
    return tuple(make_step(load * scale, ttft, attempt=attempt, stable=stable, trial=trial,
                           index=index, spread=0.02 if attempt else 0.08, server=server)
                 for index, (load, ttft, attempt, stable) in enumerate(plan, start=1))


def scenario_echo(name: str = "chat-capacity", description: str = "") -> dict[str, object]:
    return {"name": name, "description": description,
            "traffic": {"arrival": {"rate": 4.0}, "duration": "60s"},
            "slo": {"ttft": ["p90 < 500ms"], "e2e": ["p99 < 10s"]},
            "capacity": {"load": "traffic.arrival.rate", "low": 4, "high": 16,
                         "tolerance": 0.1}}


def search_document(*, name: str = "chat-capacity", description: str = "",
                    variant: str | None = None, scale: float = 1.0,
                    steps: tuple[CapacityStep, ...] | None = None) -> CapacityDocument:
    steps = search_steps(scale=scale) if steps is None else steps
    low, high, value = 9.5 * scale, 10.4 * scale, 10.02 * scale
    trial = TrialCapacity(trial=1, value=value, low=low, high=high, limiting_slo=TTFT_SLO,
                          status=SearchStatus.BRACKETED,
                          reason=f"bracketed: [{low:.4g}, {high:.4g}] is within 10%")
    return CapacityDocument(
        scenario=scenario_echo(name, description), variant=variant,
        load="traffic.arrival.rate", unit="req/s",
        capacity=CapacityEstimate(value, low, high, 0.95, TTFT_SLO),
        limiting_slo=TTFT_SLO, status=SearchStatus.BRACKETED, reason=trial.reason,
        exit_code=0, require=None, tolerance=0.1, started_utc="2025-05-01T10:00:00Z",
        elapsed_s=1260.5, trials=(trial,), steps=steps)


def above_range_document() -> CapacityDocument:
    """Every step under capacity up to `high`: the interval is open above."""
    steps = (make_step(4.0, 0.1), make_step(16.0, 0.3, index=2))
    trial = TrialCapacity(trial=1, value=None, low=16.0, high=None, limiting_slo=None,
                          status=SearchStatus.ABOVE_RANGE,
                          reason="high (16 req/s) is still under capacity")
    return CapacityDocument(
        scenario=scenario_echo(), variant=None, load="traffic.arrival.rate", unit="req/s",
        capacity=CapacityEstimate(None, 16.0, None, 0.95, None), limiting_slo=None,
        status=SearchStatus.ABOVE_RANGE, reason=trial.reason, exit_code=3, require=None,
        tolerance=0.1, started_utc="2025-05-01T10:00:00Z", elapsed_s=130.0,
        trials=(trial,), steps=steps)


def two_trial_document() -> CapacityDocument:
    """Two searches on fresh servers (the second a little higher)."""
    first = search_document()
    steps = (*search_steps(trial=1), *search_steps(trial=2, scale=1.05))
    trials = (first.trials[0], TrialCapacity(
        trial=2, value=10.5, low=9.975, high=10.92, limiting_slo=TTFT_SLO,
        status=SearchStatus.BRACKETED, reason="bracketed"))
    return dataclasses.replace(first, trials=trials, steps=steps,
                               capacity=CapacityEstimate(10.26, 9.5, 10.92, 0.95, TTFT_SLO))


def write_variants(folder: Path) -> dict[str, CapacityDocument]:
    """base and chunked (1.2× the capacity), in the scenario's order."""
    documents = {"base": search_document(variant="base"),
                 "chunked": search_document(variant="chunked", scale=1.2)}
    for name, document in documents.items():
        (folder / VARIANTS_DIR / name).mkdir(parents=True)
        write_capacity(folder / VARIANTS_DIR / name, document)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(
        {**scenario_echo(), "variants": {"base": {}, "chunked": {}}}, sort_keys=False))
    return documents


def rendered(folder: Path, document: CapacityDocument) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    write_capacity(folder, document)
    return render_capacity(folder).report_path.read_text(encoding="utf-8")


def figure_spec(page: str, element_id: str) -> dict:
    match = re.search(rf'<script type="application/json" id="{element_id}-spec">(.*?)</script>',
                      page, re.S)
    assert match is not None, element_id
    return json.loads(match.group(1))


def test_capacity_json_validates_and_reads_back_equal(tmp_path: Path) -> None:
    for number, document in enumerate((search_document(), above_range_document(),
                                       two_trial_document())):
        folder = tmp_path / str(number)
        folder.mkdir()
        path = write_capacity(folder, document)
        data = json.loads(path.read_text())
        jsonschema.Draft202012Validator(SCHEMA).validate(data)
        assert CapacityDocument.from_json_dict(data) == document


def test_schema_rejects_unknown_keys_and_values() -> None:
    from vllm_slo.serialise import to_json

    data = to_json(search_document())
    validator = jsonschema.Draft202012Validator(SCHEMA)
    assert validator.is_valid(data)
    assert not validator.is_valid({**data, "surprise": 1})
    assert not validator.is_valid({**data, "status": "done"})
    assert not validator.is_valid({**data, "capacity": {**data["capacity"], "interval": [1]}})
    step = {**data["steps"][0], "outcome": "sideways"}
    assert not validator.is_valid({**data, "steps": [step]})
    slo = {**data["steps"][0]["slos"][0], "extra": True}
    assert not validator.is_valid(
        {**data, "steps": [{**data["steps"][0], "slos": [slo]}]})


def test_report_shows_capacity_steps_figures_and_threshold(tmp_path: Path) -> None:
    document = search_document()
    page = rendered(tmp_path / "search", document)
    assert "10.02 req/s" in page and "[9.5, 10.4] req/s" in page and "95%" in page
    assert TTFT_SLO.replace("<", "&lt;") in page  # the limiting SLO, escaped
    assert "bracketed" in page and "0 (PASS)" in page
    for load in LOADS:
        assert f'<td class="num">{load:.4g}</td>' in page
    assert "×2, attempt 1" in page and "near" in page and "TTFT median rose" in page
    for figure in ("fig-latency-1", "fig-throughput-1", "fig-server-1"):
        assert f'id="{figure}"' in page
    assert 'href="steps/step-01-4req_s/report.html"' in page
    assert '<script src="http' not in page and "cdn" not in page.lower().split("<script>")[0]
    latency = figure_spec(page, "fig-latency-1")
    thresholds = [t for t in latency["data"] if t.get("name", "").startswith("threshold")]
    assert {round(t["y"][0], 6) for t in thresholds} == {500.0, 10000.0}  # ms
    statistic = next(t for t in latency["data"] if t.get("name", "").startswith("ttft p90"))
    assert statistic["error_y"]["array"][0] == pytest.approx(0.12 * 0.08 * 1e3)
    assert len(statistic["x"]) == len(LOADS)
    # the capacity: a vertical line and its interval shaded, named in the legend
    shapes = latency["layout"]["shapes"]
    assert any(s["type"] == "rect" and s["x0"] == 9.5 and s["x1"] == 10.4 for s in shapes)
    assert any(s["type"] == "line" and s["x0"] == 10.02 for s in shapes)
    names = [t.get("name", "") for t in latency["data"]]
    assert any(n.startswith("capacity interval [9.5, 10.4] (95%)") for n in names)
    server = figure_spec(page, "fig-server-1")
    assert [t["name"] for t in server["data"][:2]] == ["KV-cache %", "waiting"]


def test_open_interval_is_shaded_to_the_edge_and_said_so(tmp_path: Path) -> None:
    page = rendered(tmp_path / "open", above_range_document())
    assert "not bracketed" in page and "[16, –] req/s" in page and "above-range" in page
    assert "open above" in page
    spec = figure_spec(page, "fig-throughput-1")
    right = spec["layout"]["xaxis"]["range"][1]
    band = next(s for s in spec["layout"]["shapes"] if s["type"] == "rect")
    assert band["x0"] == 16.0 and band["x1"] == right
    assert any("open above: shaded to the edge" in t.get("name", "") for t in spec["data"])
    assert not any(s["type"] == "line" for s in spec["layout"]["shapes"])  # no value


def test_band_note_names_open_ends() -> None:
    assert "open below" in band_note(CapacityEstimate(None, None, 4.0, 0.95, None), "req/s")
    assert "nothing is shaded" in band_note(CapacityEstimate(None, None, None, 0.95, None),
                                            "users")


def test_slo_metric_reads_the_label() -> None:
    assert slo_metric("ttft p90 < 500ms") == "ttft"
    assert slo_metric("chat: itl p99 < 50ms") == "itl"
    assert slo_metric("adapter:sql: ttft p95 < 1s") == "ttft"


def test_markup_in_names_is_escaped(tmp_path: Path) -> None:
    page = rendered(tmp_path / "xss", search_document(
        name="<b>bold</b>", description="<script>alert(1)</script>"))
    assert "&lt;b&gt;bold&lt;/b&gt;" in page
    assert "<b>bold" not in page
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page


def test_series_without_values_are_left_out(tmp_path: Path) -> None:
    page = rendered(tmp_path / "bare", search_document(steps=search_steps(server=False)))
    assert 'id="fig-server-1"' not in page
    assert "No KV-cache or waiting-request figure" in page
    latency = figure_spec(page, "fig-latency-1")
    assert not any(t.get("name") == "E2E p99" for t in latency["data"])  # all None


def test_trials_are_told_apart(tmp_path: Path) -> None:
    page = rendered(tmp_path / "trials", two_trial_document())
    spec = figure_spec(page, "fig-throughput-1")
    symbols = {t["name"]: t["marker"]["symbol"] for t in spec["data"]
               if t.get("name", "").startswith("goodput req/s")}
    assert symbols == {"goodput req/s · trial 1": "circle",
                       "goodput req/s · trial 2": "square"}
    assert "Trials (each a search on a fresh server)" in page


def test_variants_get_a_section_each_and_a_comparison(tmp_path: Path) -> None:
    folder = tmp_path / "ab"
    documents = write_variants(folder)
    result = render_capacity(folder)
    assert list(result.documents) == list(documents)
    page = result.report_path.read_text(encoding="utf-8")
    assert 'id="search-1"' in page and 'id="search-2"' in page
    for figure in ("fig-latency-2", "fig-throughput-2", "fig-server-2"):
        assert f'id="{figure}"' in page
    assert 'id="comparison-table"' in page and "Capacity against base" in page
    ratio = result.ratios["chunked"]
    assert f"{ratio.value:.3f}×" in page and ratio.change.value in page
    assert f"{ratio.confidence:.0%}" in page
    assert 'href="variants/chunked/steps/step-01-4.8req_s/report.html"' in page
