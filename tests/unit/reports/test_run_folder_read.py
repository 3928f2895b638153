"""read_run_folder: every file of a run folder read back, nothing computed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.synthetic import (
    scenario_document,
    synthetic_provenance,
    synthetic_server_records,
    synthetic_table,
    write_run_folder,
)
from vllm_slo.reports.run_folder_read import read_run_folder
from vllm_slo.run_folder.run_files import PROVENANCE_FILE, SCENARIO_FILE, STATUS_FILE
from vllm_slo.run_folder.run_status import RunStatus
from vllm_slo.run_folder.samples_format import SAMPLES_DIR, SAMPLES_FILE
from vllm_slo.scenarios.errors import ScenarioError


def folder(tmp_path: Path, **written: Any) -> Path:
    table = synthetic_table(40, chunks=4, warmup_s=1.0, duration_s=10.0, seed=3)
    scenario = scenario_document("read-back", duration_s=10.0, warmup_s=1.0)
    return write_run_folder(tmp_path / "run-7", table, scenario, **written)


def test_a_finished_folder_is_read_whole(tmp_path: Path) -> None:
    records = synthetic_server_records(11.0)
    run_dir = folder(tmp_path, server_records=records,
                     status={"interrupted": True, "warnings": ["late"]})
    (run_dir / SAMPLES_DIR / "client-bench-11.jsonl").write_text(
        json.dumps({"unix_s": 1.0, "cpu_fraction": 0.25}) + "\ntorn{\n"
        + json.dumps({"unix_s": 2.0, "cpu_fraction": 0.5}) + "\n")
    contents = read_run_folder(run_dir)
    assert contents.run_id == "run-7"
    assert contents.scenario.name == "read-back"
    assert contents.status == RunStatus(interrupted=True, warnings=["late"])
    assert contents.status_damage is None
    assert contents.table.num_rows == 40 and contents.samples_warning is None
    assert contents.samples_file_exists
    assert contents.provenance == synthetic_provenance() and contents.provenance_damage is None
    assert contents.client_records == ({"unix_s": 1.0, "cpu_fraction": 0.25},
                                       {"unix_s": 2.0, "cpu_fraction": 0.5})
    assert contents.client_cpu_fractions == (0.25, 0.5)
    assert contents.server_records == tuple(records)


def test_damaged_files_are_read_as_notes(tmp_path: Path) -> None:
    run_dir = folder(tmp_path)
    (run_dir / STATUS_FILE).write_text("{not json")
    (run_dir / PROVENANCE_FILE).write_text("[1, 2")
    contents = read_run_folder(run_dir)
    assert contents.status is None
    assert contents.status_damage is not None
    assert contents.status_damage.startswith(f"{STATUS_FILE} is damaged (ValidationError: ")
    assert contents.provenance == {}
    assert contents.provenance_damage is not None
    assert contents.provenance_damage.endswith("; provenance left out")


def test_an_unfinished_folder_has_neither_status_nor_samples_file(tmp_path: Path) -> None:
    run_dir = folder(tmp_path)
    (run_dir / STATUS_FILE).unlink()
    (run_dir / SAMPLES_FILE).unlink()
    contents = read_run_folder(run_dir)
    assert contents.status is None and contents.status_damage is None
    assert not contents.samples_file_exists
    assert contents.table.num_rows == 40  # read from the streams
    assert contents.server_records == () and contents.client_records == ()


def test_a_folder_without_scenario_is_refused(tmp_path: Path) -> None:
    run_dir = folder(tmp_path)
    (run_dir / SCENARIO_FILE).unlink()
    with pytest.raises(ScenarioError, match="is not a vllm-slo run folder"):
        read_run_folder(run_dir)
