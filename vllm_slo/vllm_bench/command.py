"""`vllm-slo import vllm-bench`: saved `vllm bench serve --save-result --save-detailed` files
turned into run folders, so `report`, `compare`, `gate` and `plan` work on them.

One file (one result record) becomes one run folder; several become an experiment folder laid
out as `run` lays one out (`trials/<NNN>-<variant>-<k>/`, one complete run folder per file),
then every run and the experiment are rendered by the report code, unchanged. A file written
with `--append-result` holds several records: each is a trial.

Reading and validating a file: `records.py`; its rows: `rows.py`; one run folder:
`run_folder.py`.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from vllm_slo.outcome import Outcome, exit_code_line
from vllm_slo.redaction import redact_secrets
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.reports.run_report import render_run
from vllm_slo.run_folder.file_writes import unique_folder, write_atomic
from vllm_slo.run_folder.run_files import SCENARIO_FILE, TRIALS_DIR, trial_folder_name
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.model import Scenario
from vllm_slo.vllm_bench.records import BenchRecord, parse_record, read_records
from vllm_slo.vllm_bench.rows import LATENCY_FROM
from vllm_slo.vllm_bench.run_folder import SCENARIO_NAME, ImportedRun, write_run

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(slots=True)
class _Plan:
    """Which record goes where: label (= variant) and server instance per record, in the
    order given."""

    records: list[BenchRecord] = field(default_factory=list)
    labels: list[str | None] = field(default_factory=list)
    instances: list[str | None] = field(default_factory=list)


MAX_INSTANCE_CHARS = 200
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def _instance_name(template: str, file: Path, label: str | None, where: str) -> str:
    """`--instance` text with `{file}` (the file's name without .json) and `{label}` filled."""
    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == "file":
            return file.name.removesuffix(".json")
        if key == "label":
            return label or "run"
        raise ScenarioError(f"{where} {template!r}: unknown placeholder {{{key}}} (use {{file}} "
                            f"or {{label}})")

    name = _PLACEHOLDER.sub(fill, template)
    if not name or len(name) > MAX_INSTANCE_CHARS or not name.isprintable():
        raise ScenarioError(f"{where} {template!r}: an instance name is 1-{MAX_INSTANCE_CHARS} "
                            f"printable characters")
    return name


def _instances(pairs: Sequence[tuple[Path, str | None]], instances: Sequence[str]
               ) -> list[str | None]:
    """The server instance of each file: `--instance NAME=FILE` for that file, else the one
    `--instance NAME` (a template: `{file}`, `{label}`), else the file's label (files with one
    label ran on one server unless said otherwise), else unknown (None)."""
    default: str | None = None
    per_file: dict[Path, str] = {}
    known = {file.expanduser().resolve() for file, _ in pairs}
    for text in instances:
        name, sep, file_name = text.partition("=")
        if not sep:
            if default is not None:
                raise ScenarioError(f"--instance {default!r} and --instance {text!r}: give one "
                                    f"NAME for all files (placeholders {{file}}, {{label}}), "
                                    f"or NAME=FILE per file")
            default = text
            continue
        target = Path(file_name).expanduser().resolve()
        if not name or not file_name:
            raise ScenarioError(f"--instance {text!r}: expected NAME or NAME=FILE")
        if target not in known:
            raise ScenarioError(f"--instance {text!r}: {file_name} is not one of the files "
                                f"imported")
        if target in per_file:
            raise ScenarioError(f"--instance: {file_name} is given two instances")
        per_file[target] = name
    resolved: list[str | None] = []
    for file, label in pairs:
        explicit = per_file.get(file.expanduser().resolve())
        template = explicit or default or ("{label}" if label else None)
        resolved.append(None if template is None else
                        _instance_name(template, file, label, "--instance"))
    return resolved


def _check_label(label: str, where: str) -> str:
    if label == "run":  # trial folders `NNN-run-k` are those of an unnamed variant
        raise ScenarioError(f"{where} 'run' is reserved for unlabelled files; pick another "
                            f"label")
    if not _LABEL.match(label):
        raise ScenarioError(f"{where} {label!r}: a label names a variant and a trial folder; "
                            f"use letters, digits, '.', '_' and '-', starting with a letter "
                            f"or digit")
    return label


def _assign(files: Sequence[Path], labels: Sequence[str], variants: Sequence[str],
            instances: Sequence[str] = ()) -> _Plan:
    if files and variants:
        raise ScenarioError("give the files either as arguments (labelled with --label) or all "
                            "as --variant NAME=FILE, not both")
    pairs: list[tuple[Path, str | None]] = []
    if variants:
        if labels:
            raise ScenarioError("--label and --variant both name labels: with --variant "
                                "NAME=FILE the NAME is the file's label")
        for text in variants:
            name, sep, file_name = text.partition("=")
            if not sep or not name or not file_name:
                raise ScenarioError(f"--variant {text!r}: expected NAME=FILE")
            pairs.append((Path(file_name), _check_label(name, "--variant")))
    elif not files:
        raise ScenarioError("which files? pass vllm bench result files (FILE.json ...) or "
                            "--variant NAME=FILE")
    elif not labels:
        pairs = [(file, None) for file in files]
    elif len(labels) == 1:
        pairs = [(file, _check_label(labels[0], "--label")) for file in files]
    elif len(labels) == len(files):
        pairs = [(file, _check_label(label, "--label"))
                 for file, label in zip(files, labels, strict=True)]
    else:
        raise ScenarioError(f"{len(labels)} --label values for {len(files)} files: give one "
                            f"label for all files, or one per file in the same order")
    plan = _Plan()
    for (file, label), instance in zip(pairs, _instances(pairs, instances), strict=True):
        for record in read_records(file):
            plan.records.append(record)
            plan.labels.append(label)
            plan.instances.append(instance)
    return plan


def _fresh_folder(out: Path | None, runs_root: Path) -> tuple[Path, bool]:
    """The folder to import into, and whether this import created it: `--out` (absent or
    empty), else a new `<UTC>-vllm-bench` under `runs_root` (-2, -3 for one second's)."""
    if out is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        try:
            return unique_folder(runs_root.expanduser().resolve(), f"{stamp}-{SCENARIO_NAME}"), True
        except OSError as error:
            raise ScenarioError(f"--runs-dir {runs_root}: cannot create the run folder: "
                                f"{error.strerror or error}") from None
    out = out.expanduser().resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ScenarioError(f"--out {out} already exists and is not empty; importing never "
                            f"overwrites a run folder")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ScenarioError(f"--out {out}: cannot create the folder: "
                            f"{error.strerror or error}") from None
    return out, created


def _slo_source(reference: str | None) -> Scenario | None:
    if reference is None:
        return None
    scenario, _ = load_scenario(reference)
    return scenario


def _diff(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """The keys of `other` that differ from `base` (recursively), as a variant patch."""
    patch: dict[str, Any] = {}
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            nested = _diff(base[key], value)
            if nested:
                patch[key] = nested
        elif base.get(key) != value:
            patch[key] = value
    return patch


def experiment_scenario(trials: Sequence[tuple[str | None, Scenario]]) -> Scenario:
    """The experiment's scenario.yaml: the first trial's scenario as the base; one variant
    per label (its server.instance and whatever else differs from the base), none when the
    files are unlabelled; `trials` = the fewest trials any variant has."""
    base = trials[0][1].to_yaml_dict()
    base["server"]["instance"] = None
    counts: dict[str | None, int] = {}
    firsts: dict[str | None, Scenario] = {}
    for label, scenario in trials:
        counts[label] = counts.get(label, 0) + 1
        firsts.setdefault(label, scenario)
    document = {**base, "trials": min(counts.values())}
    if list(counts) != [None]:
        document["variants"] = {
            label: {key: value for key, value in _diff(base, scenario.to_yaml_dict()).items()
                    if key in ("server", "traffic")}
            for label, scenario in firsts.items()}
        document["description"] = (f"{len(trials)} `vllm bench serve` results imported as "
                                   f"trials of {len(counts)} variant(s), one per label")
    else:
        document["description"] = (f"{len(trials)} `vllm bench serve` results imported as "
                                   f"trials of one setting")
    return Scenario.model_validate(document)


def _line(run: ImportedRun, out: Path) -> str:
    rows = run.rows
    where = run.run_dir.relative_to(out) if run.run_dir != out else Path(".")
    label = f" [{run.label}]" if run.label else ""
    if run.instance and run.instance != run.label:
        label += f" on {run.instance}"
    return (f"  {run.record.name}{label} -> {where}: {rows.requests} requests, "
            f"{rows.failed} failed; send times "
            f"{'reconstructed' if rows.reconstructed else 'recorded'}")


def import_vllm_bench(files: Sequence[Path], out: Path | None, labels: Sequence[str] = (),
                      variants: Sequence[str] = (), slo_from: str | None = None,
                      latency_from: str = "arrival", runs_root: Path = Path("runs"),
                      instances: Sequence[str] = ()) -> Outcome:
    """Import `vllm bench serve` result files into a run folder (one record) or an
    experiment folder (several: one trial each, grouped into variants by label), render
    them, and return the rendered text with the run's exit code."""
    if latency_from not in LATENCY_FROM:
        raise ScenarioError(f"--latency-from {latency_from!r}: expected one of "
                            f"{', '.join(LATENCY_FROM)}")
    plan = _assign(files, labels, variants, instances)
    for record in plan.records:
        parse_record(record)  # every file is checked before anything is written
    slo_source = _slo_source(slo_from)
    out, created = _fresh_folder(out, runs_root)
    try:
        return _import_into(out, plan, slo_source, latency_from)
    except BaseException:  # a failed import leaves no half-written (or empty) folder behind
        _remove_import(out, created)
        raise


def _remove_import(out: Path, created: bool) -> None:
    """Undo a failed import: the folder it created, or what it wrote into an empty one."""
    if created:
        shutil.rmtree(out, ignore_errors=True)
        return
    for child in out.iterdir() if out.is_dir() else ():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _import_into(out: Path, plan: _Plan, slo_source: Scenario | None, latency_from: str
                 ) -> Outcome:
    lines = [f"importing {len(plan.records)} vllm bench result(s) into {out}"]
    if len(plan.records) == 1:
        run = write_run(out, plan.records[0], plan.labels[0], slo_source, latency_from,
                        plan.instances[0])
        rendered = render_run(out)  # its text lists the run's warnings
        lines.append(_line(run, out))
    else:
        trial_numbers: dict[str | None, int] = {}
        runs = []
        for position, (record, label, instance) in enumerate(zip(
                plan.records, plan.labels, plan.instances, strict=True), start=1):
            trial_numbers[label] = trial_numbers.get(label, 0) + 1
            trial_dir = out / TRIALS_DIR / trial_folder_name(position, label or "",
                                                             trial_numbers[label])
            run = write_run(trial_dir, record, label, slo_source, latency_from, instance)
            render_run(trial_dir)
            runs.append(run)
            lines.append(_line(run, out))
        scenario = experiment_scenario([(r.label, Scenario.model_validate(yaml.safe_load(
            (r.run_dir / SCENARIO_FILE).read_text()))) for r in runs])
        write_atomic(out / SCENARIO_FILE,
                     yaml.safe_dump(redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
        rendered = render_experiment(out)
        warnings = list(dict.fromkeys(w for r in runs for w in r.rows.warnings))
        lines += [f"  warning: {w}" for w in warnings]
    code = rendered.exit_code
    slo_count = 0 if slo_source is None else len(slo_source.slo.rules())
    lines += ["", rendered.text, "", f"report: {rendered.report_path}",
              exit_code_line(int(code), slo_count)]
    if slo_count == 0:
        lines.append("(--slo-from SCENARIO judges the imported runs against its SLOs)")
    return Outcome(out, code, "\n".join(lines), rendered.report_path)
