"""Trials × variants on synthetic run folders with known effects: interleaving, comparisons
(significant where a real effect exists, `~` where none does), SLO verdicts across trials,
release gates and planning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.synthetic import write_synthetic_experiment as experiment
from vllm_slo.experiment_runner import trial_order
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.saved_runs import compare_saved_runs, gate_saved_runs, plan_from_saved_run
from vllm_slo.scenarios.errors import ExitCode, ScenarioError


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
    assert (run / "report.html").stat().st_size > 100_000
    assert [o["variant"] for o in summary["order"]][:4] == ["fast", "slow", "slow", "fast"]


def test_no_effect_is_not_significant(tmp_path: Path) -> None:
    run = experiment(tmp_path / "aa", {"a": 0.05, "b": 0.05}, trials=6, noise=0.15, seed=3)
    summary = render_experiment(run).summary
    assert not any(c["significant"] for c in summary["comparisons"][0]["cells"])


def test_too_few_trials_are_called_out(tmp_path: Path) -> None:
    run = experiment(tmp_path / "few", {"a": 0.05, "b": 0.10}, trials=3, noise=0.05)
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
    plan = plan_from_saved_run(a, 0.10, 0.05)
    assert "ttft.p50" in plan and "trial CV" in plan


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
    from vllm_slo.reports.analysis.experiment_summary import ExperimentSummary
    from vllm_slo.reports.experiment_report import load_experiment

    run = experiment(tmp_path / "t", {"a": 0.05, "b": 0.07}, trials=3, noise=0.05)
    summary, groups = load_experiment(run)
    assert isinstance(summary, ExperimentSummary) and summary.kind == "experiment"
    with pytest.raises(AttributeError):
        summary.exit_code = 0  # type: ignore[misc]  # frozen
    rendered = render_experiment(run)
    assert json.loads((run / "summary.json").read_text()) == summary.to_json_dict()
    assert rendered.summary == summary.to_json_dict()
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
                                              "effect": 0.25}
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

    from vllm_slo.reports.analysis.experiment_summary import pooled_series
    from vllm_slo.reports.experiment_report import load_experiment
    from vllm_slo.reports.render.experiment_html import (
        build_experiment_view,
        render_experiment_html,
    )
    from vllm_slo.reports.render.experiment_text import render_experiment_text

    run = experiment(tmp_path / "v", {"a": 0.05, "b": 0.10}, trials=4, noise=0.05)
    summary, groups = load_experiment(run)
    # a plan beyond the planner's cap reads "> 200" on the page and in the text alike
    capped = dataclasses.replace(summary.planning[0], trials_per_variant=None)
    summary = dataclasses.replace(summary, planning=(capped, *summary.planning[1:]))
    view = build_experiment_view(summary, {g.label: pooled_series(g.trials) for g in groups})
    assert view.outcome == "FAIL" and view.outcome_class == "fail"
    assert [row.variant for row in view.slo_rows] == ["a", "a", "b", "b"]
    assert view.slo_rows[2].observed.startswith("1") and "[" in view.slo_rows[2].observed
    assert view.plan_rows[0].trials == "> 200"
    assert "→ > 200 trials per variant" in render_experiment_text(summary)
    assert [r.position for r in view.trial_rows] == [str(k) for k in range(1, 9)]
    assert view.trial_rows[0].report == "trials/001-a-1/report.html"
    assert [f.element_id for f in view.figures] == ["fig-trials", "fig-ecdf"]
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
