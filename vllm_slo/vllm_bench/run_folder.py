"""One complete run folder from one `vllm bench serve` result record: scenario.yaml (a trial
scenario describing what vLLM bench did), provenance.json, status.json, the samples and a copy
of the record. Not rendered here.

Absolute times are anchored at `date - duration` (approximate: `date` has no zone and
whole seconds); every interval between requests is the file's own.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import math
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from vllm_slo.redaction import redact_secrets
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.run_folder.file_writes import write_atomic, write_atomic_with
from vllm_slo.run_folder.provenance import Provenance
from vllm_slo.run_folder.run_files import SCENARIO_FILE
from vllm_slo.run_folder.run_status import RunStatus
from vllm_slo.run_folder.samples_format import SAMPLES_FILE
from vllm_slo.scenarios.model import Scenario
from vllm_slo.vllm_bench.records import BenchFileError, BenchRecord, ParsedBench, parse_record
from vllm_slo.vllm_bench.rows import Rows, build_rows

SOURCE = "vllm-bench"
SCENARIO_NAME = "vllm-bench"
SOURCE_COPY = "vllm_bench_result.json"  # the imported record, kept in its run folder
MAX_USERS = 100_000  # the scenario model's bound on users / max_in_flight


def _suite_version() -> str | None:
    try:
        return metadata.version("vllm-slo")
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True, slots=True)
class ImportedRun:
    record: BenchRecord
    label: str | None
    run_dir: Path
    rows: Rows
    rendered: RenderedRun | None = None
    instance: str | None = None


def anchor_unix_s(record: BenchRecord, parsed: ParsedBench) -> tuple[float, str]:
    """Unix time of the first send: the file's `date` (written at the end, local time, whole
    seconds) minus its duration; without a date, the file's modification time."""
    date = parsed.setup.get("date")
    if isinstance(date, str):
        try:
            end = datetime.strptime(date, "%Y%m%d-%H%M%S").timestamp()  # local time
            return end - parsed.duration_s, (
                f"date {date} (the writer's local time, read in this machine's time zone) "
                f"minus duration")
        except ValueError:
            pass
    end = record.path.stat().st_mtime
    return end - parsed.duration_s, "the file's modification time minus duration (no date)"


def _arrival(parsed: ParsedBench) -> dict[str, Any]:
    cap = min(MAX_USERS, parsed.max_concurrency or parsed.n)
    if not parsed.open_loop:
        return {"kind": "closed", "users": cap, "spawn_rate": float(cap), "think_time": 0.0}
    rate = parsed.request_rate
    if not math.isfinite(rate):  # ramp-up: recorded as its mean rate
        rate = parsed.n / parsed.duration_s
    if math.isinf(parsed.burstiness):
        return {"kind": "constant", "rate": rate, "max_in_flight": cap}
    if parsed.burstiness == 1.0:
        return {"kind": "poisson", "rate": rate, "max_in_flight": cap}
    return {"kind": "gamma", "rate": rate, "burstiness": parsed.burstiness,
            "max_in_flight": cap}


def trial_scenario(record: BenchRecord, parsed: ParsedBench, instance: str | None,
                   slo_source: Scenario | None) -> Scenario:
    """A valid single-run scenario describing what vLLM bench did (the profile is the
    model's default: the scenario model has no profile for external traffic)."""
    setup = parsed.setup
    rate = ("inf" if not math.isfinite(parsed.request_rate) else f"{parsed.request_rate:g}")
    description = (
        f"Imported from `vllm bench serve` result {record.path.name}"
        f"{f' (record {record.index})' if record.count > 1 else ''}: backend "
        f"{parsed.backend}, {parsed.n} requests, request rate {rate}, max concurrency "
        f"{parsed.max_concurrency}, date {setup.get('date')}. The traffic profile is a "
        f"placeholder; the workload was vLLM bench's dataset.")
    if slo_source is not None:
        description += f" SLOs and compared cells from scenario {slo_source.name!r}."
    model = setup.get("model_id")
    document: dict[str, Any] = {
        "name": SCENARIO_NAME, "description": description,
        "server": {"model": str(model) if model else "unknown", "instance": instance},
        "traffic": {"endpoint": parsed.endpoint, "arrival": _arrival(parsed),
                    "duration": parsed.duration_s, "warmup": 0.0, "cooldown": 0.0,
                    "prefix_cache": "keep"},
    }
    if slo_source is not None:
        document["slo"] = slo_source.slo.model_dump(mode="json", by_alias=True)
        document["compare"] = slo_source.compare.model_dump(mode="json", by_alias=True)
    return Scenario.model_validate(document)


def _provenance(record: BenchRecord, parsed: ParsedBench, instance: str | None, rows: Rows,
                anchor: tuple[float, str], latency_from: str) -> dict[str, Any]:
    vllm_version = next((str(parsed.metadata[k]) for k in ("vllm_version", "version")
                         if parsed.metadata.get(k)), None)
    return {
        "source": SOURCE,
        "vllm_version": vllm_version, "model_id": parsed.setup.get("model_id"),
        "platform": None, "seed": None,
        "started_utc": datetime.fromtimestamp(anchor[0], timezone.utc).isoformat(),
        "suite_version": _suite_version(),
        "imported_utc": datetime.now(timezone.utc).isoformat(),
        "server_instance": {"kind": "imported", "label": instance},
        "vllm_bench": {
            "file": str(record.path.resolve()), "sha256": record.sha256,
            "record": record.index, "records_in_file": record.count,
            "copy": SOURCE_COPY, **parsed.setup, "request_rate": parsed.setup.get(
                "request_rate", "inf"), "duration_s": parsed.duration_s,
            "requests": parsed.n, "metadata": parsed.metadata, "reported": parsed.reported,
            "missing_fields": list(parsed.missing),
        },
        "send_times": rows.send_times,
        "time_anchor": anchor[1],
        "latency_from": latency_from if parsed.open_loop else "send",
        "plan": {"requests": parsed.n,
                 "source": "vllm bench serve's dataset (prompts are not in the result file)"},
    }


def write_run(run_dir: Path, record: BenchRecord, label: str | None,
              slo_source: Scenario | None, latency_from: str = "arrival",
              instance: str | None = None) -> ImportedRun:
    """One complete run folder from one record (not rendered); `label` is its variant,
    `instance` the server it ran on (server.instance, provenance `server_instance.label`)."""
    parsed = parse_record(record)
    anchor = anchor_unix_s(record, parsed)
    try:
        rows = build_rows(parsed, anchor[0], latency_from)
    except (pa.ArrowException, OverflowError) as error:  # a value no row column can hold
        raise BenchFileError(f"{record.name}: a value does not fit the run's rows "
                             f"({type(error).__name__}: {str(error)[:200]})") from None
    scenario = trial_scenario(record, parsed, instance, slo_source)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / SCENARIO_FILE,
                 yaml.safe_dump(redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
    provenance = _provenance(record, parsed, instance, rows, anchor, latency_from)
    Provenance.model_validate(provenance).write(run_dir, redact_secrets)
    warnings = [f"imported from vllm bench serve ({record.name}); send times {rows.send_times}",
                "the traffic profile in scenario.yaml is a placeholder (the workload was vLLM "
                "bench's dataset)", *rows.warnings]
    RunStatus(warnings=warnings).write(run_dir)
    write_atomic_with(run_dir / SAMPLES_FILE,
                      lambda temporary: pq.write_table(rows.table, temporary))
    if record.count == 1:
        write_atomic_with(run_dir / SOURCE_COPY,
                          lambda temporary: shutil.copyfile(record.path, temporary))
    else:
        write_atomic(run_dir / SOURCE_COPY, json.dumps(record.data) + "\n")
    return ImportedRun(record, label, run_dir, rows, instance=instance)
