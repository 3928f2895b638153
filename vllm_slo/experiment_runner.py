"""Trials and variants: repeated, interleaved runs, each on a fresh server instance.

The unit of comparison is the trial (DESIGN "Statistics"): a restart moves latency as much as
a config change, so every trial starts its own server and variants interleave in a balanced
order (A B B A ...), all with the same seed and therefore identical prompt sequences.

    runs/<stamp>-<name>/scenario.yaml              the scenario as given (variants, trials)
    runs/<stamp>-<name>/trials/<NNN>-<variant>-<k>/ one complete run folder per trial
    runs/<stamp>-<name>/summary.json|report.html   across trials and variants
"""

from __future__ import annotations

from pathlib import Path

import yaml

from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.reports.redaction import redact_secrets
from vllm_slo.reports.run_report import INTERRUPTED_REASON
from vllm_slo.runner import (
    Printer,
    RunOutcome,
    check_before_run,
    new_run_dir,
    platform_of,
    run_scenario,
    run_trial,
)
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.scenarios.loader import resolve_variants
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.run_files import SCENARIO_FILE, TRIALS_DIR
from vllm_slo.servers.vllm_args import validate_server_args
from vllm_slo.side_by_side import PlacedTrial, place, run_round


def trial_order(variant_names: list[str], trials: int) -> list[tuple[str, int]]:
    """Balanced interleaving: round r runs the variants forward when r is even, backward when
    odd (A B, B A, A B, ...), so drift over time hits every variant alike.
    Returns (variant, trial number from 1) in execution order."""
    order: list[tuple[str, int]] = []
    for round_index in range(trials):
        names = variant_names if round_index % 2 == 0 else list(reversed(variant_names))
        order.extend((name, round_index + 1) for name in names)
    return order


def trial_folder_name(position: int, variant: str, trial: int) -> str:
    return f"{position:03d}-{variant or 'run'}-{trial}"


def run_experiment(scenario: Scenario, runs_root: Path, say: Printer = print) -> RunOutcome:
    arms = resolve_variants(scenario)
    if scenario.max_trials == 1 and list(arms) == [""]:
        return run_scenario(scenario, runs_root, say)
    check_before_run(scenario, runs_root)  # usage errors before a folder or a server exists
    # every arm's server args through vLLM's parser before the first trial starts a server
    validate_server_args([(name, arm.server) for name, arm in arms.items()],
                         platform_of(scenario.server))
    run_dir = new_run_dir(runs_root, scenario.name)
    (run_dir / SCENARIO_FILE).write_text(
        yaml.safe_dump(redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
    order = trial_order(list(arms), scenario.max_trials)
    sequence = " ".join(f"{name or 'run'}#{k}" for name, k in order)
    say(f"experiment: {len(arms)} variant(s) × {scenario.max_trials} trial(s), order {sequence}")
    if scenario.side_by_side is not None:
        interrupted = _run_side_by_side(scenario, arms, order, run_dir, say)
        rendered = render_experiment(run_dir, interrupted=interrupted)
        return RunOutcome(run_dir, ExitCode(rendered.summary["exit_code"]), rendered)
    interrupted = False
    for position, (name, trial) in enumerate(order, start=1):
        trial_dir = run_dir / TRIALS_DIR / trial_folder_name(position, name, trial)
        say(f"\n=== trial {position}/{len(order)}: {name or 'run'} #{trial} ===")
        _, rendered = run_trial(arms[name], trial_dir, say)
        if INTERRUPTED_REASON in rendered.summary["invalid_reasons"]:
            interrupted = True
            say("interrupted: no further trials")
            break
    rendered = render_experiment(run_dir, interrupted=interrupted)
    return RunOutcome(run_dir, ExitCode(rendered.summary["exit_code"]), rendered)


def _run_side_by_side(scenario: Scenario, arms: dict[str, Scenario],
                      order: list[tuple[str, int]], run_dir: Path, say: Printer) -> bool:
    """Round by round, every variant at once on its rotating device slot; True when
    interrupted."""
    spec = scenario.side_by_side
    assert spec is not None
    names = list(arms)
    for round_index in range(scenario.max_trials):
        start = round_index * len(names)
        placed = []
        for position, (name, trial) in enumerate(order[start:start + len(names)],
                                                 start=start + 1):
            devices = spec.slot_of(names.index(name), round_index)
            placed.append(PlacedTrial(f"{name} #{trial} on {','.join(map(str, devices))}",
                                      place(arms[name], devices),
                                      run_dir / TRIALS_DIR / trial_folder_name(
                                          position, name, trial)))
        say(f"\n=== round {round_index + 1}/{scenario.max_trials}, side by side: "
            + "; ".join(trial.label for trial in placed) + " ===")
        results, stopped = run_round(placed, say)
        if stopped or any(INTERRUPTED_REASON in rendered.summary["invalid_reasons"]
                          for _, rendered in results):
            say("interrupted: no further rounds")
            return True
    return False
