"""A verdict's basis reads as one whole sentence, said once, in every renderer (issue 51 item
6): a relative SLO (`p50 < 3x warmup`) without a warm-up sample used to print "no warm-up
sample of ttft to size 'p50 < 3x warmup' from" twice, cut off. The shared verdict helpers
(`vllm_slo/reports/render/text.py`) decide what each page says."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from markupsafe import escape as html_escape

from tests.support import synthetic as synthesis
from vllm_slo.analysis.summary import ReportedEstimate, SloEntry
from vllm_slo.reports.render.html import slo_rows
from vllm_slo.reports.render.markdown import escape as markdown_escape
from vllm_slo.reports.render.text import (
    basis_warnings,
    format_observed,
    format_threshold,
    unobserved_basis,
    verdict_evidence,
)
from vllm_slo.reports.run_report import RenderedRun, render_run
from vllm_slo.scenarios.slo import parse_rule
from vllm_slo.stats.statistics import Verdict

SENTENCE = "no warm-up sample of ttft to size 'p50 < 3x warmup' (traffic.warmup is 0 s)"


@pytest.fixture(scope="module")
def unsized(tmp_path_factory: pytest.TempPathFactory) -> RenderedRun:
    """A run whose scenario sizes `ttft p50` from a warm-up it does not have."""
    table = synthesis.synthetic_table(120, chunks=8, warmup_s=0, duration_s=20.0, seed=5)
    scenario = synthesis.scenario_document(
        "unsized", duration_s=20.0, warmup_s=0,
        slo={"ttft": ["p50 < 3x warmup", "p95 < 500ms"]})
    run_dir = tmp_path_factory.mktemp("unsized") / "run"
    return render_run(synthesis.write_run_folder(run_dir, table, scenario, via_writer=False))


def test_the_basis_is_the_whole_sentence_in_summary_json(unsized: RenderedRun) -> None:
    entry = unsized.summary["slos"][0]
    assert entry["verdict"] == "INCONCLUSIVE" and entry["threshold"] is None
    assert entry["basis"] == SENTENCE
    assert entry["observed"]["warnings"] == [SENTENCE]  # a value-less estimate says why
    assert not any("warm-up" in warning for warning in unsized.summary["warnings"])


def test_the_terminal_says_it_once_on_the_verdict_line(unsized: RenderedRun) -> None:
    assert unsized.text.count(SENTENCE) == 1
    line = next(x for x in unsized.text.splitlines() if x.startswith("INCONCLUSIVE"))
    assert line.split()[:5] == ["INCONCLUSIVE", "ttft", "p50", "<", "3x"]
    assert line.endswith(SENTENCE)
    assert "insufficient data" not in unsized.text  # the data was there; the threshold not


def test_summary_md_says_it_once_in_the_verdict_table(unsized: RenderedRun) -> None:
    markdown = unsized.markdown_path.read_text()
    assert markdown.count(markdown_escape(SENTENCE)) == 1
    row = next(x for x in markdown.splitlines() if x.startswith("| **INCONCLUSIVE**"))
    assert row == ("| **INCONCLUSIVE** | ttft p50 | < 3x warmup (not sized) | "
                   f"{markdown_escape(SENTENCE)} |")


def test_report_html_says_it_once_in_the_basis_column(unsized: RenderedRun) -> None:
    html = unsized.report_path.read_text()
    assert html.count(str(html_escape(SENTENCE))) == 1
    assert "&lt; n/a" not in html and "size &#39;p50 &lt; 3x warmup&#39; from" not in html


def test_junit_says_it_once_in_the_skipped_case(unsized: RenderedRun) -> None:
    root = ET.fromstring(unsized.junit_path.read_text())
    skipped = root.find(".//testcase[@name='ttft p50 < 3x warmup']/skipped")
    assert skipped is not None and skipped.text is not None
    assert skipped.text.count(SENTENCE) == 1
    assert skipped.get("message") == ("INCONCLUSIVE: observed not judged vs threshold "
                                      "< 3x warmup (not sized) (within-instance)")


def entry(warnings: tuple[str, ...], basis: str, value: float | None = None,
          verdict: Verdict = Verdict.INCONCLUSIVE) -> SloEntry:
    observed = ReportedEstimate(value=value, ci_low=None, ci_high=None, confidence=0.95, n=0,
                                n_effective=None, method="none", warnings=warnings)
    return SloEntry(rule=parse_rule("ttft", "p95 < 1s"), observed=observed, verdict=verdict,
                    basis=basis)


def test_a_basis_made_of_the_warnings_is_not_repeated_under_it() -> None:
    """A part without requests: its basis is its observation's warning; the page and junit
    show the basis and no copy of it."""
    why = "no measured requests of part 'chat'"
    missing = entry((why,), why)
    assert basis_warnings(missing) == []
    assert slo_rows([missing])[0].warnings == []
    assert verdict_evidence(missing) == unobserved_basis(missing) == why
    other = entry((why, "a second, different warning"), why)
    assert basis_warnings(other) == ["a second, different warning"]


def test_an_slo_with_an_observation_shows_it_not_its_basis() -> None:
    decided = entry((), "96.0% of 200 requests below the threshold", value=0.5,
                    verdict=Verdict.PASS)
    assert unobserved_basis(decided) is None
    assert verdict_evidence(decided) == f"observed {format_observed(decided)}"
    not_estimable = entry((), "99.5% of 200 requests below the threshold",
                          verdict=Verdict.PASS)
    assert unobserved_basis(not_estimable) is None  # decided: "not estimable" says it
    assert format_threshold(decided) == "< 1.00s"


def test_a_percentile_without_any_sample_names_the_metric(tmp_path: Path) -> None:
    """An SLO on reasoning time of a model that does not reason: the basis says which samples
    are missing (it said "no samples")."""
    table = synthesis.synthetic_table(120, chunks=8, warmup_s=2.0, duration_s=20.0, seed=5)
    scenario = synthesis.scenario_document("no-reasoning", duration_s=20.0, warmup_s=2.0,
                                           slo={"reasoning_time": ["p90 < 2s"]})
    rendered = render_run(synthesis.write_run_folder(tmp_path / "run", table, scenario,
                                                     via_writer=False))
    why = "no reasoning_time sample in the measured window"
    assert rendered.summary["slos"][0]["basis"] == why
    assert rendered.text.count(why) == 1
    assert "INCONCLUSIVE reasoning_time p90 < 2s  " + why in rendered.text
