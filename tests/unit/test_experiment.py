"""Trials × variants on synthetic run folders with known effects: interleaving, comparisons
(significant where a real effect exists, `~` where none does), SLO verdicts across trials,
release gates and planning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.scenarios.errors import ExitCode, ScenarioError

from tests.support.synthetic import write_synthetic_experiment as experiment
from vllm_slo.experiment_runner import trial_order
from vllm_slo.saved_runs import compare_saved_runs, gate_saved_runs, plan_from_saved_run


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
    with pytest.raises(ScenarioError, match="seed differs"):
        gate_saved_runs(other_seed, base, 0.10, ["ttft.p50"], force=False)
    forced = gate_saved_runs(other_seed, base, 0.10, ["ttft.p50"], force=True)
    assert "warning (--force): seed differs" in forced.text


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
