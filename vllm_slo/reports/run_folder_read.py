"""A run folder read back, every file of it and nothing computed: the resolved scenario, the
run status, the sample rows, provenance, the load generator's self-monitoring records and the
/metrics scrapes, as one `RunFolderContents` (the input of `analysis/run_analysis.py`, which
is pure and defines it: analysis imports nothing of reports); `reports/run_report.py` joins
the two (`load_run`).

A damaged samples.parquet is read from the streams and a damaged provenance.json left out
(a note each, kept beside the content); a damaged run_status.json is read as unknown, with the
reason that makes the run invalid; a damaged scenario.yaml is a ScenarioError naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from vllm_slo.analysis.run_analysis import RunFolderContents
from vllm_slo.reports.client_records import read_client_records
from vllm_slo.reports.json_lines import read_json_lines
from vllm_slo.reports.samples import client_cpu_fractions, read_samples
from vllm_slo.run_folder.provenance import Provenance
from vllm_slo.run_folder.run_files import (
    PROVENANCE_FILE,
    SCENARIO_FILE,
    SERVER_METRICS_FILE,
    STATUS_FILE,
)
from vllm_slo.run_folder.run_status import RunStatus
from vllm_slo.run_folder.samples_format import SAMPLES_FILE
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import format_validation_error, read_scenario_document
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.plugins import unregistered_hint


def read_server_metrics(path: Path) -> list[dict[str, Any]]:
    """The /metrics scrapes, one JSON object a line; a torn or foreign line is skipped (the
    recorder may have died mid-write)."""
    return read_json_lines(path)


def _damage(error: BaseException) -> str:
    """The first line of why a file could not be read, short."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200] if lines else ''}"


def read_run_scenario(run_dir: Path) -> Scenario:
    """The run folder's resolved scenario; a missing, unreadable or invalid scenario.yaml is a
    ScenarioError naming it (the SLOs come from it: nothing can be judged without it)."""
    path = run_dir / SCENARIO_FILE
    if not path.is_file():
        raise ScenarioError(f"{run_dir} is not a vllm-slo run folder (no {SCENARIO_FILE})")
    document = read_scenario_document(path)
    if not isinstance(document, dict):
        raise ScenarioError(f"{path}: damaged: expected the scenario's mapping, got "
                            f"{type(document).__name__}")
    try:
        return Scenario.model_validate(document)
    except ValidationError as error:
        hint = unregistered_hint(document)  # a run made with plugins, read without them
        raise ScenarioError(f"{path}: {hint}" if hint
                            else format_validation_error(path, error)) from None


def _read_status(run_dir: Path) -> tuple[RunStatus | None, str | None]:
    """run_status.json, or None when the run never wrote one; a damaged one is read as
    unknown, with the reason that makes the run invalid (it may have said "interrupted")."""
    try:
        return RunStatus.read(run_dir), None
    except (OSError, ValueError) as error:  # pydantic's ValidationError, UnicodeDecodeError
        return None, (f"{STATUS_FILE} is damaged ({_damage(error)}): how the run ended is "
                      "unknown")


def _read_provenance(run_dir: Path) -> tuple[dict[str, Any], str | None]:
    """provenance.json's content; a damaged one is left out of the report, with a warning."""
    try:
        return Provenance.read(run_dir).to_json_dict(), None
    except (OSError, ValueError) as error:
        return {}, f"{PROVENANCE_FILE} is damaged ({_damage(error)}); provenance left out"


def read_run_folder(run_dir: Path) -> RunFolderContents:
    """Every file the analysis needs, read once, in the order the report always read them (the
    scenario first: a folder without one is refused before anything else is read)."""
    scenario = read_run_scenario(run_dir)
    status, status_damage = _read_status(run_dir)
    samples = read_samples(run_dir)
    provenance, provenance_damage = _read_provenance(run_dir)
    return RunFolderContents(
        run_id=run_dir.name, scenario=scenario, status=status, status_damage=status_damage,
        table=samples.table, samples_warning=samples.warning,
        samples_file_exists=(run_dir / SAMPLES_FILE).is_file(),
        provenance=provenance, provenance_damage=provenance_damage,
        client_records=tuple(read_client_records(run_dir)),
        client_cpu_fractions=tuple(client_cpu_fractions(run_dir)),
        server_records=tuple(read_server_metrics(run_dir / SERVER_METRICS_FILE)))
