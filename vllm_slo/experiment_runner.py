"""Trials and variants: repeated, interleaved runs, each on a fresh server instance.

The unit of comparison is the trial (docs/statistics.md): a restart moves latency as much as
a config change, so every trial starts its own server and variants interleave in a balanced
order (A B B A ...), all with the same seed and therefore identical prompt sequences.

    runs/<stamp>-<name>/scenario.yaml              the scenario as given (variants, trials)
    runs/<stamp>-<name>/trials/<NNN>-<variant>-<k>/ one complete run folder per trial
    runs/<stamp>-<name>/stopping.json              rounds run, looks, why they ended
    runs/<stamp>-<name>/summary.json|report.html   across trials and variants

A sequential design (`trials: {min, max, budget}`) stops once every compared cell is decided
(vllm_slo/stats/sequential.py); `vllm-slo run --resume RUN_DIR` continues an interrupted
experiment in its round order, keeping its complete trials.
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from vllm_slo.analysis.experiment_design import (
    DEFAULT_STARTUP_S,
    NextAction,
    Stopping,
    design_check,
    look_decisions,
    looks_taken,
    next_action,
    refusal_line,
    sequential_design,
    time_estimate,
    trial_order,
)
from vllm_slo.analysis.experiment_summary import DecisionEntry, groups_by_variant
from vllm_slo.outcome import Outcome, run_reported
from vllm_slo.preflight import Printer, check_before_run, platform_of
from vllm_slo.redaction import redact_secrets
from vllm_slo.reports.experiment_report import read_stopping, render_experiment
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.reports.trial_folders import collect_trials, resumable_scenario, trial_complete
from vllm_slo.run_folder.file_writes import new_run_dir, write_atomic
from vllm_slo.run_folder.provenance import Provenance
from vllm_slo.run_folder.run_files import (
    SCENARIO_FILE,
    STOPPING_FILE,
    TRIALS_DIR,
    trial_folder_name,
)
from vllm_slo.runner import run_scenario, run_trial
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import (
    resolve_variants,
)
from vllm_slo.scenarios.model import Scenario
from vllm_slo.serialise import to_json
from vllm_slo.servers.vllm_args import validate_server_args
from vllm_slo.side_by_side import PlacedTrial, place, run_round
from vllm_slo.stats.sequential import CellDecision


def run_experiment(scenario: Scenario, runs_root: Path, say: Printer = print,
                   force: bool = False) -> Outcome:
    """A new experiment folder for the scenario: the design checked (an experiment that can
    never decide is refused, ScenarioError, no folder, unless `force`), the expected server
    time printed with the plan, then its rounds until the design stops them."""
    arms = resolve_variants(scenario)
    if scenario.max_trials == 1 and list(arms) == [""]:
        return run_scenario(scenario, runs_root, say)
    check = design_check(scenario)
    if check is not None and not check.can_decide:
        if not force:
            raise ScenarioError(refusal_line(scenario, check))
        say(f"warning: --force: {refusal_line(scenario, check)}")
    check_before_run(scenario, runs_root)  # usage errors before a folder or a server exists
    # every arm's server args through vLLM's parser before the first trial starts a server
    validate_server_args([(name, arm.server) for name, arm in arms.items()],
                         platform_of(scenario.server))
    estimate = time_estimate(scenario, *startup_estimate(runs_root, scenario))
    run_dir = new_run_dir(runs_root, scenario.name)
    write_atomic(run_dir / SCENARIO_FILE,
                 yaml.safe_dump(redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
    order = trial_order(list(arms), scenario.max_trials)
    sequence = " ".join(f"{name or 'run'}#{k}" for name, k in order)
    trials = scenario.trials
    counts = (f"{trials.max} trial(s)" if not trials.sequential
              else f"{trials.min}-{trials.max} trials (sequential: stops once every compared "
                   f"cell is decided)")
    say(f"experiment: {len(arms)} variant(s) × {counts}, order {sequence}"
        + (f", budget {trials.budget_s:g} s" if trials.budget_s is not None else ""))
    say(estimate.line())
    return _Rounds(scenario, arms, run_dir, say).run()


def resume_experiment(run_dir: Path, say: Printer = print,
                      overrides: Sequence[str] = ()) -> Outcome:
    """Continue an interrupted experiment from its folder: its complete trials are kept, a
    trial cut short (or whose summary.json is unreadable) runs again, the round order goes on
    where it stopped (the looks so far are replayed from the trials on disk: they are a pure
    function of them). `overrides` give again the secrets its scenario.yaml hides
    (`resumable_scenario`)."""
    if not (run_dir / SCENARIO_FILE).is_file() or not (run_dir / TRIALS_DIR).is_dir():
        raise ScenarioError(f"{run_dir} is not an experiment folder (no {SCENARIO_FILE} and "
                            f"{TRIALS_DIR}/); start one with vllm-slo run scenario=NAME")
    stopping = read_stopping(run_dir)
    if stopping is not None and stopping.reason != "interrupted":
        say(f"{run_dir}: {stopping.text}; nothing to resume")
        return _reported(run_dir, render_experiment(run_dir))
    scenario = resumable_scenario(run_dir / SCENARIO_FILE, overrides,
                                  f"vllm-slo run --resume {run_dir}")
    say(f"resuming experiment {run_dir}")
    return _Rounds(scenario, resolve_variants(scenario), run_dir.resolve(), say).run()


def startup_estimate(runs_root: Path, scenario: Scenario) -> tuple[float, str]:
    """A launched server's start-up for the time estimate: the median ready time recorded by
    the newest earlier run folder of this scenario under `runs_root` (its trials' provenance),
    else DEFAULT_STARTUP_S of the platform."""
    pattern = re.compile(rf"\d{{8}}T\d{{6}}Z-{re.escape(scenario.name)}(-\d+)?")
    root = runs_root.resolve()
    folders = sorted((f for f in root.iterdir() if f.is_dir() and pattern.fullmatch(f.name)),
                     reverse=True) if root.is_dir() else []
    for folder in folders:
        ready = []
        for candidate in [folder, *sorted((folder / TRIALS_DIR).glob("*"))]:
            try:
                value = Provenance.read(candidate).server_ready_after_s
            except (OSError, ValueError):
                continue
            if value is not None:
                ready.append(value)
        if ready:
            return float(statistics.median(ready)), f"median of {len(ready)} in {folder.name}"
    platform = platform_of(scenario.server)
    default = DEFAULT_STARTUP_S.get(platform, DEFAULT_STARTUP_S["gpu"])
    return default, f"default for {platform}: no earlier run of {scenario.name} measured one"


def _reported(run_dir: Path, rendered: RenderedRun) -> Outcome:
    return run_reported(run_dir, rendered.exit_code, rendered.text, rendered.report_path,
                        rendered.slo_count)


class _Rounds:
    """An experiment folder's interleaved rounds, run (or kept from before: resume) one at a
    time; after each, from trials.min on, a look at the compared cells decides whether another
    round runs (vllm_slo.analysis.experiment_design.next_action)."""

    def __init__(self, scenario: Scenario, arms: dict[str, Scenario], run_dir: Path,
                 say: Printer):
        self.scenario, self.arms, self.run_dir, self.say = scenario, arms, run_dir, say
        self.names = list(arms)
        self.order = trial_order(self.names, scenario.max_trials)
        self.design = sequential_design(scenario)
        before = read_stopping(run_dir)  # resume: what the earlier sessions ran and took
        self.elapsed_before_s = 0.0 if before is None else before.elapsed_s
        self.rounds_before = 0 if before is None else before.rounds

    def folder(self, position: int) -> Path:
        name, trial = self.order[position - 1]
        return self.run_dir / TRIALS_DIR / trial_folder_name(position, name, trial)

    def run(self) -> Outcome:
        started = time.monotonic()
        budget_s = self.scenario.trials.budget_s
        action = NextAction.another("")
        rounds = 0
        for round_index in range(self.scenario.max_trials):
            first = round_index * len(self.names) + 1
            positions = list(range(first, first + len(self.names)))
            interrupted = (self._side_by_side_round(round_index, positions)
                           if self.scenario.side_by_side is not None
                           else self._sequential_round(positions))
            elapsed_s = self.elapsed_before_s + time.monotonic() - started
            if interrupted:
                resume = f"vllm-slo run --resume {self.run_dir}"
                action = NextAction(True, "interrupted",
                                    f"no further rounds; continue with {resume}")
                self.say(f"interrupted: no further rounds; continue with\n  {resume}")
                break
            rounds = round_index + 1
            decisions = self._look(rounds)
            # the budget is judged before the rounds this session starts, not after each
            # replayed one (the earlier session did; its time over 1 round would stop it)
            action = next_action(decisions, rounds, self.design, self.scenario.max_trials,
                                 elapsed_s, budget_s, rounds_kept=self.rounds_before)
            self._write(action, rounds, elapsed_s)
            if action.stop:
                self.say(f"stop after round {rounds}: {action.reason} ({action.detail})")
                break
        stopping = self._write(action, rounds, self.elapsed_before_s + time.monotonic() - started)
        return _reported(self.run_dir, render_experiment(
            self.run_dir, interrupted=stopping.reason == "interrupted"))

    def _write(self, action: NextAction, rounds: int, elapsed_s: float) -> Stopping:
        """stopping.json: final when the action stops, `interrupted` (resumable) until then;
        until then it keeps the rounds an earlier session recorded (replayed first, they are
        on disk: a resume cut short during them must not count its time over fewer rounds)."""
        trials = self.scenario.trials
        reason = action.reason if action.stop and action.reason else "interrupted"
        if reason == "interrupted":
            rounds = max(rounds, self.rounds_before)
        stopping = Stopping(reason=reason, rounds=rounds, looks=looks_taken(rounds, trials.min),
                            min_trials=trials.min, max_trials=trials.max,
                            budget_s=trials.budget_s, elapsed_s=round(elapsed_s, 3),
                            detail=action.detail.split("\n")[0] if action.stop else "")
        write_atomic(self.run_dir / STOPPING_FILE, json.dumps(to_json(stopping), indent=2) + "\n")
        return stopping

    def _look(self, rounds: int) -> list[CellDecision]:
        """The compared cells' decisions after `rounds` rounds (none before trials.min or
        without a comparison), one line each on the terminal."""
        design = self.design
        if design is None or rounds < design.min_trials:
            return []
        groups = groups_by_variant(collect_trials(self.run_dir), self.names)
        cells = self.scenario.compare.cells
        decided = look_decisions(design, groups, cells, rounds)
        self.say(f"look {looks_taken(rounds, design.min_trials)} after round {rounds} "
                 f"({rounds} trials per variant, {design.test}):")
        for label, decisions in decided:
            for decision in decisions:
                entry = DecisionEntry.of(decision, design.test, rounds, design.effect)
                self.say(f"  {label} vs {groups[0].label}: {decision.cell}: {entry.text}")
        return [decision for _, decisions in decided for decision in decisions]

    def _sequential_round(self, positions: list[int]) -> bool:
        """The round's trials one after another; True when one was interrupted."""
        for position in positions:
            name, trial = self.order[position - 1]
            folder = self.folder(position)
            label = f"trial {position}/{len(self.order)}: {name or 'run'} #{trial}"
            if trial_complete(folder, self.say):
                self.say(f"{label}: done before, kept")
                continue
            if folder.exists():  # cut short: run it again from the start
                shutil.rmtree(folder)
            self.say(f"\n=== {label} ===")
            try:
                _, rendered = run_trial(self.arms[name], folder, self.say)
            except KeyboardInterrupt:  # a signal before the trial's own handling began
                return True
            if rendered.interrupted:
                return True
        return False

    def _side_by_side_round(self, round_index: int, positions: list[int]) -> bool:
        """Every variant at once on its rotating device slot; True when interrupted. A round
        kept from before is kept whole; one cut short runs again whole (its trials belong
        together)."""
        spec = self.scenario.side_by_side
        assert spec is not None
        if all([trial_complete(self.folder(p), self.say) for p in positions]):
            self.say(f"round {round_index + 1}: done before, kept")
            return False
        placed = []
        for position in positions:
            name, trial = self.order[position - 1]
            folder = self.folder(position)
            if folder.exists():
                shutil.rmtree(folder)
            devices = spec.slot_of(self.names.index(name), round_index)
            placed.append(PlacedTrial(f"{name} #{trial} on {','.join(map(str, devices))}",
                                      place(self.arms[name], devices), folder))
        self.say(f"\n=== round {round_index + 1}/{self.scenario.max_trials}, side by side: "
                 + "; ".join(trial.label for trial in placed) + " ===")
        results, stopped = run_round(placed, self.say)
        return stopped or any(rendered.interrupted for _, rendered in results)
