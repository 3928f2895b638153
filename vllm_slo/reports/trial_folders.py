"""Trials read from run folders: a single run is one trial; an experiment folder holds one run
folder per trial (`trials/NNN-<variant>-<k>/`). The values they become: `analysis.trials`."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from vllm_slo.reports.analysis.run_metrics import run_series, series_by_profile
from vllm_slo.reports.analysis.trials import Trial, TrialOutcome
from vllm_slo.reports.redaction import redact_secrets
from vllm_slo.reports.samples import load_samples
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.provenance import Provenance
from vllm_slo.scenarios.run_files import SCENARIO_FILE, SUMMARY_FILE, TRIALS_DIR


def load_trial(run_dir: Path, variant: str = "", position: int = 1) -> Trial:
    scenario = Scenario.model_validate(yaml.safe_load((run_dir / SCENARIO_FILE).read_text()))
    provenance = Provenance.read(run_dir).to_json_dict()
    outcome = TrialOutcome.from_json_dict(json.loads((run_dir / SUMMARY_FILE).read_text()))
    table = load_samples(run_dir)
    window_s = scenario.traffic.duration_s
    return Trial(variant, position, run_dir, scenario, redact_secrets(provenance), outcome,
                 run_series(table, window_s),
                 series_by_profile(table, window_s, scenario.traffic.profile == "mix"))


def is_experiment(run_dir: Path) -> bool:
    return (run_dir / TRIALS_DIR).is_dir()


def trial_folders(run_dir: Path) -> list[tuple[Path, str, int]]:
    """(folder, variant, position) for each trial folder `NNN-<variant>-<k>` in order."""
    folders = []
    for folder in sorted((run_dir / TRIALS_DIR).iterdir()):
        if not (folder / SUMMARY_FILE).is_file():
            continue
        position_text, rest = folder.name.split("-", 1)
        variant = rest.rsplit("-", 1)[0]
        folders.append((folder, "" if variant == "run" else variant, int(position_text)))
    return folders


def collect_trials(run_dir: Path) -> list[Trial]:
    if is_experiment(run_dir):
        return [load_trial(folder, variant, position)
                for folder, variant, position in trial_folders(run_dir)]
    return [load_trial(run_dir)]
