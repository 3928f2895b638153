"""Trials × variants on synthetic run folders with known effects: interleaving, comparisons
(significant where a real effect exists, `~` where none does), SLO verdicts across trials,
release gates and planning."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from reports.experiment import render_experiment
from reports.run_report import render_run
from reports.samples import SampleWriter, consolidate
from reports.saved_runs import compare_saved_runs, gate_saved_runs, plan_from_saved_run
from scenarios.errors import ExitCode, ScenarioError
from scenarios.experiment import trial_folder_name, trial_order
from scenarios.loader import load_scenario
from scenarios.run_files import PROVENANCE_FILE, SCENARIO_FILE, TRIALS_DIR

T0 = 1_800_000_000.0
OVERRIDES = ["traffic.duration=20s", "traffic.warmup=0s",
             "slo={ttft: [\"p50 < 80ms\"], error_rate: \"< 50%\"}"]


def write_trial(folder: Path, scenario_doc: dict, ttft_s: float, trial_factor: float,
                seed: int, provenance_seed: int = 7, requests: int = 200) -> None:
    folder.mkdir(parents=True)
    (folder / SCENARIO_FILE).write_text(yaml.safe_dump(scenario_doc))
    (folder / PROVENANCE_FILE).write_text(json.dumps({
        "model_id": "tiny", "vllm_version": "0.32.0", "platform": "cpu",
        "seed": provenance_seed, "host": {"cpu_model": "test", "gpus": []}}))
    rng = np.random.default_rng(seed)
    writer = SampleWriter(folder / "samples" / "samples-test-1.arrows")
    for i in range(requests):
        ttft = ttft_s * trial_factor * float(rng.lognormal(0, 0.1))
        gaps = 0.01 * rng.lognormal(0, 0.2, 7)  # same distribution in every arm
        offsets = list(ttft + np.concatenate([[0.0], np.cumsum(gaps)]))
        writer.append({
            "request_id": f"r{i}", "process_id": 1, "user_id": 0, "plan_index": i,
            "conversation_id": i, "turn": 0, "phase": "measure", "endpoint": "chat",
            "intended_send_unix_s": T0 + i * 0.1, "send_unix_s": T0 + i * 0.1,
            "send_lag_s": 0.0, "queued_for_slot": False, "ttft_s": ttft,
            "e2e_s": offsets[-1], "chunk_offsets_s": offsets, "output_tokens": 8,
            "prompt_tokens": 50, "prompt_tokens_planned": 45, "max_tokens": 8,
            "status_code": 200, "ok": True, "error": None, "finish_reason": "length"})
    writer.close()
    consolidate(folder)
    render_run(folder)


def write_experiment(root: Path, variants: dict[str, float], trials: int, noise: float,
                     seed: int = 0, traffic_seed: int = 7) -> Path:
    scenario, _ = load_scenario("chat", [*OVERRIDES, f"trials={trials}",
                                         f"traffic.seed={traffic_seed}",
                                         "variants={" + ", ".join(f"{v}: {{}}" for v in variants)
                                         + "}"])
    root.mkdir(parents=True)
    (root / SCENARIO_FILE).write_text(yaml.safe_dump(scenario.to_yaml_dict()))
    base = scenario.base_without_arms()
    rng = np.random.default_rng(seed)
    for position, (name, k) in enumerate(trial_order(list(variants), trials), start=1):
        factor = float(rng.lognormal(0, noise))
        write_trial(root / TRIALS_DIR / trial_folder_name(position, name, k), base,
                    variants[name], factor, seed=position + 100 * seed,
                    provenance_seed=traffic_seed)
    return root


def test_balanced_interleaving() -> None:
    order = trial_order(["a", "b"], 4)
    assert order == [("a", 1), ("b", 1), ("b", 2), ("a", 2), ("a", 3), ("b", 3), ("b", 4),
                     ("a", 4)]
    assert [n for n, _ in trial_order(["x", "y", "z"], 2)] == ["x", "y", "z", "z", "y", "x"]


def test_real_effect_is_significant_and_slo_verdicts_follow(tmp_path: Path) -> None:
    run = write_experiment(tmp_path / "ab", {"fast": 0.05, "slow": 0.10}, trials=6, noise=0.05)
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
    run = write_experiment(tmp_path / "aa", {"a": 0.05, "b": 0.05}, trials=6, noise=0.15, seed=3)
    summary = render_experiment(run).summary
    assert not any(c["significant"] for c in summary["comparisons"][0]["cells"])


def test_too_few_trials_are_called_out(tmp_path: Path) -> None:
    run = write_experiment(tmp_path / "few", {"a": 0.05, "b": 0.10}, trials=3, noise=0.05)
    summary = render_experiment(run).summary
    assert any("can never reach" in w for w in summary["warnings"])
    assert not any(c["significant"] for c in summary["comparisons"][0]["cells"])


def test_compare_saved_runs_and_plan(tmp_path: Path) -> None:
    a = write_experiment(tmp_path / "a", {"x": 0.05}, trials=6, noise=0.05, seed=1)
    b = write_experiment(tmp_path / "b", {"x": 0.08}, trials=6, noise=0.05, seed=2)
    result = compare_saved_runs([a, b], ["ttft.p50", "e2e.p50"], 0.05, tmp_path / "cmp")
    assert result.report_path is not None and result.report_path.is_file()
    lines = [line for line in result.text.splitlines() if line.startswith("ttft.p50")]
    assert lines and "+" in lines[0] and "p=" in lines[0] and "n=6+6" in lines[0]
    plan = plan_from_saved_run(a, 0.10, 0.05)
    assert "ttft.p50" in plan and "trial CV" in plan


def test_gate_pass_fail_and_refusal(tmp_path: Path) -> None:
    base = write_experiment(tmp_path / "base", {"x": 0.05}, trials=5, noise=0.01, seed=4)
    same = write_experiment(tmp_path / "same", {"x": 0.05}, trials=5, noise=0.01, seed=5)
    worse = write_experiment(tmp_path / "worse", {"x": 0.07}, trials=5, noise=0.01, seed=6)
    passed = gate_saved_runs(same, base, 0.10, ["ttft.p50"], force=False)
    assert passed.exit_code == ExitCode.PASS, passed.text
    failed = gate_saved_runs(worse, base, 0.10, ["ttft.p50"], force=False)
    assert failed.exit_code == ExitCode.SLO_FAILED, failed.text
    other_seed = write_experiment(tmp_path / "seed", {"x": 0.05}, trials=5, noise=0.01,
                                  seed=7, traffic_seed=99)
    with pytest.raises(ScenarioError, match="seed differs"):
        gate_saved_runs(other_seed, base, 0.10, ["ttft.p50"], force=False)
    forced = gate_saved_runs(other_seed, base, 0.10, ["ttft.p50"], force=True)
    assert "warning (--force): seed differs" in forced.text
