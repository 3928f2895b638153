"""run_status.json, how a run ended: one typed model for its writers and its reader."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from vllm_slo.run_folder.run_files import STATUS_FILE
from vllm_slo.run_folder.run_status import RunStatus


def test_the_status_a_run_builds_is_the_status_read_back(tmp_path: Path) -> None:
    status = RunStatus()
    status.warnings.append("prefix cache kept")  # appended to while the run goes on
    status.interrupted = True
    status.server_unreachable = [{"start_s": 3.0, "duration_s": 1.5}]
    status.write(tmp_path)
    assert json.loads((tmp_path / STATUS_FILE).read_text())["warnings"] == ["prefix cache kept"]
    assert RunStatus.read(tmp_path) == status


def test_a_run_that_wrote_no_status_reads_as_none(tmp_path: Path) -> None:
    assert RunStatus.read(tmp_path) is None


def test_a_saved_folders_status_reads_and_a_wrong_type_is_named(tmp_path: Path) -> None:
    (tmp_path / STATUS_FILE).write_text(json.dumps(
        {"server_failure": None, "load_generator_failure": "locust exited 1",
         "interrupted": False, "warnings": [], "written_by_a_newer_suite": 1}))
    assert RunStatus.read(tmp_path) == RunStatus(load_generator_failure="locust exited 1")
    (tmp_path / STATUS_FILE).write_text(json.dumps({"interrupted": "maybe"}))
    with pytest.raises(pydantic.ValidationError, match="interrupted"):
        RunStatus.read(tmp_path)
    with pytest.raises(pydantic.ValidationError, match="aborted"):
        RunStatus().aborted = 3  # type: ignore[assignment]
