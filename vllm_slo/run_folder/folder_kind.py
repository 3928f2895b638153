"""What a folder under runs/ holds, from the files in it: the one place that tells a run
from an experiment, a tune and a capacity search (`vllm-slo report` re-renders by it,
`compare` and `gate` choose capacity or trial statistics by it)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from vllm_slo.run_folder.run_files import (
    CAPACITY_FILE,
    TRIALS_DIR,
    TUNE_SCENARIO_FILE,
    VARIANTS_DIR,
)


class FolderKind(Enum):
    CAPACITY = "capacity"  # capacity.json, or a variant's (a search over variants, a race)
    TUNE = "tune"  # tune.yaml (its trials/ make it an experiment too)
    EXPERIMENT = "experiment"  # trials/: one run folder per trial
    RUN = "run"  # one run (scenario.yaml, samples, summary)


#: kinds whose runs are trials under trials/ (a tune's candidates are an experiment's arms)
TRIAL_KINDS = frozenset({FolderKind.EXPERIMENT, FolderKind.TUNE})


def _holds_capacity(folder: Path) -> bool:
    """A capacity search's folder: its capacity.json, or its variants'."""
    variants = folder / VARIANTS_DIR
    return (folder / CAPACITY_FILE).is_file() or (variants.is_dir() and any(
        (sub / CAPACITY_FILE).is_file() for sub in variants.iterdir()))


def folder_kind(folder: Path) -> FolderKind:
    """The first that applies: capacity, tune, experiment, run. A capacity race is a tune
    folder holding capacity folders: CAPACITY once a candidate's search recorded a step."""
    if _holds_capacity(folder):
        return FolderKind.CAPACITY
    if (folder / TUNE_SCENARIO_FILE).is_file():
        return FolderKind.TUNE
    if (folder / TRIALS_DIR).is_dir():
        return FolderKind.EXPERIMENT
    return FolderKind.RUN
