"""Trials × variants on synthetic run folders with known effects: interleaving, comparisons
(significant where a real effect exists, `~` where none does), SLO verdicts across trials,
release gates and planning."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from tests.support.synthetic import write_synthetic_experiment as experiment
from vllm_slo.analysis.experiment_design import trial_order
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.saved_runs import (
    compare_saved_runs,
    gate_saved_runs,
    groups_of,
    plan_from_saved_run,
)
from vllm_slo.scenarios.errors import ExitCode, ScenarioError
from vllm_slo.scenarios.units import format_duration_s


def test_balanced_interleaving() -> None:
    order = trial_order(["a", "b"], 4)
    assert order == [("a", 1), ("b", 1), ("b", 2), ("a", 2), ("a", 3), ("b", 3), ("b", 4),
                     ("a", 4)]
    assert [n for n, _ in trial_order(["x", "y", "z"], 2)] == ["x", "y", "z", "z", "y", "x"]


def test_real_effect_is_significant_and_slo_verdicts_follow(tmp_path: Path) -> None:
    run = experiment(tmp_path / "ab", {"fast": 0.05, "slow": 0.10}, trials=6, noise=0.05)
    rendered = render_experiment(run)
    summary = rendered.summary
    cells = {c["cell"]: c for c in summary["comparisons"][0]["cells"]}
    assert cells["ttft.p50"]["significant"]
    assert cells["ttft.p50"]["ratio"]["value"] == pytest.approx(2.0, rel=0.1)
    assert cells["ttft.p50"]["p_adjusted"] < 0.05
    assert not cells["itl.p50"]["significant"]  # same gap distribution in both arms
    verdicts = {name: {s["metric"]: s["verdict"] for s in v["slos"]}
                for name, v in summary["variants"].items()}
    assert verdicts == {"fast": {"ttft": "PASS", "error_rate": "PASS"},
                        "slow": {"ttft": "FAIL", "error_rate": "PASS"}}
    assert summary["exit_code"] == ExitCode.SLO_FAILED
    assert "ttft.p50" in rendered.text and "~" in rendered.text
    # six trials per variant: decided between trials, and every output says so
    assert {s["scope"] for v in summary["variants"].values() for s in v["slos"]} == {
        "between-trials"}
    assert "verdicts between trials" in rendered.text
    assert "verdicts between trials" in (run / "report.html").read_text()
    assert (run / "report.html").stat().st_size > 100_000
    assert [o["variant"] for o in summary["order"]][:4] == ["fast", "slow", "slow", "fast"]


def test_no_effect_is_not_significant(tmp_path: Path) -> None:
    run = experiment(tmp_path / "aa", {"a": 0.05, "b": 0.05}, trials=6, noise=0.15, seed=3)
    summary = render_experiment(run).summary
    assert not any(c["significant"] for c in summary["comparisons"][0]["cells"])


def test_too_few_trials_are_called_out(tmp_path: Path) -> None:
    """The rank test's limit: 3 vs 3 trials can never reach p<0.05 (Welch on logs can)."""
    run = experiment(tmp_path / "few", {"a": 0.05, "b": 0.10}, trials=3, noise=0.05,
                     overrides=["compare.test=mann-whitney"])
    summary = render_experiment(run).summary
    assert any("can never reach" in w for w in summary["warnings"])
    assert not any(c["significant"] for c in summary["comparisons"][0]["cells"])


def test_compare_saved_runs_and_plan(tmp_path: Path) -> None:
    a = experiment(tmp_path / "a", {"x": 0.05}, trials=6, noise=0.05, seed=1)
    b = experiment(tmp_path / "b", {"x": 0.08}, trials=6, noise=0.05, seed=2)
    result = compare_saved_runs([a, b], ["ttft.p50", "e2e.p50"], 0.05, tmp_path / "cmp")
    assert result.report_path is not None and result.report_path.is_file()
    lines = [line for line in result.text.splitlines() if line.startswith("ttft.p50")]
    assert lines and "+" in lines[0] and "p=" in lines[0] and "n=6+6" in lines[0]
    plan = plan_from_saved_run(a, 0.10, 0.05, margin=0.05)
    assert "ttft.p50" in plan and "95% chi-square interval; 6 per-trial values, df 5)" in plan
    assert "trials per variant at the estimate," in plan and "at the upper bound" in plan
    assert "a gate at margin 5% passes an unchanged candidate 80% of the time with" in plan
    # the variation planned from, as the trials measured it
    values = " ".join(format_duration_s(v) for v in groups_of(a)[0].values("ttft.p50"))
    assert "    a: " in plan and f"from trials {values}" in plan


def test_gate_pass_fail_and_refusal(tmp_path: Path) -> None:
    base = experiment(tmp_path / "base", {"x": 0.05}, trials=5, noise=0.01, seed=4)
    same = experiment(tmp_path / "same", {"x": 0.05}, trials=5, noise=0.01, seed=5)
    worse = experiment(tmp_path / "worse", {"x": 0.07}, trials=5, noise=0.01, seed=6)
    passed = gate_saved_runs(same, base, 0.10, ["ttft.p50"], force=False)
    assert passed.exit_code == ExitCode.PASS, passed.text
    failed = gate_saved_runs(worse, base, 0.10, ["ttft.p50"], force=False)
    assert failed.exit_code == ExitCode.SLO_FAILED, failed.text
    other_seed = experiment(tmp_path / "seed", {"x": 0.05}, trials=5, noise=0.01,
                                  seed=7, traffic_seed=99)
    with pytest.raises(ScenarioError, match=r"seeds differ: candidate used \[99\], baseline \[7\]"):
        gate_saved_runs(other_seed, base, 0.10, ["ttft.p50"], force=False)
    forced = gate_saved_runs(other_seed, base, 0.10, ["ttft.p50"], force=True)
    assert "warning (--force): seeds differ" in forced.text


def _set_trial_seeds(run_dir: Path, seeds: list[int]) -> None:
    """Give the trials of an experiment folder these traffic seeds, in folder order."""
    folders = sorted((run_dir / "trials").iterdir())
    assert len(folders) == len(seeds)
    for folder, seed in zip(folders, seeds, strict=True):
        document = yaml.safe_load((folder / "scenario.yaml").read_text())
        document["traffic"]["seed"] = seed
        (folder / "scenario.yaml").write_text(yaml.safe_dump(document))


def test_gate_accepts_per_trial_seeds_when_both_sides_used_the_same_set(tmp_path: Path
                                                                         ) -> None:
    base = experiment(tmp_path / "base", {"x": 0.05}, trials=4, noise=0.01, seed=4)
    same = experiment(tmp_path / "same", {"x": 0.05}, trials=4, noise=0.01, seed=5)
    _set_trial_seeds(base, [1, 2, 3, 4])
    _set_trial_seeds(same, [4, 3, 2, 1])
    assert gate_saved_runs(same, base, 0.10, ["ttft.p50"], force=False).exit_code == \
        ExitCode.PASS
    _set_trial_seeds(same, [1, 2, 3, 5])
    with pytest.raises(ScenarioError, match=r"candidate used \[1, 2, 3, 5\], baseline \[1, 2"):
        gate_saved_runs(same, base, 0.10, ["ttft.p50"], force=False)


def test_experiment_and_comparison_summaries_follow_their_schema(tmp_path: Path) -> None:
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "reports" / "schema" /
                         "experiment-summary.schema.json").read_text())
    run = experiment(tmp_path / "e", {"a": 0.05, "b": 0.06}, trials=3, noise=0.05)
    jsonschema.validate(render_experiment(run).summary, schema)
    other = experiment(tmp_path / "o", {"x": 0.05}, trials=3, noise=0.05, seed=9)
    result = compare_saved_runs([run, other], None, 0.05, tmp_path / "cmp")
    jsonschema.validate(json.loads((tmp_path / "cmp" / "summary.json").read_text()), schema)
    assert result.report_path is not None


def test_report_command_rebuilds_an_experiment_and_its_trials(tmp_path: Path) -> None:
    from vllm_slo.cli import main

    run = experiment(tmp_path / "r", {"a": 0.05, "b": 0.10}, trials=4, noise=0.05)
    render_experiment(run)
    trial_reports = sorted(run.glob("trials/*/report.html"))
    assert len(trial_reports) == 8
    for path in (*trial_reports, run / "report.html", run / "summary.json"):
        path.unlink()
    assert main(["report", str(run)]) == ExitCode.SLO_FAILED  # b fails ttft p50 < 80ms
    assert all(path.is_file() for path in trial_reports)
    assert json.loads((run / "summary.json").read_text())["kind"] == "experiment"


def test_summary_is_typed_and_written_as_its_one_serialisation(tmp_path: Path) -> None:
    from vllm_slo.analysis.experiment_summary import ExperimentSummary
    from vllm_slo.reports.experiment_report import load_experiment, summary_document

    run = experiment(tmp_path / "t", {"a": 0.05, "b": 0.07}, trials=3, noise=0.05)
    summary, groups = load_experiment(run)
    assert isinstance(summary, ExperimentSummary) and summary.kind == "experiment"
    with pytest.raises(AttributeError):
        summary.exit_code = 0  # type: ignore[misc]  # frozen
    rendered = render_experiment(run)
    assert json.loads((run / "summary.json").read_text()) == summary_document(summary)
    assert rendered.summary == summary_document(summary)
    # the per-trial values the typed summary carries are the ones the statistics used
    for variant, group in zip(summary.variants, groups, strict=True):
        for cell in summary.cells:
            assert variant.values(cell) == pytest.approx(list(group.values(cell)))


def test_compare_plans_with_the_baseline_scenarios_effect(tmp_path: Path) -> None:
    base = experiment(tmp_path / "base", {"x": 0.05}, trials=3, noise=0.05, seed=1,
                      overrides=["compare.effect=0.25"])
    other = experiment(tmp_path / "other", {"x": 0.06}, trials=3, noise=0.05, seed=2,
                       overrides=["compare.effect=0.5"])
    compare_saved_runs([base, other], ["ttft.p50"], 0.05, tmp_path / "cmp")
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["kind"] == "comparison"
    assert summary["scenario"]["compare"] == {"cells": ["ttft.p50"], "alpha": 0.05,
                                              "effect": 0.25, "test": "welch-log"}
    assert summary["planning"] and {p["effect"] for p in summary["planning"]} == {0.25}


def test_invalid_trials_are_excluded_and_named(tmp_path: Path) -> None:
    run = experiment(tmp_path / "inv", {"a": 0.05, "b": 0.06}, trials=3, noise=0.05,
                     server_failures={2: "EngineCore died"})
    summary = render_experiment(run).summary
    b = summary["variants"]["b"]
    assert b["valid_trials"] == 2
    first = b["trials"][0]  # execution order a b b a a b: position 2 is b's first trial
    assert first["position"] == 2
    assert first["invalid_reasons"] == ["server failed during the run: EngineCore died"]
    assert b["cells"]["ttft.p50"]["n"] == 2  # only the valid trials enter the statistics
    assert "variant b: 1 invalid trial(s) excluded" in summary["warnings"]
    assert summary["exit_code"] != 4  # one invalid trial does not invalidate the experiment


def test_experiment_page_is_built_from_the_typed_view(tmp_path: Path) -> None:
    import dataclasses
    import re

    from vllm_slo.analysis.experiment_summary import pooled_series
    from vllm_slo.reports.experiment_report import load_experiment
    from vllm_slo.reports.render.experiment_html import (
        build_experiment_view,
        render_experiment_html,
    )
    from vllm_slo.reports.render.experiment_text import render_experiment_text

    run = experiment(tmp_path / "v", {"a": 0.05, "b": 0.10}, trials=4, noise=0.05,
                     overrides=["compare.test=mann-whitney"])
    summary, groups = load_experiment(run)
    # a plan beyond the planner's cap reads "> 200" on the page and in the text alike
    capped = dataclasses.replace(summary.planning[0], trials_per_variant=None)
    summary = dataclasses.replace(summary, planning=(capped, *summary.planning[1:]))
    view = build_experiment_view(summary, {g.label: pooled_series(g.trials) for g in groups})
    assert view.outcome == "FAIL" and view.outcome_class == "fail"
    assert [row.variant for row in view.slo_rows] == ["a", "a", "b", "b"]
    assert view.slo_rows[2].observed.startswith("1") and "[" in view.slo_rows[2].observed
    assert view.plan_rows[0].trials.startswith("> 200 (")  # then: at the CV's upper bound
    assert "→ > 200 (" in render_experiment_text(summary)
    # the CV with its interval, as `vllm-slo plan` prints it
    low, high = summary.planning[0].cv_interval
    assert low < summary.planning[0].trial_to_trial_cv < high
    assert view.plan_rows[0].cv == (f"{summary.planning[0].trial_to_trial_cv:.0%} "
                                    f"[{low:.0%}, {high:.0%}]")
    assert [r.position for r in view.trial_rows] == [str(k) for k in range(1, 9)]
    assert view.trial_rows[0].report == "trials/001-a-1/report.html"
    assert [f.element_id for f in view.figures] == ["fig-trials", "fig-ecdf"]
    # 4 vs 4 trials over 6 cells: never significant; each row says so, with the widest
    # interval's level (1 - 2/70) against the one a verdict would need (1 - 0.05/6)
    assert {r.verdict for r in view.comparison_rows} == {"not testable"}
    assert {r.level for r in view.comparison_rows} == {"97.1%: widest possible (needs 99.2%)"}
    holm_note = view.comparison_notes.index(
        "with Holm over 6 comparisons, 4 trials per side can never reach p<0.05 (minimum "
        "possible adjusted p=0.17)") + 1
    assert all(f"[{holm_note}]" in r.notes for r in view.comparison_rows)
    html = render_experiment_html(view)
    # Plotly specs are JSON in <script type="application/json">, never inline code
    assert set(re.findall(r"<script[^>]*>", html)) == {
        "<script>", '<script type="application/json" id="fig-trials-spec">',
        '<script type="application/json" id="fig-ecdf-spec">'}
    specs = re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', html,
                       flags=re.S)
    assert [json.loads(spec)["data"] != [] for spec in specs] == [True, True]
    assert "JSON.parse" in html and "var spec = {" not in html
    # the trial dots use the run report's palette, one colour per variant
    from vllm_slo.reports.render.figures import colour

    trial_dots = json.loads(view.figures[0].plotly_json)["data"]
    assert {t["marker"]["color"] for t in trial_dots if t.get("name") == "a"} == {colour(0)}
    assert {t["marker"]["color"] for t in trial_dots if t.get("name") == "b"} == {colour(1)}


def test_a_variant_left_with_one_valid_trial_still_renders(tmp_path: Path) -> None:
    """trials=2 and one server died: one valid trial against two. Tied per-trial values (an
    error rate of 0 everywhere) once crashed the comparison (scipy's permutation test needs
    two values a side); the SLOs fall back to that trial's own verdicts."""
    run = experiment(tmp_path / "one", {"a": 0.05, "b": 0.06}, trials=2, noise=0.05,
                     overrides=["compare.cells=[ttft.p50, error_rate.rate]"],
                     server_failures={4: "EngineCore died"})  # order a b b a: a's 2nd trial
    summary = render_experiment(run).summary
    assert summary["variants"]["a"]["valid_trials"] == 1
    assert all(s["basis"].startswith("single trial: ") for s in summary["variants"]["a"]["slos"])
    cells = {c["cell"]: c for c in summary["comparisons"][0]["cells"]}
    errors = cells["error_rate.rate"]
    assert (errors["n_baseline"], errors["n_candidate"]) == (1, 2)
    assert errors["p_value"] == 1.0 and not errors["significant"]


# --- compare shows every cell's estimate and interval; intervals agree with Holm's verdict ----


@pytest.fixture(scope="module")
def slow_5_vs_2(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    """Saved runs: a baseline with 5 trials, a candidate 45× slower in TTFT with 2 trials
    (the H200 case: a regression the rank test's trial counts cannot make significant;
    `compare --test mann-whitney`)."""
    root = tmp_path_factory.mktemp("slow")
    base = experiment(root / "base", {"x": 0.05}, trials=5, noise=0.05, seed=1)
    slow = experiment(root / "slow", {"x": 0.05 * 45}, trials=2, noise=0.05, seed=2)
    result = compare_saved_runs([base, slow], None, 0.05, root / "cmp", test="mann-whitney")
    return json.loads((root / "cmp" / "summary.json").read_text()), result.text


def _cells(summary: dict) -> dict[str, dict]:
    return {c["cell"]: c for c in summary["comparisons"][0]["cells"]}


def test_a_45x_change_with_5_vs_2_trials_is_shown_and_called_not_testable(slow_5_vs_2) -> None:
    summary, text = slow_5_vs_2
    ttft = _cells(summary)["ttft.p50"]
    base = summary["variants"]["base"]["trial_values"]["ttft.p50"]
    slow = summary["variants"]["slow"]["trial_values"]["ttft.p50"]
    assert (len(base), len(slow)) == (5, 2)
    # known values: the widest interval 5 vs 2 trials allow is every pairwise ratio, at
    # level 1 - 2 / C(7, 2) = 19/21; significance over 6 cells would need 1 - 0.05/6
    assert not ttft["testable"] and not ttft["significant"]
    assert ttft["ratio"]["value"] == pytest.approx(float(np.exp(np.median(
        [np.log(b / a) for a in base for b in slow]))), rel=1e-9)  # HL on logarithms
    assert ttft["ratio"]["value"] == pytest.approx(45, rel=0.15)
    assert ttft["ratio"]["ci_low"] is None  # no 99.2% interval exists with 5 vs 2 trials
    assert (ttft["family_size"], ttft["holm_factor"]) == (6, 6)
    assert ttft["interval_confidence"] == pytest.approx(1 - 0.05 / 6)
    widest = ttft["ratio_range"]
    assert widest["confidence"] == pytest.approx(19 / 21)
    assert widest["ci_low"] == pytest.approx(min(slow) / max(base))
    assert widest["ci_high"] == pytest.approx(max(slow) / min(base))
    assert ttft["p_value"] == pytest.approx(2 / 21)
    assert ttft["p_adjusted"] == pytest.approx(6 * 2 / 21)
    expected = (f"×{ttft['ratio']['value']:.1f} [×{widest['ci_low']:.1f}, "
                f"×{widest['ci_high']:.1f}], not testable with 5+2 trials (90.5% CI, p=0.57)")
    assert ttft["display"] == expected
    row = next(line for line in text.splitlines() if line.startswith("ttft.p50"))
    assert expected in row and "~" not in row
    # each trial's value beside the trial-level estimate
    assert "[slow] 2 valid trial(s)" in text
    line = next(line for line in text.splitlines() if line.startswith("  ttft.p50: ")
                and "from trials" in line and len(line.split("from trials")[1].split()) == 2)
    assert line.endswith("from trials " + " ".join(format_duration_s(v) for v in slow))
    estimate = summary["variants"]["slow"]["cells"]["ttft.p50"]
    assert line.startswith(f"  ttft.p50: {format_duration_s(estimate['value'])} "
                           f"[{format_duration_s(estimate['ci_low'])}, ")
    assert "plan: ttft.p50: instance CV" in text  # what more trials would buy


def test_unreachable_note_and_closing_warning_quote_the_same_p(slow_5_vs_2) -> None:
    """5 vs 2 trials over 6 cells: the smallest Holm-adjusted p is 6 * 2/21 = 0.57, in the
    cell's footnote and in the closing warning alike (it once said 1, from 2 vs 2)."""
    summary, text = slow_5_vs_2
    footnotes = [w for w in _cells(summary)["ttft.p50"]["warnings"] if "adjusted p" in w]
    assert footnotes == ["with Holm over 6 comparisons, 5 vs 2 trials can never reach p<0.05 "
                         "(minimum possible adjusted p=0.57)"]
    closing = [w for w in summary["warnings"] if "can never reach" in w]
    assert closing == ["slow vs base: 5 vs 2 trials over 6 compared cell(s) can never reach "
                       "p<0.05 (smallest possible Holm-adjusted p=0.57); use trials >= 5 per "
                       "side"]
    assert f"warning: {closing[0]}" in text


def test_comparison_summary_with_widest_intervals_follows_the_schema(slow_5_vs_2) -> None:
    import jsonschema

    schema = json.loads((Path(__file__).resolve().parents[2] / "reports" / "schema" /
                         "experiment-summary.schema.json").read_text())
    summary, _ = slow_5_vs_2
    jsonschema.validate(summary, schema)
    assert summary["schema_version"] == 2
    for variant in summary["variants"].values():  # trial_values: the valid trials' cells
        for cell, values in variant["trial_values"].items():
            assert values == [t["cells"][cell] for t in variant["trials"]
                              if not t["invalid_reasons"] and t["cells"][cell] is not None]


def test_an_aa_pair_shows_tilde_with_an_interval_around_zero(tmp_path: Path) -> None:
    run = experiment(tmp_path / "aa", {"a": 0.05, "b": 0.05}, trials=5, noise=0.05, seed=3)
    rendered = render_experiment(run)
    cells = _cells(rendered.summary)
    for name, cell in cells.items():
        assert cell["testable"] and not cell["significant"], name
        ratio = cell["ratio"]
        assert ratio["ci_low"] < 1 < ratio["ci_high"], name
        assert ratio["confidence"] == pytest.approx(cell["interval_confidence"])
        # nothing rejected: every cell at alpha / (cells not rejected) = alpha / 6
        assert cell["holm_factor"] == 6
        assert cell["display"].startswith("~ ") and "(99.2% CI, p=" in cell["display"]
        assert cell["display"].endswith(" n=5+5)")
    low, high = cells["ttft.p50"]["ratio"]["ci_low"], cells["ttft.p50"]["ratio"]["ci_high"]
    assert cells["ttft.p50"]["change"] == (
        f"{(cells['ttft.p50']['ratio']['value'] - 1) * 100:+.1f}% "
        f"[{(low - 1) * 100:+.1f}%, {(high - 1) * 100:+.1f}%]")
    row = next(line for line in rendered.text.splitlines() if line.startswith("ttft.p50 "))
    assert row.endswith(cells["ttft.p50"]["display"])


def test_significant_cells_show_their_interval_at_the_holm_step_level(tmp_path: Path) -> None:
    run = experiment(tmp_path / "ab", {"fast": 0.05, "slow": 0.10}, trials=6, noise=0.05)
    cells = _cells(render_experiment(run).summary)
    ttft = cells["ttft.p50"]
    assert ttft["significant"] and ttft["testable"]
    assert ttft["ratio"]["ci_low"] > 1 and not ttft["display"].startswith("~")
    # x2 with an upper bound beyond x2: ratios, not percent (the display rule)
    assert ttft["ratio"]["ci_high"] > 2 and ttft["change"].startswith("×")
    assert ttft["display"] == (f"{ttft['change']} ({ttft['interval_confidence'] * 100:.3g}% CI, "
                               f"p={ttft['p_adjusted']:.2g} n=6+6)")
    assert ttft["interval_confidence"] == pytest.approx(1 - 0.05 / ttft["holm_factor"])
    assert 1 <= ttft["holm_factor"] <= 6
    for cell in cells.values():
        ratio = cell["ratio"]
        excludes = ratio["ci_low"] > 1 or ratio["ci_high"] < 1
        assert excludes == cell["significant"], cell["cell"]


def test_closing_warning_uses_the_actual_trial_counts_of_an_experiment(tmp_path: Path) -> None:
    """trials=4 with one of b's servers dead: 4 vs 3 trials (6 * 2/35 = 0.34), not 4 vs 4."""
    run = experiment(tmp_path / "inv", {"a": 0.05, "b": 0.06}, trials=4, noise=0.05,
                     server_failures={2: "EngineCore died"},
                     overrides=["compare.test=mann-whitney"])
    summary = render_experiment(run).summary
    closing = [w for w in summary["warnings"] if "can never reach" in w]
    assert closing == ["b vs a: 4 vs 3 trials over 6 compared cell(s) can never reach p<0.05 "
                       "(smallest possible Holm-adjusted p=0.34); use trials >= 5 per side"]
    notes = {w for c in summary["comparisons"][0]["cells"] for w in c["warnings"]}
    assert ("with Holm over 6 comparisons, 4 vs 3 trials can never reach p<0.05 (minimum "
            "possible adjusted p=0.34)") in notes


def test_holm_interval_factors_hand_computed() -> None:
    from vllm_slo.stats.trial_statistics import holm_interval_factors

    # sorted 0.005 (4x = 0.02 rejected), 0.01 (3x = 0.03 rejected), 0.03 (2x = 0.06: stop),
    # 0.04 (not rejected): rejected cells at their step, the rest at the stopping step's 2
    assert holm_interval_factors([0.01, 0.04, 0.03, 0.005], 0.05) == (3, 2, 2, 4)
    assert holm_interval_factors([0.5, None, 0.9], 0.05) == (2, None, 2)
    assert holm_interval_factors([0.001, 0.002], 0.05) == (2, 1)  # all rejected
    assert holm_interval_factors([], 0.05) == ()


def test_exactly_alpha_after_holm_is_not_significant_and_has_no_interval() -> None:
    """3 vs 7 trials, fully separated: p = 2 / C(10, 3) = 1/60; Holm over 3 gives exactly
    0.05, which is not below alpha (the floats say 0.04999...)."""
    from vllm_slo.stats.trial_statistics import compare_trials, with_holm

    family = with_holm([compare_trials(np.arange(3.0) + 1, np.arange(7.0) + 100)
                        for _ in range(3)])
    for cell in family:
        assert cell.p_value == pytest.approx(1 / 60)
        assert not cell.significant and not cell.testable
        assert cell.ratio.ci_low is None and cell.ratio_range is not None
        assert cell.ratio_range.confidence == pytest.approx(1 - 1 / 60)
        assert cell.ratio_range.ci_low == pytest.approx(100 / 3)
        assert cell.ratio_range.ci_high == pytest.approx(106 / 1)


def _brute_force_holm(p_values: list[float], alpha: float) -> list[bool]:
    """Holm's step-down as the textbook states it."""
    from vllm_slo.stats.trial_statistics import below_alpha

    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for step, i in enumerate(order):
        if not below_alpha(p_values[i] * (len(p_values) - step), alpha):
            break
        rejected[i] = True
    return rejected


@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.1])
def test_adjusted_interval_excludes_the_null_exactly_when_significant(alpha: float) -> None:
    """Random families (1-7 cells, 1-12 trials a side, effects from none to large): after
    Holm, a testable cell's shift and ratio intervals exclude 0 / 1 exactly when it is
    significant, at level 1 - alpha / holm_factor; a cell that is not testable is never
    significant, has no interval at that level and its widest interval sits at 1 - min p."""
    from vllm_slo.stats.trial_statistics import (
        compare_trials,
        min_p_value_mann_whitney,
        with_holm,
    )

    rng = np.random.default_rng(int(alpha * 1000))
    seen = {"significant": 0, "not significant": 0, "not testable": 0}
    for _ in range(250):
        m = int(rng.integers(1, 8))
        n_a, n_b = int(rng.integers(1, 13)), int(rng.integers(1, 13))
        raw = [compare_trials(rng.lognormal(0, 0.3, n_a),
                              rng.lognormal(float(rng.choice([0.0, 0.2, 0.6, 1.5])), 0.3, n_b),
                              alpha=alpha) for _ in range(m)]
        family = with_holm(raw)
        assert [c.significant for c in family] == _brute_force_holm(
            [c.p_value for c in raw], alpha)
        for cell in family:
            if not cell.testable:
                seen["not testable"] += 1
                assert not cell.significant
                assert cell.ratio.ci_low is None and cell.shift.ci_low is None
                if min(n_a, n_b) and min_p_value_mann_whitney(n_a, n_b) < 1:
                    assert cell.ratio_range is not None
                    assert cell.ratio_range.confidence == pytest.approx(
                        1 - min_p_value_mann_whitney(n_a, n_b))
                    assert cell.ratio_range.confidence <= cell.interval_confidence + 1e-12
                continue
            seen["significant" if cell.significant else "not significant"] += 1
            assert cell.interval_agrees and cell.ratio_range is None
            assert cell.ratio.confidence == pytest.approx(1 - alpha / cell.holm_factor)
            assert cell.shift.confidence == cell.ratio.confidence == cell.interval_confidence
            assert (cell.ratio.ci_low > 1 or cell.ratio.ci_high < 1) == cell.significant
            assert (cell.shift.ci_low > 0 or cell.shift.ci_high < 0) == cell.significant
    assert min(seen.values()) > 20, seen  # every kind of cell was exercised


def test_ties_never_hide_a_disagreement_between_interval_and_verdict() -> None:
    """With ties the p-value comes from a permutation test, which the Moses interval is not
    exactly dual to: any disagreement is flagged, never silent."""
    from vllm_slo.stats.trial_statistics import compare_trials, with_holm

    rng = np.random.default_rng(5)
    for _ in range(60):
        family = with_holm([compare_trials(rng.integers(1, 6, 6).astype(float),
                                           rng.integers(2, 8, 6).astype(float))
                            for _ in range(2)])
        for cell in family:
            excludes = cell.shift.ci_low is not None and (cell.shift.ci_low > 0
                                                          or cell.shift.ci_high < 0)
            assert cell.interval_agrees == (excludes == cell.significant)
            flagged = any(w.startswith("interval and p-value disagree") for w in cell.warnings)
            assert flagged == (not cell.interval_agrees)


def test_change_display_rule() -> None:
    from vllm_slo.analysis.wording import format_ratio, format_shift

    assert format_ratio(1.041, 0.91, 1.187) == "+4.1% [-9.0%, +18.7%]"
    assert format_ratio(0.9996, 0.99, 1.01) == "+0.0% [-1.0%, +1.0%]"  # never "-0.0%"
    assert format_ratio(1.66, 0.6, 4.5) == "×1.66 [×0.60, ×4.50]"  # a bound beyond ×2
    assert format_ratio(45.7, 34.9, 60.0) == "×45.7 [×34.9, ×60.0]"
    assert format_ratio(0.012, None, None) == "×0.012"
    assert format_ratio(250.0, 120.0, 300.0) == "×250 [×120, ×300]"
    assert format_shift("error_rate.rate", 0.004, -0.001, 0.01) == (
        "+0.40pp [-0.10pp, +1.00pp]")
    assert format_shift("ttft.p50", -0.012, None, None) == "-12.0ms"


def test_trial_values_text() -> None:
    from vllm_slo.analysis.wording import trial_values_text

    assert trial_values_text("ttft.p50", [2.1, 2.5]) == "from trials 2.10s 2.50s"
    assert trial_values_text("ttft.p50", [0.05]) == "from trial 50.0ms"
    many = trial_values_text("ttft.p50", [0.05 + 0.001 * k for k in range(30)])
    assert many == "from 30 trials: 50.0ms .. 79.0ms, median 64.5ms"


def test_comparison_page_shows_estimates_beside_trials_and_each_cells_level(
        tmp_path: Path) -> None:
    from vllm_slo.reports.experiment_report import load_experiment
    from vllm_slo.reports.render.experiment_html import build_experiment_view

    run = experiment(tmp_path / "p", {"a": 0.05, "b": 0.10}, trials=4, noise=0.05,
                     overrides=["compare.cells=[ttft.p50]"])  # one cell: 4 vs 4 is testable
    summary, _ = load_experiment(run)
    view = build_experiment_view(summary, {})
    rows = {(r.variant, r.cell): r for r in view.estimate_rows}
    b_values = summary.variants[1].values("ttft.p50")
    assert rows[("b", "ttft.p50")].trials == "from trials " + " ".join(
        format_duration_s(v) for v in b_values)
    assert rows[("b", "ttft.p50")].method == "t-log-across-trials"
    compared = {r.cell: r for r in view.comparison_rows}
    assert compared["ttft.p50"].pair == "b vs a" and compared["ttft.p50"].trials == "4+4"
    entry = next(c for c in summary.comparisons[0].cells if c.cell == "ttft.p50")
    assert compared["ttft.p50"].change == entry.change
    assert compared["ttft.p50"].verdict == "significant"
    assert compared["ttft.p50"].level == "95% (unadjusted)"
    assert compared["ttft.p50"].p == f"{entry.p_adjusted:.2g}"
    # the one footnote: the pair's judgement (test, Holm family, unit), as gate prints it
    judgement = summary.comparisons[0].judgement
    assert "Welch t on log" in judgement and "instance means" in judgement
    assert compared["ttft.p50"].notes == "[1]"
    assert view.comparison_notes == [f"b vs a: {judgement}"]


def _set_gpus(run: Path, gpus_by_position: dict[int, list[str]]) -> None:
    for folder in sorted((run / "trials").iterdir()):
        path = folder / "provenance.json"
        provenance = json.loads(path.read_text())
        position = int(folder.name.split("-", 1)[0])
        provenance.setdefault("host", {})["gpu_uuids"] = gpus_by_position[position]
        path.write_text(json.dumps(provenance))


def test_trials_on_two_machines_are_named_in_a_warning(tmp_path: Path) -> None:
    """An experiment resumed on another machine (as on the H200 on 2026-12-04): the summary
    says which trials ran on which GPUs; on one machine it says nothing."""
    run = experiment(tmp_path / "gpus", {"a": 0.05, "b": 0.06}, trials=3, noise=0.05)
    first, second = "GPU-20782ca8-0cf1-0ccf", "GPU-92b9612d-6845-19ec"
    _set_gpus(run, {position: [first] for position in range(1, 7)})
    assert not any("sets of GPUs" in w for w in render_experiment(run).summary["warnings"])
    _set_gpus(run, {**{position: [first] for position in range(1, 6)}, 6: [second]})
    (warning,) = [w for w in render_experiment(run).summary["warnings"]
                  if "sets of GPUs" in w]
    names = sorted(folder.name for folder in (run / "trials").iterdir())
    assert warning.startswith("the trials ran on 2 different sets of GPUs (")
    assert f"GPU-20782ca8: {' '.join(names[:5])}; GPU-92b9612d: {names[5]})" in warning
