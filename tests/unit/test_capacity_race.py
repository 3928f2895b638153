"""A capacity race (tune.objective: capacity): the search's floor (probed after the lowest
load, a search over capacity at or below it stops raced out), who gets no further round, the
standings and the exit code (vllm_slo/analysis/capacity_race.py), a race folder rendered by
`vllm-slo report`, the scenario checks; and, on the simulated M/D/c stand-in, that racing
finds the same best candidate as searching every one in full, in fewer steps."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.capacity_simulation import PercentileSlo, StandIn, search
from tests.unit.test_capacity_report import search_document
from tests.unit.test_capacity_search import step
from vllm_slo.analysis.capacity import CapacityDocument
from vllm_slo.analysis.capacity_comparison import CapacityChange
from vllm_slo.analysis.capacity_race import (
    RaceCandidate,
    finished_trials,
    out_of_race,
    race_floor,
    race_result,
)
from vllm_slo.analysis.tuning import GIVEN_ORIGIN
from vllm_slo.cli import main
from vllm_slo.reports.capacity_report import write_capacity
from vllm_slo.run_folder.run_files import CANDIDATES_FILE, VARIANTS_DIR
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.stats.capacity_search import (
    CapacityEstimate,
    NextStep,
    SearchEnd,
    SearchRange,
    SearchStatus,
    plan_next,
)
from vllm_slo.stats.statistics import Verdict

P, F = Verdict.PASS, Verdict.FAIL
RACE_RANGE = SearchRange(low=4.0, high=64.0, tolerance=0.1, floor=20.0)


# --- the floor in the search ---------------------------------------------------------------

def test_the_floor_is_probed_right_after_the_lowest_load() -> None:
    assert plan_next([step(4.0, P)], RACE_RANGE) == NextStep(20.0, 0)


def test_over_at_the_floor_is_raced_out() -> None:
    end = plan_next([step(4.0, P), step(20.0, F)], RACE_RANGE)
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.RACED_OUT
    assert "floor 20" in end.reason


def test_under_at_the_floor_searches_on_above_it() -> None:
    steps = [step(4.0, P), step(20.0, P)]
    assert plan_next(steps, RACE_RANGE) == NextStep(64.0, 0)
    steps.append(step(64.0, F))
    following = plan_next(steps, RACE_RANGE)
    assert isinstance(following, NextStep) and 20.0 < following.load < 64.0


def test_a_floor_outside_the_range_or_known_over_is_not_probed() -> None:
    below = dataclasses.replace(RACE_RANGE, floor=3.0)  # under the lowest load: never probed
    assert plan_next([step(4.0, P)], below) == NextStep(64.0, 0)
    end = plan_next([step(4.0, P), step(64.0, F), step(16.0, F)], RACE_RANGE)
    assert isinstance(end, SearchEnd) and end.status is SearchStatus.RACED_OUT  # 16 <= 20


def test_whole_loads_probe_the_rounded_floor() -> None:
    users = SearchRange(low=1.0, high=64.0, tolerance=0.1, whole=True, floor=12.4)
    assert plan_next([step(1.0, P)], users) == NextStep(12.0, 0)


# --- standings -----------------------------------------------------------------------------

def _doc(scale: float, status: SearchStatus = SearchStatus.BRACKETED, trials: int = 1
         ) -> CapacityDocument:
    document = search_document(scale=scale)  # capacity [9.5, 10.4] x scale
    if status is not SearchStatus.BRACKETED:
        document = dataclasses.replace(document, status=status, reason="stopped", exit_code=3)
    return dataclasses.replace(document, trials=document.trials * trials)


CANDIDATES = {
    "c01": RaceCandidate(name="c01", origin=GIVEN_ORIGIN, changed={}),
    "c02": RaceCandidate(name="c02", origin="grid", changed={"max-num-seqs": 64}),
    "c03": RaceCandidate(name="c03", origin="grid", changed={"max-num-seqs": 256}),
}


def test_the_floor_is_the_best_lower_bound_of_the_others() -> None:
    documents = {"c01": _doc(1.0), "c02": _doc(2.0),
                 "c03": _doc(3.0, SearchStatus.RACED_OUT)}
    assert race_floor(documents, "c01") == pytest.approx(19.0)  # c02's 9.5 x 2
    assert race_floor(documents, "c02") == pytest.approx(9.5)  # c03 is out: not a floor
    assert race_floor({}, "c01") is None


def test_a_candidate_below_another_lower_bound_gets_no_further_round() -> None:
    documents = {"c01": _doc(1.0), "c02": _doc(2.0), "c03": _doc(1.05)}
    assert "below another candidate's lower bound 19" in (out_of_race(documents, "c01") or "")
    assert out_of_race(documents, "c02") is None
    assert out_of_race({"c01": _doc(1.0), "c03": _doc(1.05)}, "c01") is None  # overlap
    raced = {"c01": _doc(1.0, SearchStatus.RACED_OUT)}
    assert (out_of_race(raced, "c01") or "").startswith("raced-out")
    assert out_of_race(documents, "c09") is None  # not searched yet


def test_a_search_cut_short_counts_as_unfinished_so_a_resume_goes_on() -> None:
    document = _doc(1.0, trials=2)
    assert finished_trials(document) == 2 and finished_trials(None) == 0
    running = dataclasses.replace(document.trials[1], status=SearchStatus.RUNNING)
    cut = dataclasses.replace(document, trials=(document.trials[0], running))
    assert finished_trials(cut) == 1  # round 2 is searched again on resume


def test_standings_rank_by_capacity_and_compare_with_the_best() -> None:
    documents = {"c01": _doc(1.0), "c02": _doc(2.0), "c03": _doc(1.9)}
    race = race_result(documents, CANDIDATES, GIVEN_ORIGIN)
    assert race.best == "c02" and [e.name for e in race.entries] == ["c02", "c03", "c01"]
    by_name = {e.name: e for e in race.entries}
    assert by_name["c02"].versus_best is None
    assert by_name["c01"].versus_best is not None
    assert by_name["c01"].versus_best.change is CapacityChange.LOWER
    assert by_name["c03"].versus_best is not None
    assert by_name["c03"].versus_best.change is CapacityChange.UNDECIDED  # overlapping
    assert race.gain_over_given is not None
    assert race.gain_over_given.change is CapacityChange.HIGHER
    assert race.gain_over_given.low == pytest.approx(2.0 * 9.5 / 10.4)
    assert race.exit_code == 0


def test_a_raced_out_candidate_is_never_the_best() -> None:
    documents = {"c01": _doc(1.0), "c02": _doc(5.0, SearchStatus.RACED_OUT)}
    race = race_result(documents, CANDIDATES, GIVEN_ORIGIN)
    assert race.best == "c01" and race.entries[-1].name == "c02"
    assert race.gain_over_given is None  # the best is the given args


def test_exit_codes_follow_the_best_candidate() -> None:
    undecided = dataclasses.replace(
        _doc(1.0), status=SearchStatus.ABOVE_RANGE,
        capacity=CapacityEstimate(None, 16.0, None, 0.95, None))
    assert race_result({"c01": undecided}, CANDIDATES, GIVEN_ORIGIN).exit_code == 3
    invalid = dataclasses.replace(_doc(1.0), status=SearchStatus.INVALID)
    assert race_result({"c01": invalid, "c02": invalid}, CANDIDATES,
                       GIVEN_ORIGIN).exit_code == 4
    below = dataclasses.replace(_doc(1.0), require=20.0)  # [9.5, 10.4] below 20
    assert race_result({"c01": below}, CANDIDATES, GIVEN_ORIGIN).exit_code == 1


# --- a race folder -------------------------------------------------------------------------

def _race_folder(root: Path) -> Path:
    folder = root / "race-tune"
    for name, scale in (("c01", 1.0), ("c02", 2.5), ("c03", 1.2)):
        sub = folder / VARIANTS_DIR / name
        sub.mkdir(parents=True)
        write_capacity(sub, search_document(scale=scale, variant=name))
    (folder / CANDIDATES_FILE).write_text(json.dumps(
        {name: {"args": {}, "changed": dict(c.changed), "origin": c.origin}
         for name, c in CANDIDATES.items()}))
    return folder


def test_report_renders_a_race_folder(tmp_path: Path) -> None:
    folder = _race_folder(tmp_path)
    said: list[str] = []
    code = main(["report", str(folder)], say=said.append, complain=said.append)
    text = "\n".join(said)
    assert code == 0, text
    assert "capacity race: c02 carries the most" in text, text
    assert "the best against the scenario's own args" in text, text
    race = json.loads((folder / "race.json").read_text())
    assert race["best"] == "c02" and [e["name"] for e in race["entries"]] == [
        "c02", "c03", "c01"]
    assert "Capacity race" in (folder / "summary.md").read_text()
    html = (folder / "report.html").read_text()
    assert 'id="race-standings"' in html and "max-num-seqs=64" in html


def test_a_race_folder_missing_a_candidate_is_named(tmp_path: Path) -> None:
    folder = _race_folder(tmp_path)
    (folder / CANDIDATES_FILE).write_text(json.dumps({}))
    said: list[str] = []
    code = main(["report", str(folder)], say=said.append, complain=said.append)
    assert code == 2 and "no candidate c01, c02, c03" in "\n".join(said)


# --- the scenario --------------------------------------------------------------------------

CAPACITY_TUNE = ["tune={objective: capacity, baseline: true, grid: {max-num-seqs: [2, 4]}}",
                 "capacity={low: 1, high: 8, tolerance: 25%}"]


def test_objective_capacity_needs_a_capacity_section_and_a_grid() -> None:
    from vllm_slo.capacity_race import check_race

    scenario, _ = load_scenario("capacity-cpu", CAPACITY_TUNE)
    check_race(scenario)  # raises nothing
    no_capacity, _ = load_scenario("chat", [
        "tune={objective: capacity, grid: {max-num-seqs: [2, 4]}}"])
    with pytest.raises(ScenarioError, match="add a capacity: section"):
        check_race(no_capacity)
    searched, _ = load_scenario("capacity-cpu", [
        "tune={objective: capacity, search: [{arg: max-num-seqs, start: 2, factor: 2, "
        "until: [no_gain]}]}"])
    with pytest.raises(ScenarioError, match=r"list their values in tune\.grid"):
        check_race(searched)
    repeated, _ = load_scenario("capacity-cpu", [*CAPACITY_TUNE, "tune.trials=2"])
    with pytest.raises(ScenarioError, match=r"capacity\.trials"):
        check_race(repeated)


# --- racing on the simulated stand-in ------------------------------------------------------

SLOS = (PercentileSlo("ttft", 90.0, 0.5),)
SERVERS = {"c01": StandIn(slots=4), "c02": StandIn(slots=8), "c03": StandIn(slots=6)}


def _simulated_race(seed: int, racing: bool) -> tuple[str | None, int]:
    """Each candidate searched in turn (floor: the best lower bound so far when racing): the
    best by capacity and the steps it took."""
    rng = np.random.default_rng(seed)
    lows: dict[str, float] = {}
    values: dict[str, float] = {}
    steps = 0
    for name, server in SERVERS.items():
        floor = max((low for other, low in lows.items() if other != name), default=None)
        outcome = search(rng, SLOS, SearchRange(2.0, 32.0, 0.1, floor=floor if racing
                                                else None), 10.0, 60.0, server=server)
        steps += outcome.steps
        if outcome.status is SearchStatus.RACED_OUT:
            continue
        if outcome.estimate.low is not None:
            lows[name] = outcome.estimate.low
        if outcome.estimate.value is not None:
            values[name] = outcome.estimate.value
    best = max(values, key=values.__getitem__) if values else None
    return best, steps


def test_racing_finds_the_best_in_fewer_steps() -> None:
    raced = [_simulated_race(seed, racing=True) for seed in range(12)]
    full = [_simulated_race(seed, racing=False) for seed in range(12)]
    assert sum(best == "c02" for best, _ in raced) >= 11  # 8 slots carry the most
    assert sum(best == "c02" for best, _ in full) >= 11
    assert sum(s for _, s in raced) < 0.9 * sum(s for _, s in full)
