"""An experiment's design before and while it runs: the refusal of a design that can never
decide (exit 2, no folder, `--force` passes it), the expected server time and where its
start-up figure comes from, the stopping rule after each round as a pure function, and the
stopping record and per-cell decisions in summary.json, the text and the page."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import jsonschema
import pytest

from tests.support.synthetic import write_synthetic_experiment
from vllm_slo import cli, experiment_runner
from vllm_slo.analysis.experiment_design import (
    DEFAULT_STARTUP_S,
    design_check,
    next_action,
    sequential_design,
    time_estimate,
)
from vllm_slo.cli import main
from vllm_slo.outcome import Outcome
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.run_folder.provenance import Provenance
from vllm_slo.run_folder.run_files import STOPPING_FILE, TRIALS_DIR
from vllm_slo.scenarios import experiment_spec, model
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.scenarios.loader import load_scenario, resolve_variants
from vllm_slo.stats import sequential
from vllm_slo.stats.sequential import CellDecision, SequentialDesign
from vllm_slo.stats.statistics import Estimate

REPO = Path(__file__).resolve().parents[2]
# the issue's design: 4 + 4 trials, a rank test, Holm over 2 cells: never p < alpha / 2
RANK_4X4 = ["scenario=h200-eager-ab", "compare.test=mann-whitney", "trials=4"]


def _summary(outcome: Outcome) -> dict:
    """The summary.json an experiment's outcome wrote."""
    assert outcome.folder is not None
    return json.loads((outcome.folder / "summary.json").read_text())


def _decision(word: str) -> CellDecision:
    ratio = Estimate(1.0, 0.9, 1.1, 0.95, 6, 6.0, "welch-log-ratio")
    return CellDecision("ttft.p50", word, ratio, 0.5, 0.5, 0.01)  # type: ignore[arg-type]


DESIGN = SequentialDesign(min_trials=3, max_trials=10, alpha=0.05, effect=0.1, cells=2)


@pytest.mark.parametrize(("words", "rounds", "elapsed_s", "budget_s", "stop", "reason"), [
    (["changed", "equivalent"], 3, 30.0, None, True, "decided"),
    (["changed", "undecided"], 3, 30.0, None, False, None),
    (["changed", "undecided"], 10, 100.0, None, True, "max_trials"),
    (["changed", "changed"], 10, 100.0, None, True, "max_trials"),  # the cap is said first
    ([], 2, 20.0, None, False, None),  # before trials.min: no look
    (["changed", "undecided"], 4, 400.0, 480.0, True, "budget"),  # 100 s a round: 500 > 480
    (["changed", "undecided"], 4, 400.0, 500.0, False, None),  # ends exactly at the budget
    ([], 0, 0.0, 1.0, False, None),  # no round yet: nothing to estimate one from
])
def test_next_action(words: list[str], rounds: int, elapsed_s: float, budget_s: float | None,
                     stop: bool, reason: str | None) -> None:
    action = next_action([_decision(w) for w in words], rounds, DESIGN, DESIGN.max_trials,
                         elapsed_s, budget_s)
    assert (action.stop, action.reason) == (stop, reason)
    assert action.detail


def test_decided_cells_before_min_do_not_stop() -> None:
    """A look only counts from trials.min on (decide_cells says undecided before it anyway)."""
    action = next_action([_decision("changed")], 2, DESIGN, 10, 20.0, None)
    assert not action.stop


def test_without_a_comparison_only_the_cap_and_the_budget_stop() -> None:
    assert next_action([], 4, None, 5, 40.0, None).stop is False
    assert next_action([], 5, None, 5, 50.0, None).reason == "max_trials"
    assert next_action([], 2, None, 5, 20.0, 25.0).reason == "budget"


def test_every_shipped_scenario_passes_the_design_check() -> None:
    from vllm_slo.scenarios.loader import shipped_scenarios

    checked = 0
    for name in shipped_scenarios():
        scenario = load_scenario(name)[0]
        if scenario.capacity is not None and scenario.variants:
            continue  # `vllm-slo capacity` compares its variants by capacity, one search each
        check = design_check(scenario)
        assert check is None or check.can_decide, (name, check)
        checked += 1
    assert checked > 10


def test_design_of_the_scenario() -> None:
    scenario, _ = load_scenario("h200-eager-ab", ["trials={min: 3, max: 6}",
                                                  "compare.alpha=0.01", "compare.effect=20%"
                                                  .replace("20%", "0.2")])
    design = sequential_design(scenario)
    assert design == SequentialDesign(3, 6, 0.01, 0.2, 2, "welch-log")
    chat, _ = load_scenario("chat", ["trials=3"])
    assert sequential_design(chat) is None and design_check(chat) is None


def test_the_issue_design_is_refused_with_the_smallest_count() -> None:
    """4 + 4 trials, a rank test, Holm over 2 cells: the smallest p (2/70) is above 0.025."""
    scenario, _ = load_scenario("h200-eager-ab", ["compare.test=mann-whitney", "trials=4"])
    check = design_check(scenario)
    assert check is not None and not check.can_decide and check.smallest_trials == 5
    fixed, _ = load_scenario("h200-eager-ab", ["compare.test=mann-whitney", "trials=5"])
    assert design_check(fixed) == sequential.DesignCheck(True, None, "")


def test_run_refuses_an_undecidable_design_without_a_folder(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture
                                                            ) -> None:
    runs = tmp_path / "runs"
    assert main(["--runs-dir", str(runs), "run", *RANK_4X4]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert "can never decide" in error and "trials=5" in error and "--force" in error
    assert not runs.exists()
    assert main(["--runs-dir", str(runs), "run", RANK_4X4[0], "trials=1"]) == 2
    assert "trials=2" in capsys.readouterr().err and not runs.exists()


def test_force_runs_it_anyway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture) -> None:
    """Past the check with --force: the warning, the plan and its time estimate, a folder; the
    rounds themselves are stubbed (no server here)."""
    started: list[Path] = []

    class Rounds:
        def __init__(self, scenario: object, arms: object, run_dir: Path, say: object):
            started.append(run_dir)

        def run(self) -> Outcome:
            return Outcome(started[0], ExitCode.PASS, "")

    monkeypatch.setattr(experiment_runner, "_Rounds", Rounds)
    monkeypatch.setattr(experiment_runner, "validate_server_args", lambda *args: None)
    runs = tmp_path / "runs"
    assert main(["--runs-dir", str(runs), "run", *RANK_4X4, "server.platform=gpu",
                 "--force"]) == 0
    out = capsys.readouterr().out
    assert "warning: --force: scenario 'h200-eager-ab' can never decide" in out
    assert ("expected server time: 8 server start(s) × 90 s start-up (default for gpu: no "
            "earlier run of h200-eager-ab measured one) + 25 s window(s) each = 15.3 min") in out
    assert started and started[0].parent == runs.resolve() and started[0].is_dir()


def test_force_may_stand_between_the_overrides(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`run scenario=X --force key=v`: argparse alone ends the overrides at the flag and
    refuses `key=v`; the switch is moved up front, so every position works the same."""
    seen: list[tuple[list[str], bool]] = []

    def command_run(options: argparse.Namespace, say: object) -> Outcome:
        seen.append((list(options.arguments), options.force))
        return Outcome(None, ExitCode.PASS, "")

    monkeypatch.setattr(cli, "command_run", command_run)
    runs = str(tmp_path / "runs")
    for argv in (["run", "--force", *RANK_4X4, "trials=5"],
                 ["run", RANK_4X4[0], "--force", *RANK_4X4[1:], "trials=5"],
                 ["run", *RANK_4X4, "trials=5", "--force"]):
        assert main(["--runs-dir", runs, *argv]) == 0
    assert seen == [([*RANK_4X4, "trials=5"], True)] * 3


def test_time_estimate_for_min_and_max_trials() -> None:
    scenario, _ = load_scenario("h200-eager-ab", ["trials={min: 3, max: 6}"])
    estimate = time_estimate(scenario, 60.0, "measured")
    window_s = scenario.traffic.warmup_s + scenario.traffic.duration_s
    assert estimate.server_starts(3) == 6 and estimate.server_starts(6) == 12
    assert estimate.server_time_s(3) == 6 * (60.0 + window_s)
    assert estimate.server_time_s(6) == 12 * (60.0 + window_s)
    assert f"6-12 server start(s) × 60 s start-up (measured) + {window_s:g} s" in estimate.line()
    attached, _ = load_scenario("h200-eager-ab", ["server.url=http://127.0.0.1:1"])
    assert time_estimate(attached, 60.0, "measured").startup_s == 0.0


def test_a_budget_caps_the_rounds_in_the_estimate() -> None:
    scenario, _ = load_scenario("h200-eager-ab", ["trials={min: 3, max: 6, budget: 15m}"])
    estimate = time_estimate(scenario, 90.0, "x")  # a round: 2 × (90 + 25) s = 230 s
    assert estimate.rounds_in_budget() == 3  # 900 // 230
    assert "budget 15 min of wall time: about 3 round(s)" in estimate.line()
    tight, _ = load_scenario("h200-eager-ab", ["trials={min: 3, max: 6, budget: 5m}"])
    assert "fewer than trials.min" in time_estimate(tight, 90.0, "x").line()


def test_side_by_side_wall_time_is_one_start_per_round() -> None:
    scenario, _ = load_scenario("h200x2-prefix-caching-side-by-side")
    estimate = time_estimate(scenario, 50.0, "x")
    rounds = scenario.max_trials
    per_server_s = 50.0 + estimate.window_s
    assert estimate.wall_time_s(rounds) == rounds * per_server_s
    assert estimate.server_time_s(rounds) == 2 * rounds * per_server_s
    assert "side by side" in estimate.line()


def _trial_with_ready_time(folder: Path, ready_s: float | None) -> None:
    folder.mkdir(parents=True)
    fields = {} if ready_s is None else {"server_ready_after_s": ready_s}
    Provenance(seed=1, **fields).write(folder, lambda document: document)


def test_startup_from_the_newest_earlier_run_that_measured_one(tmp_path: Path) -> None:
    scenario, _ = load_scenario("h200-eager-ab", ["server.platform=cpu"])
    root = tmp_path / "runs"
    assert experiment_runner.startup_estimate(root, scenario) == (
        DEFAULT_STARTUP_S["cpu"], "default for cpu: no earlier run of h200-eager-ab measured one")
    older = root / "20261201T000000Z-h200-eager-ab"
    for index, ready_s in enumerate((70.0, 50.0, 60.0), start=1):
        _trial_with_ready_time(older / TRIALS_DIR / f"00{index}-graphs-1", ready_s)
    newer = root / "20261202T000000Z-h200-eager-ab-2"  # newest, but measured nothing
    _trial_with_ready_time(newer / TRIALS_DIR / "001-graphs-1", None)
    _trial_with_ready_time(root / "20261203T000000Z-h200-eager-ab-other" / TRIALS_DIR
                           / "001-a-1", 5.0)  # another scenario's name
    assert experiment_runner.startup_estimate(root, scenario) == (
        60.0, "median of 3 in 20261201T000000Z-h200-eager-ab")
    single = root / "20261204T000000Z-h200-eager-ab"
    _trial_with_ready_time(single, 33.0)
    assert experiment_runner.startup_estimate(root, scenario)[0] == 33.0


def test_the_sequential_cap_is_the_procedures() -> None:
    assert experiment_spec.MAX_SEQUENTIAL_TRIALS == sequential.MAX_SEQUENTIAL_TRIALS


def _decided_experiment(tmp_path: Path) -> Path:
    """A sequential experiment folder (3-6 trials, b's TTFT 2x a's) whose runner stopped
    `decided` after 4 rounds, 2 looks."""
    run = write_synthetic_experiment(
        tmp_path / "seq", {"a": 0.05, "b": 0.10}, trials=4, noise=0.05,
        scenario_patch={"trials": {"min": 3, "max": 6}})
    (run / STOPPING_FILE).write_text(json.dumps({
        "reason": "decided", "rounds": 4, "looks": 2, "min_trials": 3, "max_trials": 6,
        "budget_s": None, "elapsed_s": 120.0, "detail": "every compared cell decided"}))
    return run


def test_summary_carries_the_stopping_record_and_each_cells_decision(tmp_path: Path) -> None:
    """A sequential folder's summary.json: `stopping` as the runner wrote it, each compared
    cell's decision at the last look (a 2x TTFT: changed), schema-valid; text and page say
    it."""
    run = _decided_experiment(tmp_path)
    rendered = render_experiment(run)
    summary = rendered.summary
    schema = json.loads((REPO / "reports" / "schema" / "experiment-summary.schema.json")
                        .read_text())
    jsonschema.validate(summary, schema)
    assert summary["stopping"]["reason"] == "decided"
    assert summary["trials_per_variant"] == 4
    cells = {c["cell"]: c for c in summary["comparisons"][0]["cells"]}
    ttft = cells["ttft.p50"]["decision"]
    assert ttft["decision"] == "changed" and ttft["trials_per_arm"] == 4
    assert ttft["ratio"]["value"] == pytest.approx(2.0, rel=0.15)
    assert ttft["p_change"] is not None and ttft["p_change"] < 0.05
    assert "stopped: decided after 4 round(s), 2 look(s) (trials 3-6 per variant" in rendered.text
    assert re.search(r"^decision +b vs a$", rendered.text, re.MULTILINE)
    assert re.search(r"^ttft.p50 +changed ×2", rendered.text, re.MULTILINE)
    page = rendered.report_path.read_text()
    assert 'id="stopping"' in page and "decision (design)" in page
    # the table tests with the design's test (welch-log): one answer, no rank-test limit
    assert cells["ttft.p50"]["test"] == "welch-log" and cells["ttft.p50"]["significant"]
    assert not [w for w in summary["warnings"] if "can never reach" in w]


def test_a_folder_without_a_stopping_record_has_no_decisions(tmp_path: Path) -> None:
    """An experiment from before sequential designs renders as it did."""
    run = write_synthetic_experiment(tmp_path / "old", {"a": 0.05, "b": 0.10}, trials=4,
                                     noise=0.05)
    summary = render_experiment(run).summary
    assert "stopping" not in summary
    assert all(c["decision"] is None for c in summary["comparisons"][0]["cells"])


def test_interrupted_record_makes_the_report_say_so(tmp_path: Path) -> None:
    run = write_synthetic_experiment(tmp_path / "cut", {"a": 0.05, "b": 0.06}, trials=2,
                                     noise=0.05)
    (run / STOPPING_FILE).write_text(json.dumps({
        "reason": "interrupted", "rounds": 2, "looks": 0, "min_trials": 3, "max_trials": 6,
        "budget_s": None, "elapsed_s": 10.0, "detail": ""}))
    summary = render_experiment(run).summary
    assert summary["exit_code"] == 4
    assert "the experiment was interrupted before its planned end" in summary["invalid_reasons"]


def test_resume_refuses_what_is_not_an_experiment(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    assert main(["run", "--resume", str(tmp_path)]) == 2
    assert "not an experiment folder" in capsys.readouterr().err
    assert main(["run", "--resume", str(tmp_path), "scenario=chat"]) == 2
    assert "takes no scenario (got scenario=chat)" in capsys.readouterr().err


def test_resume_of_a_finished_experiment_runs_nothing(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture) -> None:
    run = write_synthetic_experiment(tmp_path / "done", {"a": 0.05, "b": 0.10}, trials=3,
                                     noise=0.05)
    (run / STOPPING_FILE).write_text(json.dumps({
        "reason": "max_trials", "rounds": 3, "looks": 1, "min_trials": 3, "max_trials": 3,
        "budget_s": None, "elapsed_s": 10.0, "detail": "3 of 3 round(s) run"}))
    before = sorted(p.name for p in (run / TRIALS_DIR).iterdir())
    code = main(["run", "--resume", str(run)])
    assert "nothing to resume" in capsys.readouterr().out
    assert sorted(p.name for p in (run / TRIALS_DIR).iterdir()) == before
    assert code in (0, 1, 3)


def _fake_trials(monkeypatch: pytest.MonkeyPatch, ttft_s: dict[str, float],
                 interrupt_at: int | None) -> list[str]:
    """experiment_runner.run_trial replaced by synthetic trials (no server): TTFT per variant,
    the trial at position `interrupt_at` cut short as Ctrl-C leaves one. Returns the folder
    names run, in order."""

    from tests.support.synthetic import write_synthetic_trial
    from vllm_slo.analysis.verdicts import INTERRUPTED_REASON
    from vllm_slo.scenarios.errors import ExitCode

    ran: list[str] = []

    def run_trial(arm, folder: Path, say):
        position = int(folder.name.split("-", 1)[0])
        variant = folder.name.split("-")[1]
        ran.append(folder.name)
        write_synthetic_trial(folder, arm.to_yaml_dict(), ttft_s[variant], 1.0 + position / 100,
                              seed=position)
        summary = json.loads((folder / "summary.json").read_text())
        if position == interrupt_at:
            summary["invalid_reasons"] = [INTERRUPTED_REASON]
            (folder / "summary.json").write_text(json.dumps(summary))
        return ExitCode.PASS, RenderedRun(summary, "", folder / "report.html",
                                          folder / "summary.json")

    monkeypatch.setattr(experiment_runner, "run_trial", run_trial)
    return ran


def _sequential_experiment(tmp_path: Path) -> tuple[model.Scenario, Path]:
    """chunked-prefill-ab as a sequential experiment (2 to 4 trials, one cell), its folder made
    with its scenario.yaml as `vllm-slo run` leaves it before the first trial."""
    import yaml

    from vllm_slo.run_folder.run_files import SCENARIO_FILE

    scenario, _ = load_scenario("chunked-prefill-ab", ["trials={min: 2, max: 4}",
                                                       "compare.cells=[ttft.p50]"])
    run_dir = tmp_path / "exp"
    run_dir.mkdir()
    (run_dir / SCENARIO_FILE).write_text(yaml.safe_dump(scenario.to_yaml_dict()))
    return scenario, run_dir


def test_an_interrupted_experiment_resumes_in_its_round_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut in round 2: stopping.json says interrupted after 1 round, the report is invalid
    (exit 4); --resume keeps round 1, runs the cut trial again and goes on in the same order
    until the design stops it."""
    scenario, run_dir = _sequential_experiment(tmp_path)
    names = list(scenario.variants)
    ran = _fake_trials(monkeypatch, {names[0]: 0.05, names[1]: 0.20}, interrupt_at=3)
    said: list[str] = []
    outcome = experiment_runner._Rounds(scenario, resolve_variants(scenario), run_dir,
                                        said.append).run()
    assert int(outcome.exit_code) == 4
    assert ran == [f"001-{names[0]}-1", f"002-{names[1]}-1", f"003-{names[1]}-2"]
    stopping = json.loads((run_dir / STOPPING_FILE).read_text())
    assert (stopping["reason"], stopping["rounds"], stopping["looks"]) == ("interrupted", 1, 0)
    assert any("vllm-slo run --resume" in line for line in said)
    # the stored reason is whole on one line (was cut to "...; continue with" at its newline)
    assert stopping["detail"] == f"no further rounds; continue with vllm-slo run --resume {run_dir}"

    ran = _fake_trials(monkeypatch, {names[0]: 0.05, names[1]: 0.20}, interrupt_at=None)
    said.clear()
    resumed = experiment_runner.resume_experiment(run_dir, said.append)
    assert ran[:2] == [f"003-{names[1]}-2", f"004-{names[0]}-2"]  # the cut trial again, on
    assert any("trial 1/8" in line and "done before, kept" in line for line in said)
    summary = _summary(resumed)
    assert summary["stopping"]["looks"] == 1
    decision = summary["comparisons"][0]["cells"][0]["decision"]
    assert decision["decision"] == "changed"  # TTFT ×4: decided at the first look (2 rounds)
    assert summary["stopping"] == {**summary["stopping"], "reason": "decided", "rounds": 2}
    assert sorted(p.name for p in (run_dir / TRIALS_DIR).iterdir()) == [
        f"001-{names[0]}-1", f"002-{names[1]}-1", f"003-{names[1]}-2", f"004-{names[0]}-2"]


def _experiment_folder(tmp_path: Path, overrides: list[str]) -> tuple[Path, object]:
    import yaml

    from vllm_slo.run_folder.run_files import SCENARIO_FILE

    scenario, _ = load_scenario("chunked-prefill-ab", ["compare.cells=[ttft.p50]", *overrides])
    run_dir = tmp_path / "exp"
    run_dir.mkdir()
    (run_dir / SCENARIO_FILE).write_text(yaml.safe_dump(scenario.to_yaml_dict()))
    return run_dir, scenario


def test_the_budget_stops_the_rounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget one round already exceeds: no second round, whatever the design's min."""
    from vllm_slo.scenarios.loader import resolve_variants

    run_dir, scenario = _experiment_folder(tmp_path, ["trials={min: 2, max: 4, budget: 1ms}"])
    names = list(scenario.variants)  # type: ignore[attr-defined]
    ran = _fake_trials(monkeypatch, {names[0]: 0.05, names[1]: 0.05}, interrupt_at=None)
    outcome = experiment_runner._Rounds(scenario, resolve_variants(scenario), run_dir,
                                        lambda line: None).run()
    assert len(ran) == 2
    stopping = _summary(outcome)["stopping"]
    assert (stopping["reason"], stopping["rounds"], stopping["looks"]) == ("budget", 1, 0)
    assert "another round" in stopping["detail"]


def test_a_fixed_count_looks_once_at_its_end(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """trials: 3 runs 3 rounds whatever the data (a ×4 TTFT), then one look: max_trials, the
    cell changed."""
    from vllm_slo.scenarios.loader import resolve_variants

    run_dir, scenario = _experiment_folder(tmp_path, ["trials=3"])
    names = list(scenario.variants)  # type: ignore[attr-defined]
    ran = _fake_trials(monkeypatch, {names[0]: 0.05, names[1]: 0.20}, interrupt_at=None)
    said: list[str] = []
    outcome = experiment_runner._Rounds(scenario, resolve_variants(scenario), run_dir,
                                        said.append).run()
    assert len(ran) == 6
    summary = _summary(outcome)
    assert (summary["stopping"]["reason"], summary["stopping"]["looks"]) == ("max_trials", 1)
    assert summary["comparisons"][0]["cells"][0]["decision"]["decision"] == "changed"
    assert sum(1 for line in said if line.startswith("look ")) == 1


def test_junit_and_markdown_judge_an_experiments_cells_by_its_decisions(tmp_path: Path
                                                                         ) -> None:
    """junit.xml and summary.md read the design's decision, not the table's last-look p (not
    valid under optional stopping): a 2x TTFT decided `changed` is a regression failure whose
    message is the decision, and every other cell's state is its decision word."""
    import xml.etree.ElementTree as ET
    run = _decided_experiment(tmp_path)
    rendered = render_experiment(run)
    decisions = {c["cell"]: c["decision"]["decision"]
                 for c in rendered.summary["comparisons"][0]["cells"]}
    root = ET.parse(run / "junit.xml").getroot()
    cases = {case.get("name"): case for case in root.iter("testcase")}
    ttft = cases["b vs a: ttft.p50"]
    failure = ttft.find("failure")
    assert failure is not None and failure.get("type") == "significant regression"
    assert failure.get("message", "").startswith("regression: changed ×2")
    for cell, word in decisions.items():
        state = cases[f"b vs a: {cell}"].find("properties/property[@name='change']")
        assert state is not None
        expected = {"changed": ("regression", "improvement")}.get(word, (word,))
        assert state.get("value") in expected
        skipped = cases[f"b vs a: {cell}"].find("skipped") is not None
        assert skipped == (word == "undecided")
    markdown = (run / "summary.md").read_text()
    assert re.search(r"\| ttft\.p50 \| changed ×2[^|]*\| \*\*regression\*\* \|", markdown)


def test_replayed_rounds_are_not_judged_against_the_budget() -> None:
    """trials {min 3, max 6, budget 15m}: 3 rounds in 540 s, cut in round 4 at 600 s. The
    resumed session replays rounds 1-3 (the earlier session went on after each): no budget
    stop at replayed round 1 (600 s over 1 round); from round 3 on the budget is judged, the
    average round its recorded time over the rounds done."""
    design = SequentialDesign(min_trials=3, max_trials=6, alpha=0.05, effect=0.1, cells=1)
    undecided = [_decision("undecided")]
    assert next_action([], 1, design, 6, 600.1, 900.0).reason == "budget"  # a fresh run
    assert not next_action([], 1, design, 6, 600.1, 900.0, rounds_kept=3).stop
    assert not next_action([], 2, design, 6, 600.1, 900.0, rounds_kept=3).stop
    assert not next_action(undecided, 3, design, 6, 600.1, 900.0, rounds_kept=3).stop  # 800
    late = next_action(undecided, 3, design, 6, 720.0, 900.0, rounds_kept=3)  # 720 + 240
    assert (late.stop, late.reason) == (True, "budget")
    assert next_action(undecided, 4, design, 6, 780.0, 900.0, rounds_kept=3).reason == \
        "budget"  # 780 + 195 > 900


def test_a_resumed_experiment_with_a_budget_goes_on_past_its_replayed_rounds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case end to end: cut in round 4 (trial 7), its stopping.json saying 600 s
    over 3 rounds; --resume runs trial 7 again and goes on (was: stopped at replayed round 1
    for the budget, 1 round recorded while 3 were on disk)."""
    from vllm_slo.scenarios.loader import resolve_variants

    run_dir, scenario = _experiment_folder(tmp_path, ["trials={min: 3, max: 6, budget: 15m}"])
    names = list(scenario.variants)  # type: ignore[attr-defined]
    ttft = {names[0]: 0.050, names[1]: 0.053}
    ran = _fake_trials(monkeypatch, ttft, interrupt_at=7)
    experiment_runner._Rounds(scenario, resolve_variants(scenario), run_dir,
                              lambda line: None).run()
    assert len(ran) == 7  # the first look (round 3) left the cell undecided
    record = json.loads((run_dir / STOPPING_FILE).read_text())
    assert (record["reason"], record["rounds"]) == ("interrupted", 3)
    (run_dir / STOPPING_FILE).write_text(json.dumps({**record, "elapsed_s": 600.1}))

    ran = _fake_trials(monkeypatch, ttft, interrupt_at=None)
    resumed = experiment_runner.resume_experiment(run_dir, lambda line: None)
    stopping = _summary(resumed)["stopping"]
    assert stopping["reason"] != "budget" and stopping["rounds"] >= 4
    assert ran[0] == f"007-{names[1]}-4"  # round 4 runs backward
    assert _summary(resumed)["trials_per_variant"] == stopping["rounds"]
    assert stopping["elapsed_s"] >= 600.1


def _secret_experiment(tmp_path: Path) -> Path:
    """An interrupted experiment folder whose scenario carries an API key and a token, written
    as run_experiment writes it (redacted)."""
    import yaml

    from vllm_slo.redaction import redact_secrets
    from vllm_slo.run_folder.run_files import SCENARIO_FILE

    scenario, _ = load_scenario("chunked-prefill-ab", [
        "compare.cells=[ttft.p50]", "trials=2", "server.args.api-key=sk-live-123",
        "server.env={HF_TOKEN: hf_abc}"])
    run_dir = tmp_path / "exp"
    (run_dir / TRIALS_DIR).mkdir(parents=True)
    (run_dir / SCENARIO_FILE).write_text(
        yaml.safe_dump(redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
    return run_dir


def test_resume_refuses_to_run_with_hidden_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """scenario.yaml holds *** where the credentials were: resuming with it would launch the
    trials with *** as the key. Refused, exit 2, naming each key and how to give it again."""
    run_dir = _secret_experiment(tmp_path)
    ran = _fake_trials(monkeypatch, {"chunked": 0.05, "unchunked": 0.05}, interrupt_at=None)
    assert main(["run", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "server.args.api-key, server.env.HF_TOKEN as ***" in err
    assert (f"vllm-slo run --resume {run_dir} server.args.api-key=VALUE "
            "server.env.HF_TOKEN=VALUE") in err
    assert "api_key_env" in err
    # only the hidden keys may be given on the resume line, and the value is never echoed
    assert main(["run", "--resume", str(run_dir), "server.args.api-key=sk-live-123",
                 "server.env.HF_TOKEN=hf_abc", "traffic.duration=9s"]) == 2
    err = capsys.readouterr().err
    assert "override traffic.duration: a resumed run goes on as it was started" in err
    assert "sk-live-123" not in err
    assert ran == []


def test_a_signal_before_a_trials_own_handling_is_an_interrupted_experiment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM as the claims watchdog sends it, at a trial's start: the KeyboardInterrupt comes
    out of run_trial itself (before its own handling); the experiment still stops as
    interrupted, resumable (it went up to the CLI as 'interrupted before the report')."""
    scenario, run_dir = _sequential_experiment(tmp_path)
    names = list(scenario.variants)
    ran = _fake_trials(monkeypatch, {names[0]: 0.05, names[1]: 0.20}, interrupt_at=None)
    fake = experiment_runner.run_trial

    def run_trial(arm, folder, say):  # type: ignore[no-untyped-def]
        if folder.name.startswith("003-"):
            folder.mkdir(parents=True)  # what run_trial makes before its handling begins
            raise KeyboardInterrupt
        return fake(arm, folder, say)

    monkeypatch.setattr(experiment_runner, "run_trial", run_trial)
    said: list[str] = []
    outcome = experiment_runner._Rounds(scenario, resolve_variants(scenario), run_dir,
                                        said.append).run()
    assert int(outcome.exit_code) == 4
    stopping = json.loads((run_dir / STOPPING_FILE).read_text())
    assert (stopping["reason"], stopping["rounds"]) == ("interrupted", 1)
    assert any("vllm-slo run --resume" in line for line in said)
    assert ran == [f"001-{names[0]}-1", f"002-{names[1]}-1"]


def test_resume_runs_with_the_credentials_given_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = _secret_experiment(tmp_path)
    seen: list[tuple[object, object]] = []
    ran = _fake_trials(monkeypatch, {"chunked": 0.05, "unchunked": 0.20}, interrupt_at=None)
    fake = experiment_runner.run_trial

    def run_trial(arm, folder, say):  # type: ignore[no-untyped-def]
        seen.append((arm.server.args.get("api-key"), arm.server.env.get("HF_TOKEN")))
        return fake(arm, folder, say)

    monkeypatch.setattr(experiment_runner, "run_trial", run_trial)
    assert main(["run", "--resume", str(run_dir), "server.args.api-key=sk-live-123",
                 "server.env.HF_TOKEN=hf_abc"]) in (0, 1, 3)
    assert len(ran) == 4 and set(seen) == {("sk-live-123", "hf_abc")}
    assert "sk-live-123" not in (run_dir / "scenario.yaml").read_text()


@pytest.mark.parametrize(("file", "text", "named"), [
    ("scenario.yaml", "name: [unclosed\n", "scenario.yaml is damaged or unreadable"),
    ("scenario.yaml", "just a string\n", "scenario.yaml is damaged or unreadable"),
    ("scenario.yaml", "name: x\ntraffic: {duration: -3s}\n",
     "scenario.yaml is damaged or unreadable"),
    ("stopping.json", '{"reason": "interrupted", "rou', "stopping.json is damaged or unreadable"),
    ("stopping.json", '{"reason": "interrupted"}', "stopping.json is damaged or unreadable"),
    ("stopping.json", json.dumps({"reason": "bored", "rounds": 1, "looks": 0, "min_trials": 2,
                                  "max_trials": 4, "budget_s": None, "elapsed_s": 1.0}),
     "stopping.json is damaged or unreadable"),
])
def test_a_damaged_folder_file_on_resume_is_a_usage_error_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
        file: str, text: str, named: str) -> None:
    run_dir, _ = _experiment_folder(tmp_path, ["trials={min: 2, max: 4}"])
    (run_dir / TRIALS_DIR).mkdir()
    (run_dir / file).write_text(text)
    ran = _fake_trials(monkeypatch, {"chunked": 0.05, "unchunked": 0.05}, interrupt_at=None)
    assert main(["run", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"{run_dir / file}" in err and named in err and "internal error" not in err
    assert ran == []


def test_a_trial_whose_summary_is_unreadable_runs_again_on_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cut in round 2; round 1's first trial's summary.json is then truncated: --resume runs
    that trial again (saying why), keeps the second, and goes on."""
    from vllm_slo.scenarios.loader import resolve_variants

    run_dir, scenario = _experiment_folder(tmp_path, ["trials={min: 2, max: 4}"])
    names = list(scenario.variants)  # type: ignore[attr-defined]
    ttft = {names[0]: 0.05, names[1]: 0.20}
    _fake_trials(monkeypatch, ttft, interrupt_at=3)
    experiment_runner._Rounds(scenario, resolve_variants(scenario), run_dir,
                              lambda line: None).run()
    damaged = run_dir / TRIALS_DIR / f"001-{names[0]}-1" / "summary.json"
    damaged.write_text(damaged.read_text()[:40])
    ran = _fake_trials(monkeypatch, ttft, interrupt_at=None)
    said: list[str] = []
    resumed = experiment_runner.resume_experiment(run_dir, said.append)
    assert ran[:3] == [f"001-{names[0]}-1", f"003-{names[1]}-2", f"004-{names[0]}-2"]
    assert any(f"{damaged} is damaged or unreadable" in line and "runs again" in line
               for line in said)
    assert _summary(resumed)["stopping"]["reason"] == "decided"
