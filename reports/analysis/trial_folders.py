"""Per-trial statistics ("cells" such as ttft.p50 or output_throughput.mean) collected from run
folders: a single run is one trial; an experiment folder holds one run folder per trial."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from vllm_slo.reports.analysis.run_metrics import RunSeries, run_series
from vllm_slo.reports.analysis.summary import SloEntry
from vllm_slo.reports.redaction import redact_secrets
from vllm_slo.reports.samples import load_samples
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.run_files import PROVENANCE_FILE, SCENARIO_FILE, SUMMARY_FILE, TRIALS_DIR

THROUGHPUT_CELLS = ("output_throughput.mean", "request_throughput.mean")


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """What an experiment takes from a trial's own summary.json (written when the trial was
    rendered): its exit code, why it is invalid (if it is) and its SLO verdicts."""

    exit_code: int
    invalid_reasons: tuple[str, ...]
    slos: tuple[SloEntry, ...]

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> TrialOutcome:
        return cls(int(data["exit_code"]), tuple(data["invalid_reasons"]),
                   tuple(SloEntry.from_json_dict(s) for s in data["slos"]))


@dataclass(frozen=True, slots=True)
class Trial:
    variant: str  # "" for a scenario without variants
    position: int  # execution order within its experiment (1 for a single run)
    run_dir: Path
    scenario: Scenario
    provenance: dict[str, Any]  # redacted
    outcome: TrialOutcome
    series: RunSeries

    @property
    def valid(self) -> bool:
        return not self.outcome.invalid_reasons

    @property
    def label(self) -> str:
        return self.variant or "run"


def cell_value(series: RunSeries, cell: str) -> float | None:
    """One trial's statistic: the point value (the trial-to-trial spread carries the
    uncertainty), None when the trial has no data for it."""
    metric, statistic = cell.split(".", 1)
    if metric == "output_throughput":
        values = series.output_tokens_per_bin
    elif metric == "request_throughput":
        values = series.completions_per_bin
    elif metric == "error_rate":
        return series.failed / series.requests if series.requests else None
    else:
        values = series.latency(metric)
    if values.size == 0:
        return None
    if statistic == "mean":
        return float(np.mean(values))
    return float(np.quantile(values, float(statistic[1:]) / 100.0))


def lower_is_better(cell: str) -> bool:
    return cell not in THROUGHPUT_CELLS


def load_trial(run_dir: Path, variant: str = "", position: int = 1) -> Trial:
    scenario = Scenario.model_validate(yaml.safe_load((run_dir / SCENARIO_FILE).read_text()))
    provenance_path = run_dir / PROVENANCE_FILE
    provenance = json.loads(provenance_path.read_text()) if provenance_path.is_file() else {}
    outcome = TrialOutcome.from_json_dict(json.loads((run_dir / SUMMARY_FILE).read_text()))
    series = run_series(load_samples(run_dir), scenario.traffic.duration_s)
    return Trial(variant, position, run_dir, scenario, redact_secrets(provenance), outcome,
                 series)


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
