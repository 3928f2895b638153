"""Trials read from run folders: a single run is one trial; an experiment folder holds one run
folder per trial (`trials/NNN-<variant>-<k>/`). The values they become: `analysis.trials`."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import yaml

from vllm_slo.analysis.run_metrics import run_parts, run_series
from vllm_slo.analysis.trials import Trial, TrialOutcome
from vllm_slo.analysis.verdicts import INTERRUPTED_REASON
from vllm_slo.redaction import REDACTED, redact_secrets, redact_text, redacted_keys
from vllm_slo.reports.samples import load_samples
from vllm_slo.run_folder.folder_kind import TRIAL_KINDS, folder_kind
from vllm_slo.run_folder.provenance import Provenance
from vllm_slo.run_folder.run_files import (
    PROVENANCE_FILE,
    SCENARIO_FILE,
    SUMMARY_FILE,
    TRIALS_DIR,
)
from vllm_slo.run_folder.samples_format import SAMPLES_FILE
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import apply_override, check_repeated_overrides, parse_override
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.plugins import unregistered_hint

#: a trial folder's name: `NNN-<variant>-<k>` (run_folder/run_files.trial_folder_name); anything
#: else under trials/ (a `compare-<UTC>` folder someone wrote there, notes) is not a trial
TRIAL_FOLDER = re.compile(r"^(\d+)-(.+)-(\d+)$")
MAX_REASON_CHARS = 300
#: what reading a damaged file raises: I/O, text that is not UTF-8, YAML/JSON syntax, pydantic
#: (a ValueError), a missing key or a wrong type in summary.json, a truncated Arrow/Parquet file
DAMAGE = (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError, KeyError, TypeError,
          pa.ArrowException)


def damage_reason(error: BaseException) -> str:
    """The first line of what went wrong, short (a YAML alias bomb's message is megabytes)."""
    lines = str(error).strip().splitlines()
    text = redact_text(lines[0] if lines else type(error).__name__)
    if len(text) > MAX_REASON_CHARS:
        text = text[:MAX_REASON_CHARS] + "…"
    return f"{type(error).__name__}: {text}"


@contextmanager
def naming(path: Path, hint: str = "") -> Iterator[None]:
    """A damaged run-folder file becomes a usage error (exit 2) naming the file, never a
    traceback that exits 1 (which `gate` means as "regression")."""
    try:
        yield
    except DAMAGE as error:
        raise ScenarioError(f"{path} is damaged or unreadable ({damage_reason(error)})"
                            f"{'; ' + hint if hint else ''}") from None


def read_scenario(run_dir: Path) -> Scenario:
    path = run_dir / SCENARIO_FILE
    if not path.is_file():
        raise ScenarioError(f"{run_dir} is not a vllm-slo run folder (no {SCENARIO_FILE})")
    with naming(path):
        document = yaml.safe_load(path.read_text())
    with naming(path, unregistered_hint(document)):  # a plugin's metric or profile
        return Scenario.model_validate(document)


def read_provenance(run_dir: Path) -> Provenance:
    """provenance.json; damaged, a usage error naming it: comparing or gating trials needs
    what it says (model, vLLM version, host, the server instance). (`report` leaves a damaged
    one out with a warning instead: one run's numbers do not depend on it.)"""
    with naming(run_dir / PROVENANCE_FILE, "the runs' model, vLLM version, host and server "
                                           "instance cannot be checked without it"):
        return Provenance.read(run_dir)


def read_samples(run_dir: Path) -> pa.Table:
    """The rows: samples.parquet, or samples/*.arrows where it is damaged (reports.samples);
    with neither readable, a usage error naming the file."""
    with naming(run_dir / SAMPLES_FILE):
        return load_samples(run_dir)


def check_trial_files(run_dir: Path) -> Scenario:
    """A trial's scenario and provenance, each damage named by its file, before the rest is
    read as far as the data allow (its outcome from summary.json, rebuilt by the run report's
    own reading where that is missing or damaged; its rows from the streams where
    samples.parquet is damaged)."""
    scenario = read_scenario(run_dir)
    read_provenance(run_dir)
    return scenario


def _outcome(run_dir: Path) -> TrialOutcome:
    """summary.json's outcome; rebuilt from the folder's data (nothing written) when the file
    is missing or damaged."""
    path = run_dir / SUMMARY_FILE
    try:
        return TrialOutcome.from_json_dict(json.loads(path.read_text()))
    except DAMAGE:
        from vllm_slo.reports.run_report import load_run  # the run report's own reading

        document = load_run(run_dir).document
        return TrialOutcome(document.exit_code, tuple(document.invalid_reasons),
                            tuple(document.slos))


def load_trial(run_dir: Path, variant: str = "", position: int = 1) -> Trial:
    scenario = check_trial_files(run_dir)
    provenance = read_provenance(run_dir).to_json_dict()
    outcome = _outcome(run_dir)
    table = read_samples(run_dir)
    window_s = scenario.traffic.duration_s
    return Trial(variant, position, run_dir, scenario, redact_secrets(provenance), outcome,
                 run_series(table, window_s),
                 run_parts(table, window_s, scenario.traffic.profile == "mix",
                           bool(scenario.traffic.lora)))


def trial_folders(run_dir: Path) -> list[tuple[Path, str, int]]:
    """(folder, variant, position) for each trial folder `NNN-<variant>-<k>` in order (none
    before trials/ exists)."""
    folders = []
    trials = run_dir / TRIALS_DIR
    for folder in sorted(trials.iterdir()) if trials.is_dir() else []:
        name = TRIAL_FOLDER.match(folder.name)
        if name is None or not (folder / SUMMARY_FILE).is_file():
            continue
        variant = name.group(2)
        folders.append((folder, "" if variant == "run" else variant, int(name.group(1))))
    return folders


def collect_trials(run_dir: Path) -> list[Trial]:
    if folder_kind(run_dir) in TRIAL_KINDS:
        return [load_trial(folder, variant, position)
                for folder, variant, position in trial_folders(run_dir)]
    return [load_trial(run_dir)]


def trial_complete(folder: Path, say: Callable[[str], None] | None = None) -> bool:
    """A trial folder whose summary.json says it ran to its end. One cut short, or whose
    summary.json is unreadable (said through `say`), is not: it runs again."""
    summary = folder / SUMMARY_FILE
    if not summary.is_file():
        return False
    try:
        outcome = TrialOutcome.from_json_dict(json.loads(summary.read_text()))
    except DAMAGE as error:
        if say is not None:
            say(f"{summary} is damaged or unreadable ({damage_reason(error)}): the trial "
                "runs again")
        return False
    return INTERRUPTED_REASON not in outcome.invalid_reasons


def resumable_scenario(path: Path, overrides: Sequence[str], command: str) -> Scenario:
    """The scenario a resumed experiment or tune runs: its folder's copy at `path` (damaged:
    a usage error naming it), where the credentials the copy hides as `***` (never written:
    reports.redaction) are given again as `overrides` on the resume command line. Anything
    else is refused (the experiment goes on as it was started), and so is a hidden value not
    given again: the trials would launch or attach with `***` as the credential."""
    with naming(path):
        document = yaml.safe_load(path.read_text())
        if not isinstance(document, dict):
            raise ValueError(f"expected a scenario mapping, got {type(document).__name__}")
    hidden = redacted_keys(document)
    parsed = [parse_override(text) for text in overrides]
    check_repeated_overrides(parsed)
    for override in parsed:  # the key only in the message: the value may be a secret
        if override.dotted_key not in hidden:
            raise ScenarioError(
                f"{command}: override {override.dotted_key}: a resumed run goes on as it was "
                f"started; the command line may only give again what {path.name} hides as "
                f"{REDACTED} ({', '.join(hidden) if hidden else 'nothing here'})")
        apply_override(document, override)
    missing = [key for key in hidden if key not in {o.dotted_key for o in parsed}]
    if missing:
        raise ScenarioError(
            f"{path} holds {', '.join(missing)} as {REDACTED} (credentials are never written): "
            f"give {'it' if len(missing) == 1 else 'them'} again, "
            f"{command} {' '.join(f'{key}=VALUE' for key in missing)}; or keep secrets in the "
            "environment (server.api_key_env names the API key's variable; a launched server "
            "inherits the environment, HF_TOKEN included)")
    with naming(path, unregistered_hint(document)):  # a plugin's metric or profile
        return Scenario.model_validate(document)
