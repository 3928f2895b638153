"""`vllm-slo tune scenario=NAME`: search a scenario's `tune` space over server args. Every
candidate runs as trials on fresh servers (grid candidates interleaved A B B A ...), the
guides' procedures step one arg at a time from the best candidate so far until a stop
condition holds, and the candidates are ranked by the objective with significance across
trials (vllm_slo/analysis/tuning.py decides; vllm_slo/reports/tune_report.py writes).

    runs/<stamp>-<name>-tune/tune.yaml                   the scenario as given (tune included)
    runs/<stamp>-<name>-tune/trials/<NNN>-<cNN>-<k>/     one run folder per trial
    runs/<stamp>-<name>-tune/candidates.json             cNN -> server args, where it came from
    runs/<stamp>-<name>-tune/scenario.yaml|summary.json|report.html   the candidates as an
        experiment (per-candidate SLO verdicts, comparisons, every trial)
    runs/<stamp>-<name>-tune/tune.json|tune.html         ranking, Pareto front, search log
    runs/<stamp>-<name>-tune/recommended.yaml|recommended-command.txt

Resumable: `vllm-slo tune --resume RUN_DIR` replays the same decisions from the trials on disk
(they are deterministic given the trials' results) and runs only the trials that are missing;
a trial cut short is run again.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vllm_slo.analysis.comparison import Group
from vllm_slo.analysis.experiment_design import trial_order
from vllm_slo.analysis.quantised_cells import quantisation
from vllm_slo.analysis.server_metrics import run_preemptions
from vllm_slo.analysis.summary import ReportedEstimate, RunRates
from vllm_slo.analysis.trial_verdicts import slo_across_trials
from vllm_slo.analysis.trials import gpu_set
from vllm_slo.analysis.tune_summary import OBJECTIVE_CELLS, TuneResult
from vllm_slo.analysis.tuning import (
    GIVEN_ORIGIN,
    CandidateResult,
    SearchFinding,
    args_key,
    grid_candidates,
    rank_candidates,
    same_server,
    search_finding,
    search_start,
    search_values,
    stop_reason,
)
from vllm_slo.outcome import Outcome, reported, verdict_line
from vllm_slo.preflight import Printer, check_before_run, platform_of
from vllm_slo.redaction import redact_secrets
from vllm_slo.reports.capacity_report import RenderedCapacity, render_capacity
from vllm_slo.reports.run_folder_read import read_server_metrics
from vllm_slo.reports.run_report import RenderedRun
from vllm_slo.reports.trial_folders import load_trial, naming, resumable_scenario, trial_complete
from vllm_slo.reports.tune_report import write_tune
from vllm_slo.run_folder.file_writes import new_run_dir, write_atomic
from vllm_slo.run_folder.run_files import (
    CANDIDATES_FILE,
    SERVER_FACTS_FILE,
    SERVER_METRICS_FILE,
    START_FAILURE_FILE,
    SUMMARY_FILE,
    TRIALS_DIR,
    TUNE_SCENARIO_FILE,
    trial_folder_name,
)
from vllm_slo.runner import run_trial
from vllm_slo.scenarios.errors import ScenarioError, ServerError
from vllm_slo.scenarios.loader import deep_merge, resolve_variants
from vllm_slo.scenarios.metrics import LATENCY_METRICS
from vllm_slo.scenarios.model import Scenario
from vllm_slo.serialise import json_field, to_json
from vllm_slo.servers.server_facts import effective_engine_args
from vllm_slo.servers.vllm_args import validate_server_args
from vllm_slo.servers.vllm_server import resolve_model_path

OBJECTIVE_RATES = {  # each objective: the RunRates estimate a trial's summary.json gives it
    "goodput": "goodput",
    "output_throughput": "output_tokens_per_s",
    "request_throughput": "requests_per_s",
}
THROUGHPUT_CELL = "output_throughput.mean"


class _Interrupted(Exception):
    """A trial was interrupted (Ctrl-C, SIGTERM): no further trials."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    # c01, c02, ... in the order they were first needed (the key candidates.json writes it by)
    name: str = json_field(skip=True)
    args: dict[str, Any]  # the complete `vllm serve` args
    changed: dict[str, Any]  # what differs from the scenario's own server args
    origin: str


def latency_cell(scenario: Scenario) -> str:
    """The Pareto front's latency axis: tune.latency_cell, else the first latency SLO's
    cell, else e2e.p50."""
    if scenario.tune is not None and scenario.tune.latency_cell:
        return scenario.tune.latency_cell
    for rule in scenario.slo.rules():
        if rule.metric in LATENCY_METRICS:
            return rule.cell
    return "e2e.p50"


def _trial_complete(folder: Path, say: Printer | None = None) -> bool:
    """A start failure recorded, or a summary.json that says the trial ran to its end (one
    cut short or unreadable runs again)."""
    return (folder / START_FAILURE_FILE).is_file() or trial_complete(folder, say)


def _objective_value(folder: Path, objective: str) -> float | None:
    rates = RunRates.from_json_dict(json.loads((folder / SUMMARY_FILE).read_text()))
    estimate: ReportedEstimate = getattr(rates, OBJECTIVE_RATES[objective])
    return estimate.value


def _verdict(verdicts: list[str]) -> str:
    if not verdicts:
        return "none"
    if "FAIL" in verdicts:
        return "FAIL"
    return "PASS" if all(v == "PASS" for v in verdicts) else "INCONCLUSIVE"


class Tune:
    """One tune folder's search, run or replayed (resume)."""

    def __init__(self, scenario: Scenario, run_dir: Path, say: Printer,
                 run_missing: bool = True):
        if scenario.tune is None:
            raise ScenarioError(f"scenario {scenario.name!r} has no tune section: add "
                                "tune: {grid: {FLAG: [VALUES]}} or tune: {search: [...]} "
                                "(docs/tuning.md)")
        if scenario.server.url is not None:
            raise ScenarioError(f"scenario {scenario.name!r}: tune launches a server per trial "
                                f"with each candidate's args; server.url (attach mode) cannot "
                                f"change a running server's args")
        self.scenario, self.spec, self.run_dir, self.say = scenario, scenario.tune, run_dir, say
        self.base = resolve_variants(scenario)[""]
        self.base_args = dict(self.base.server.engine_args)
        self.trials_per_candidate = self.spec.trials or scenario.max_trials
        self.platform = platform_of(scenario.server)
        self.candidates: dict[str, Candidate] = {}
        self.by_args: dict[tuple[tuple[str, str], ...], str] = {}
        self.folders: dict[str, list[Path]] = {}
        self.results: dict[str, CandidateResult] = {}
        self.findings: list[SearchFinding] = []
        self.position = 0
        self.ran = self.reused = 0
        self.run_missing = run_missing  # False: re-render from the folder, run nothing
        self.effective: dict[str, dict[str, Any]] = {}  # name -> flags as its server stated
        self.saved_keys: set[tuple[tuple[str, str], ...]] = set()  # candidates.json's, run()

    # candidates -------------------------------------------------------------------------

    def check_args(self, labelled_args: list[tuple[str, dict[str, Any]]]) -> None:
        """vLLM's own parser over every args set at once (one child process for all the
        uncached ones) before any of them runs: a typo costs a second, not a start-up."""
        validate_server_args([(label, self.arm(self._changed(args)).server)
                              for label, args in labelled_args], self.platform)

    def check_grid(self) -> list[dict[str, Any]]:
        """The grid's complete args sets, every one checked by vLLM's parser (the scenario's
        own args when there is no grid), and the scenario's own args too with tune.baseline."""
        points = [{**self.base_args, **point} for point in grid_candidates(self.spec.grid)]
        labelled = [(f"grid point {i}", args) for i, args in enumerate(points, 1)]
        if self.spec.baseline:
            labelled.append((GIVEN_ORIGIN, dict(self.base_args)))
        self.check_args(labelled)
        return points

    def _changed(self, args: dict[str, Any]) -> dict[str, Any]:
        return {flag: value for flag, value in args.items()
                if flag not in self.base_args or repr(self.base_args[flag]) != repr(value)}

    def candidate(self, args: dict[str, Any], origin: str) -> Candidate:
        """The candidate with these args: an existing one, or a new one (its args already
        checked by `check_args`)."""
        key = args_key(args)
        if key in self.by_args:
            return self.candidates[self.by_args[key]]
        same = None if key in self.saved_keys else self.ran_as(args)
        if same is not None:  # (a folder whose candidates.json has these args keeps them)
            self.by_args[key] = same.name
            added = " ".join(f"{flag}={value}" for flag, value in args.items()
                             if flag not in same.args)
            self.say(f"{origin}: {added} is what {same.name}'s server ran with (its own log): "
                     f"{same.name}, not run again")
            return same
        if len(self.candidates) >= self.spec.max_candidates:
            raise ScenarioError(f"the tune needs more than tune.max_candidates = "
                                f"{self.spec.max_candidates} candidates")
        name = f"c{len(self.candidates) + 1:02d}"
        candidate = Candidate(name=name, args=dict(args), changed=self._changed(args),
                              origin=origin)
        self.candidates[name] = candidate
        self.by_args[key] = name
        self.folders[name] = []
        self._save_candidates()
        return candidate

    def ran_as(self, args: dict[str, Any]) -> Candidate | None:
        """A candidate that ran whose server these args would start again: the same args but
        for flags it left to vLLM, at the values its server stated (a search step at vLLM's
        default, which the guides' doubling from max-model-len reaches)."""
        for name in self.results:
            if same_server(args, self.candidates[name].args, self.effective_args(name)):
                return self.candidates[name]
        return None

    def effective_args(self, name: str) -> dict[str, Any]:
        """The flags a candidate's servers ran with as they stated them (the first of its
        trials with a readable server_facts.json); {} where none says."""
        if name not in self.effective:
            self.effective[name] = {}
            for folder in self.folders[name]:
                with contextlib.suppress(OSError, ValueError):
                    facts = json.loads((folder / SERVER_FACTS_FILE).read_text())
                    self.effective[name] = effective_engine_args(facts)
                    break
        return self.effective[name]

    def arm(self, changed: dict[str, Any]) -> Scenario:
        """The base scenario with these server args changed."""
        return Scenario.model_validate(deep_merge(self.base.to_yaml_dict(),
                                                  {"server": {"args": changed}}))

    def _save_candidates(self) -> None:
        document = {name: to_json(c) for name, c in self.candidates.items()}
        write_atomic(self.run_dir / CANDIDATES_FILE,
                     json.dumps(redact_secrets(document), indent=2) + "\n")

    # trials -----------------------------------------------------------------------------

    def run_trials(self, candidates: list[Candidate]) -> None:
        """Each candidate's trials, interleaved in a balanced order; a candidate that already
        ran (a search step equal to a grid point) is not run again."""
        fresh = [c for c in candidates if c.name not in self.results]
        for name, trial in trial_order([c.name for c in fresh], self.trials_per_candidate):
            self._trial(self.candidates[name], trial)
        for candidate in fresh:
            self.results[candidate.name] = self.result(candidate)

    def _trial(self, candidate: Candidate, trial: int) -> None:
        self.position += 1
        folder = self.run_dir / TRIALS_DIR / trial_folder_name(self.position, candidate.name,
                                                               trial)
        self.folders[candidate.name].append(folder)
        label = f"trial {self.position}: {candidate.name} #{trial} ({_args_text(candidate)})"
        if _trial_complete(folder, self.say if self.run_missing else None):
            self.reused += 1
            self.say(f"{label}: done before, kept")
            return
        if not self.run_missing:  # a report of the folder as it is: the search ends here
            raise _Interrupted
        if folder.exists():  # cut short: run it again from the start
            shutil.rmtree(folder)
        self.say(f"\n=== {label} ===")
        self.ran += 1
        try:
            _, rendered = run_trial(self.arm(candidate.changed), folder, self.say)
        except KeyboardInterrupt:  # a signal before the trial's own handling began
            raise _Interrupted from None
        except ServerError as error:  # OOM, KV cache too small, a config vLLM refuses
            write_atomic(folder / START_FAILURE_FILE, json.dumps({"error": str(error)}) + "\n")
            self.say(f"{candidate.name}: the server did not start:\n{error}")
            return
        if rendered.interrupted:
            raise _Interrupted

    def result(self, candidate: Candidate) -> CandidateResult:
        """What the candidate's trial folders show."""
        failures, trials, preemptions = [], [], []
        objective_values = []
        for folder in self.folders[candidate.name]:
            if (folder / START_FAILURE_FILE).is_file():
                failures.append(json.loads((folder / START_FAILURE_FILE).read_text())["error"])
                continue
            trial = load_trial(folder, candidate.name, int(folder.name.split("-", 1)[0]))
            trials.append(trial)
            count = run_preemptions(read_server_metrics(folder / SERVER_METRICS_FILE))
            if count is not None:
                preemptions.append(count)
            value = _objective_value(folder, self.spec.objective) if trial.valid else None
            if value is not None:
                objective_values.append(value)
        group = Group(candidate.name, tuple(trials))
        quantised = quantisation(candidate.name, tuple(trials),
                                 OBJECTIVE_CELLS[self.spec.objective])
        gpu_sets = {gpu_set(trial.provenance) for trial in trials}
        verdicts = ([slo_across_trials(group, rule).verdict.value
                     for rule in self.base.slo.rules()] if group.valid_trials else [])
        return CandidateResult(
            name=candidate.name, origin=candidate.origin, changed=candidate.changed,
            args=candidate.args, objective_values=tuple(objective_values),
            start_failures=tuple(failures),
            invalid_trials=sum(1 for t in trials if not t.valid),
            slo_verdict=_verdict(verdicts),
            preemptions=sum(preemptions) if preemptions else None,
            throughput_values=tuple(group.values(THROUGHPUT_CELL)),
            latency_values=tuple(group.values(latency_cell(self.base))),
            gpu_sets=tuple(sorted(gpu_sets - {""})),
            objective_quantised=None if quantised is None else quantised.text(),
            objective_bias_log=0.0 if quantised is None else quantised.bias_log)

    # the search -------------------------------------------------------------------------

    def incumbent_args(self) -> dict[str, Any]:
        """The best candidate's args so far; the scenario's own before any candidate ran."""
        ranking = rank_candidates(list(self.results.values()), self.scenario.compare.alpha,
                                  self.scenario.compare.test)
        return dict(self.candidates[ranking.best].args) if ranking.best else dict(self.base_args)

    def search(self) -> None:
        points = self.check_grid() if self.spec.grid or self.spec.baseline else []
        # the scenario's own args first, then the grid: one interleaved set of trials
        given = [self.candidate(dict(self.base_args), GIVEN_ORIGIN)] if self.spec.baseline else []
        named = {c.name: c for c in [*given, *(self.candidate(args, "grid") for args in points)]}
        grid = list(named.values())  # a grid point equal to the scenario's args: one candidate
        if grid:
            self.say(f"{'grid' if self.spec.grid else 'as given'}: {len(grid)} candidate(s) × "
                     f"{self.trials_per_candidate} trial(s)")
            self.run_trials(grid)
        for index, search in enumerate(self.spec.search, start=1):
            start_args = self.incumbent_args()
            try:
                values = search_values(search, search_start(search, start_args))
            except ValueError as error:
                raise ScenarioError(f"tune.search[{index - 1}]: {error}") from None
            self.check_args([(f"search {index} step {step}", {**start_args, search.arg: v})
                             for step, v in enumerate(values, start=1)])
            self.say(f"search {index}: {search.arg} over {values} until "
                     f"{' or '.join(search.until)}")
            steps, stopped = [], None
            for step, value in enumerate(values, start=1):
                candidate = self.candidate({**start_args, search.arg: value},
                                           f"search {index} ({search.arg}) step {step}")
                self.run_trials([candidate])
                steps.append(self.results[candidate.name])
                stopped = stop_reason(search, steps)
                if stopped:
                    self.say(f"search {index} stops at {search.arg}={value}: {stopped}")
                    break
            self.findings.append(search_finding(index, search, values, steps, stopped))

    def _saved_keys(self) -> set[tuple[tuple[str, str], ...]]:
        """The args of the candidates an earlier session of this folder created: replayed
        as those candidates (a folder written before a search step could be recognised as an
        earlier candidate's server keeps its names and trials)."""
        path = self.run_dir / CANDIDATES_FILE
        if not path.is_file():
            return set()
        with naming(path):
            saved = json.loads(path.read_text())
            return {args_key(entry["args"]) for entry in saved.values()}

    def run(self) -> RenderedRun:
        self.saved_keys = self._saved_keys()
        interrupted = False
        try:
            self.search()
        except _Interrupted:
            interrupted = True
            self.say(f"{'interrupted: no further trials' if self.run_missing else 'incomplete'}"
                     f"; continue with\n  vllm-slo tune --resume {self.run_dir}")
            for name in self.candidates:  # what the trials so far show, for the report
                if name not in self.results and self.folders[name]:
                    self.folders[name] = [f for f in self.folders[name] if _trial_complete(f)]
                    self.results[name] = self.result(self.candidates[name])
        self.say(f"\ntune: {self.ran} trial(s) run, {self.reused} kept from before")
        result = TuneResult(
            self.scenario, self.run_dir.name, self.trials_per_candidate,
            [self.results[name] for name in self.candidates if name in self.results],
            self.findings, latency_cell(self.base), THROUGHPUT_CELL, interrupted,
            resolve_model_path(self.base.server))
        return write_tune(self.run_dir, result)


def _args_text(candidate: Candidate) -> str:
    return " ".join(f"{flag}={value}" for flag, value in candidate.changed.items()) or "as given"


def _tuned(run_dir: Path, rendered: RenderedRun) -> Outcome:
    return reported(run_dir, rendered.exit_code, rendered.text, rendered.report_path,
                    "tune report", verdict_line(rendered.exit_code))


def run_tune(scenario: Scenario, runs_root: Path, say: Printer = print) -> Outcome:
    """A new tune folder for the scenario's tune section, searched to its end (a tune with
    `tune.objective: capacity` is a capacity race: capacity_race.py)."""
    tune = Tune(scenario, Path(), say)  # checks the tune section before a folder exists
    tune.check_grid()  # and the grid's args (cached: the search's own check is then instant)
    check_before_run(scenario, runs_root)  # the traffic's files and the runs folder
    run_dir = new_run_dir(runs_root, f"{scenario.name}-tune")
    write_atomic(run_dir / TUNE_SCENARIO_FILE,
                 yaml.safe_dump(redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
    tune.run_dir = run_dir
    say(f"tune folder: {run_dir}")
    return _tuned(run_dir, tune.run())


def tune_folder_scenario(run_dir: Path, overrides: Sequence[str] | None = None) -> Scenario:
    """A tune folder's scenario (tune.yaml). To run its missing trials (`overrides` given,
    maybe none), the credentials its tune.yaml holds as *** must be given again; a report
    (`overrides` None) runs nothing and needs none."""
    path = run_dir / TUNE_SCENARIO_FILE
    if not path.is_file():
        raise ScenarioError(f"{run_dir} is not a tune folder (no {TUNE_SCENARIO_FILE}); "
                            "start one with vllm-slo tune scenario=NAME")
    if overrides is not None:
        return resumable_scenario(path, overrides, f"vllm-slo tune --resume {run_dir}")
    with naming(path):
        return Scenario.model_validate(yaml.safe_load(path.read_text()))


def resume_tune(scenario: Scenario, run_dir: Path, say: Printer = print) -> Outcome:
    """Continue an interrupted tune from its folder (`tune_folder_scenario` read its
    scenario): completed trials are kept."""
    say(f"resuming tune {run_dir}")
    return _tuned(run_dir, Tune(scenario, run_dir.resolve(), say, run_missing=True).run())


def report_tune(run_dir: Path, say: Printer = print) -> RenderedRun | RenderedCapacity:
    """Re-render a tune folder's outputs from its trials as they are (`vllm-slo report`):
    the search is replayed up to the first trial that is missing, nothing is run. A capacity
    race that has searched no candidate yet renders as a capacity folder."""
    scenario = tune_folder_scenario(run_dir)
    tune = Tune(scenario, run_dir.resolve(), say, run_missing=False)
    if tune.spec.objective == "capacity":
        return render_capacity(run_dir)
    return tune.run()
