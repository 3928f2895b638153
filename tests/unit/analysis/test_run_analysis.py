"""analyse_run from in-memory contents: no run folder, no parquet file. Why a run is invalid,
its exit code and the reasons' order, from what its status said; and the folder path
(`load_run`) gives the very document the in-memory path gives."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.synthetic import (
    scenario_document,
    synthetic_provenance,
    synthetic_server_records,
    synthetic_table,
    write_run_folder,
)
from vllm_slo.analysis.run_analysis import RunFolderContents, analyse_run
from vllm_slo.analysis.verdicts import INTERRUPTED_REASON, UNFINISHED_REASON
from vllm_slo.reports.run_folder_read import read_run_folder
from vllm_slo.reports.run_report import load_run
from vllm_slo.run_folder.run_status import RunStatus
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.scenarios.model import Scenario
from vllm_slo.serialise import to_json

DURATION_S, WARMUP_S = 60.0, 5.0
# loose enough that the synthetic rows (TTFT ~80 ms, 0.5% failures) pass: exit 0 when valid
LOOSE_SLO = {"ttft": ["p95 < 5s"], "error_rate": "< 50%"}
DAMAGE = "run_status.json is damaged (ValueError: bad json): how the run ended is unknown"


@pytest.fixture(scope="module")
def table() -> pa.Table:
    return synthetic_table(300, chunks=8, warmup_s=WARMUP_S, duration_s=DURATION_S, seed=1)


@pytest.fixture(scope="module")
def scenario_doc() -> dict:
    return scenario_document("in-memory", duration_s=DURATION_S, warmup_s=WARMUP_S,
                             slo=LOOSE_SLO)


@pytest.fixture(scope="module")
def contents(table: pa.Table, scenario_doc: dict) -> RunFolderContents:
    """A finished, healthy run as its folder would be read, built in memory."""
    return RunFolderContents(
        run_id="in-memory", scenario=Scenario.model_validate(scenario_doc),
        status=RunStatus(), status_damage=None, table=table, samples_warning=None,
        samples_file_exists=True, provenance=synthetic_provenance(), provenance_damage=None,
        client_records=(), client_cpu_fractions=(), server_records=())


def test_a_healthy_run_is_valid_and_passes(contents: RunFolderContents,
                                            table: pa.Table) -> None:
    document = analyse_run(contents).document
    assert document.invalid_reasons == ()
    assert document.exit_code == ExitCode.PASS
    assert document.run_id == "in-memory"
    measured = table.column("phase").to_pylist().count("measure")
    assert document.requests.measured == measured > 0


@pytest.mark.parametrize(("status", "reasons"), [
    (RunStatus(interrupted=True), (INTERRUPTED_REASON,)),
    (RunStatus(server_failure="EngineCore died\nTraceback (most recent call last): ..."),
     ("server failed during the run: EngineCore died",)),
    (RunStatus(aborted="ttft p99 over 2s for 10s"),
     ("aborted by abort_on: ttft p99 over 2s for 10s",)),
    (RunStatus(load_generator_failure="locust exited with code 1"),
     ("load generator failed: locust exited with code 1",)),
], ids=["interrupted", "server-failure", "aborted", "load-generator-failure"])
def test_what_the_status_says_makes_the_run_invalid(contents: RunFolderContents,
                                                    status: RunStatus,
                                                    reasons: tuple[str, ...]) -> None:
    document = analyse_run(dataclasses.replace(contents, status=status)).document
    assert document.invalid_reasons == reasons
    assert document.exit_code == ExitCode.INVALID_MEASUREMENT


def test_the_status_reasons_keep_their_order(contents: RunFolderContents) -> None:
    status = RunStatus(server_failure="gone", load_generator_failure="locust died",
                       aborted="error_rate over 50%", interrupted=True)
    document = analyse_run(dataclasses.replace(contents, status=status)).document
    assert document.invalid_reasons == (
        "server failed during the run: gone", "load generator failed: locust died",
        "aborted by abort_on: error_rate over 50%", INTERRUPTED_REASON)
    assert document.exit_code == ExitCode.INVALID_MEASUREMENT


def test_a_damaged_status_is_invalid_and_not_also_unfinished(
        contents: RunFolderContents) -> None:
    damaged = dataclasses.replace(contents, status=None, status_damage=DAMAGE,
                                  samples_file_exists=False)
    document = analyse_run(damaged).document
    assert document.invalid_reasons == (DAMAGE,)
    assert document.exit_code == ExitCode.INVALID_MEASUREMENT


def test_no_status_nor_samples_file_is_an_unfinished_run(contents: RunFolderContents) -> None:
    unfinished = dataclasses.replace(contents, status=None, samples_file_exists=False)
    assert analyse_run(unfinished).document.invalid_reasons == (UNFINISHED_REASON,)
    # either file on disk says the runner got to its end: no status alone is no reason
    consolidated = dataclasses.replace(contents, status=None, samples_file_exists=True)
    assert analyse_run(consolidated).document.invalid_reasons == ()


def test_read_notes_and_status_warnings_are_warnings_in_order(
        contents: RunFolderContents) -> None:
    noted = dataclasses.replace(
        contents, status=RunStatus(warnings=["the server log was cut"]),
        samples_warning="samples.parquet is damaged (...); rows read from the streams",
        provenance_damage="provenance.json is damaged (...); provenance left out")
    document = analyse_run(noted).document
    notes = ("the server log was cut",
             "samples.parquet is damaged (...); rows read from the streams",
             "provenance.json is damaged (...); provenance left out")
    assert [w for w in document.warnings if w in notes] == list(notes)
    assert len(document.warnings) == len(analyse_run(contents).document.warnings) + 3
    assert document.invalid_reasons == ()  # a note, not a reason


def test_a_run_without_successes_is_invalid(contents: RunFolderContents,
                                            table: pa.Table) -> None:
    failed = table.set_column(table.schema.get_field_index("ok"), "ok",
                              pa.array([False] * table.num_rows))
    document = analyse_run(dataclasses.replace(contents, table=failed)).document
    assert "no successful request in the measured window" in document.invalid_reasons
    assert document.exit_code == ExitCode.INVALID_MEASUREMENT


def test_load_run_is_analyse_run_of_read_run_folder(tmp_path: Path, table: pa.Table,
                                                     scenario_doc: dict,
                                                     contents: RunFolderContents) -> None:
    records = synthetic_server_records(WARMUP_S + DURATION_S)
    folder = write_run_folder(tmp_path / "in-memory", table, scenario_doc,
                              server_records=records)
    loaded = load_run(folder)
    split = analyse_run(read_run_folder(folder))
    assert to_json(loaded.document) == to_json(split.document)
    assert loaded.table.equals(split.table) and loaded.server_records == split.server_records
    # and the folder holds nothing the in-memory contents lack: the same document
    in_memory = analyse_run(dataclasses.replace(contents, server_records=tuple(records)))
    assert to_json(in_memory.document) == to_json(loaded.document)
    assert loaded.document.traffic.prefix_cache_hit_rate is not None  # the scrapes were used
