"""`vllm-slo tune` with `tune.objective: capacity`: a race of capacities. Every candidate of
the tune's grid (and the scenario's own args with `tune.baseline`) is searched for its
capacity (the scenario's `capacity:` section) on its own servers, one `capacity.trials`
round at a time; a search stops once it is below another candidate's lower bound, and a
candidate below one gets no further round (analysis/capacity_race.py decides).

    runs/<UTC>-<name>-tune/
      tune.yaml  candidates.json            the scenario as given; cNN -> server args
      variants/cNN/                         a capacity folder per candidate
      race.json  report.html  summary.md  junit.xml

`vllm-slo tune --resume DIR` goes on from the candidates' capacity.json files; `vllm-slo
report DIR` re-renders.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from vllm_slo.analysis.capacity import CapacityDocument
from vllm_slo.analysis.capacity_race import finished_trials, out_of_race, race_floor
from vllm_slo.analysis.tuning import GIVEN_ORIGIN
from vllm_slo.capacity_runner import (
    CapacitySearch,
    capacity_outcome,
    check_lowest_step,
    check_trace_span,
)
from vllm_slo.outcome import Outcome
from vllm_slo.preflight import Printer, check_before_run
from vllm_slo.redaction import redact_secrets
from vllm_slo.reports.capacity_report import read_capacity, render_capacity
from vllm_slo.run_folder.file_writes import new_run_dir, write_atomic
from vllm_slo.run_folder.folder_kind import FolderKind, folder_kind
from vllm_slo.run_folder.run_files import TUNE_SCENARIO_FILE, VARIANTS_DIR
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.model import Scenario
from vllm_slo.tuner import Candidate, Tune


def check_race(scenario: Scenario) -> None:
    """What a capacity race needs of its scenario (a clear error before anything runs)."""
    assert scenario.tune is not None
    if scenario.capacity is None:
        raise ScenarioError(f"scenario {scenario.name!r}: tune.objective: capacity searches "
                            "each candidate's capacity: add a capacity: section (low, high, "
                            "tolerance; docs/capacity.md)")
    if scenario.tune.search:
        raise ScenarioError(f"scenario {scenario.name!r}: tune.objective: capacity races a "
                            "grid (and tune.baseline); tune.search procedures step on one "
                            "objective value per trial: list their values in tune.grid")
    if scenario.variants:
        raise ScenarioError(f"scenario {scenario.name!r}: a tune's candidates are its grid; "
                            "variants: cannot be raced as well")
    check_lowest_step(scenario)
    check_trace_span(scenario)  # every candidate replays the same trace
    if scenario.tune.trials is not None or scenario.trials.max > 1:
        raise ScenarioError(f"scenario {scenario.name!r}: a capacity race repeats each "
                            "candidate's search with capacity.trials (each on a fresh "
                            "server), not tune.trials or trials:")


class CapacityRace:
    """One tune folder's race, run or continued."""

    def __init__(self, scenario: Scenario, run_dir: Path, say: Printer) -> None:
        check_race(scenario)
        assert scenario.capacity is not None
        self.scenario, self.run_dir, self.say = scenario, run_dir, say
        self.rounds = scenario.capacity.trials
        self.tune = Tune(scenario, run_dir, say)

    def candidates(self) -> list[Candidate]:
        """The scenario's own args first (tune.baseline), then the grid's points; each
        checked by vLLM's parser before any server starts."""
        points = self.tune.check_grid()
        given = ([self.tune.candidate(dict(self.tune.base_args), GIVEN_ORIGIN)]
                 if self.tune.spec.baseline else [])
        named = {c.name: c for c in [*given, *(self.tune.candidate(p, "grid") for p in points)]}
        return list(named.values())

    def _documents(self) -> dict[str, CapacityDocument]:
        variants = self.run_dir / VARIANTS_DIR
        if not variants.is_dir():
            return {}
        return {sub.name: read_capacity(sub) for sub in sorted(variants.iterdir())
                if folder_kind(sub) is FolderKind.CAPACITY}

    def run(self) -> Outcome:
        candidates = self.candidates()
        documents = self._documents()
        self.say(f"capacity race: {len(candidates)} candidate(s), {self.rounds} round(s)")
        try:
            for round_ in range(1, self.rounds + 1):
                for candidate in candidates:
                    self._search(candidate, round_, documents)
        except KeyboardInterrupt:
            self.say(f"interrupted; continue with\n  vllm-slo tune --resume {self.run_dir}")
            if documents:
                render_capacity(self.run_dir)
            raise
        if not documents:
            raise ScenarioError("the race searched no candidate")
        return capacity_outcome(self.run_dir, render_capacity(self.run_dir))

    def _search(self, candidate: Candidate, round_: int,
                documents: dict[str, CapacityDocument]) -> None:
        name = candidate.name
        done = documents.get(name)
        if finished_trials(done) >= round_:
            return  # searched before a resume
        reason = out_of_race(documents, name)
        if reason is not None:
            if finished_trials(done) == round_ - 1:
                self.say(f"{name}: no round {round_}: {reason}")
            return
        floor = race_floor(documents, name)
        changed = " ".join(f"{k}={v}" for k, v in candidate.changed.items()) or "as given"
        self.say(f"\n=== {name} ({changed}), round {round_} ===")
        folder = self.run_dir / VARIANTS_DIR / name
        folder.mkdir(parents=True, exist_ok=True)
        search = CapacitySearch(self.scenario, self.tune.arm(candidate.changed), folder,
                                self.say, name, done, floor)
        documents[name] = search.run(last_trial=round_)


def run_capacity_race(scenario: Scenario, runs_root: Path, say: Printer = print
                      ) -> Outcome:
    """A new tune folder racing the scenario's candidates by capacity."""
    race = CapacityRace(scenario, Path(), say)  # checks the scenario before a folder exists
    race.tune.check_grid()  # and every candidate's args (cached for the race's own check)
    check_before_run(scenario, runs_root)
    race.run_dir = race.tune.run_dir = new_run_dir(runs_root, f"{scenario.name}-tune")
    write_atomic(race.run_dir / TUNE_SCENARIO_FILE,
                 yaml.safe_dump(redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
    say(f"tune folder: {race.run_dir}")
    return race.run()


def resume_capacity_race(scenario: Scenario, run_dir: Path, say: Printer = print
                         ) -> Outcome:
    say(f"resuming the capacity race {run_dir}")
    return CapacityRace(scenario, run_dir, say).run()

