"""One function tells the kinds of folder apart (run_folder/folder_kind.py): `vllm-slo report`
re-renders by it, `compare` and `gate` choose capacity or trial statistics by it."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_slo.run_folder.folder_kind import TRIAL_KINDS, FolderKind, folder_kind


def _make(root: Path, files: list[str]) -> Path:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not name.endswith("/"):
            path.write_text("{}")
    return root


@pytest.mark.parametrize(("files", "kind"), [
    (["scenario.yaml", "summary.json"], FolderKind.RUN),
    ([], FolderKind.RUN),  # nothing recognisable: read as a run (its reader names what lacks)
    (["scenario.yaml", "trials/001-a-1/summary.json"], FolderKind.EXPERIMENT),
    (["tune.yaml", "trials/001-c00-1/summary.json"], FolderKind.TUNE),
    (["tune.yaml"], FolderKind.TUNE),  # a tune (or race) before its first trial
    (["scenario.yaml", "capacity.json"], FolderKind.CAPACITY),
    (["scenario.yaml", "variants/base/capacity.json"], FolderKind.CAPACITY),
    # a capacity race: a tune folder holding capacity folders, once one recorded a step
    (["tune.yaml", "candidates.json", "variants/c00/capacity.json"], FolderKind.CAPACITY),
    (["scenario.yaml", "variants/base/"], FolderKind.RUN),  # no variant recorded a step
])
def test_each_kind_is_told_by_its_files(tmp_path: Path, files: list[str],
                                        kind: FolderKind) -> None:
    assert folder_kind(_make(tmp_path / "f", files)) is kind


def test_trials_are_held_by_experiments_and_tunes_only() -> None:
    assert {FolderKind.EXPERIMENT, FolderKind.TUNE} == TRIAL_KINDS
