"""A capacity race (pure): `vllm-slo tune` with `tune.objective: capacity` searches each
candidate's capacity and drops candidates that cannot be the best.

The floor: the highest lower bound among the other candidates searched so far. A candidate's
search probes the floor right after its lowest load and stops as soon as a load at or below the
floor is over capacity (stats/capacity_search.py `raced-out`): its capacity then lies below
another's lower bound. Before a later trial, a candidate whose interval's upper end lies below
the floor (a load over its capacity at or below a load under another's) is not searched
again. Each such decision compares two 95% intervals: wrong with
probability at most 10% (the union bound of capacity_comparison.py).

The best is the candidate with the highest capacity among those not raced out; every other is
compared with it by capacity ratio (lower, equivalent, undecided), and the best with the
scenario's own args ("as given") when the tune ran them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from vllm_slo.analysis.capacity import CapacityDocument, capacity_exit_code
from vllm_slo.analysis.capacity_comparison import CapacityRatio, capacity_ratio
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.stats.capacity_search import SearchStatus

OUT_OF_RACE = (SearchStatus.RACED_OUT, SearchStatus.INVALID)


@dataclass(frozen=True, slots=True, kw_only=True)
class RaceCandidate:
    """A candidate's identity as candidates.json holds it."""

    name: str
    origin: str  # "as given", "grid"
    changed: Mapping[str, object]  # server args that differ from the scenario's own


def race_floor(documents: Mapping[str, CapacityDocument], candidate: str) -> float | None:
    """The highest capacity lower bound among the other candidates' searches (None: none
    has one)."""
    lows = [doc.capacity.low for name, doc in documents.items()
            if name != candidate and doc.status not in OUT_OF_RACE
            and doc.capacity.low is not None]
    return max(lows) if lows else None


def finished_trials(document: CapacityDocument | None) -> int:
    """The trials of a candidate's search that ended (one cut short is running: it goes on)."""
    if document is None:
        return 0
    return sum(1 for trial in document.trials if trial.status is not SearchStatus.RUNNING)


def out_of_race(documents: Mapping[str, CapacityDocument], candidate: str) -> str | None:
    """Why the candidate gets no further trial (None: it runs on)."""
    document = documents.get(candidate)
    if document is None:
        return None
    if document.status in OUT_OF_RACE:
        return f"{document.status.value}: {document.reason}"
    floor = race_floor(documents, candidate)
    high = document.capacity.high
    if floor is not None and high is not None and high <= floor:
        return (f"its capacity interval ends at {high:.4g} {document.unit}, below another "
                f"candidate's lower bound {floor:.4g}")
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class RaceEntry:
    name: str
    origin: str
    changed: Mapping[str, object]
    value: float | None
    low: float | None
    high: float | None
    status: SearchStatus
    trials: int
    out_of_race: str | None  # why it stopped racing (None: it ran every trial asked)
    versus_best: CapacityRatio | None  # its capacity / the best's (None: it is the best)


@dataclass(frozen=True, slots=True, kw_only=True)
class RaceResult:
    unit: str
    best: str | None  # None: no candidate's capacity is known
    entries: tuple[RaceEntry, ...]  # the best first, then by capacity, the raced out last
    gain_over_given: CapacityRatio | None  # best / as given (None: not run, or the best)
    exit_code: int

    @property
    def best_entry(self) -> RaceEntry | None:
        return next((e for e in self.entries if e.name == self.best), None)


def _rank_key(document: CapacityDocument) -> tuple[int, float]:
    eligible = document.status not in OUT_OF_RACE and document.capacity.value is not None
    return (0 if eligible else 1, -(document.capacity.value or 0.0))


def race_result(documents: Mapping[str, CapacityDocument],
                candidates: Mapping[str, RaceCandidate], given_origin: str) -> RaceResult:
    """The race's standings from each candidate's capacity document."""
    if not documents:
        raise ValueError("a race without any searched candidate")
    order = sorted(documents, key=lambda name: _rank_key(documents[name]))
    first = documents[order[0]]
    best = order[0] if _rank_key(first)[0] == 0 else None
    entries = []
    for name in order:
        document, candidate = documents[name], candidates[name]
        versus = (None if best is None or name == best
                  else capacity_ratio(documents[best].capacity, document.capacity))
        entries.append(RaceEntry(
            name=name, origin=candidate.origin, changed=dict(candidate.changed),
            value=document.capacity.value, low=document.capacity.low,
            high=document.capacity.high, status=document.status,
            trials=len(document.trials), out_of_race=out_of_race(documents, name),
            versus_best=versus))
    given = next((name for name, c in candidates.items()
                  if c.origin == given_origin and name in documents), None)
    gain = (capacity_ratio(documents[given].capacity, documents[best].capacity)
            if best is not None and given is not None and given != best else None)
    if best is None:
        invalid = all(doc.status is SearchStatus.INVALID for doc in documents.values())
        code = ExitCode.INVALID_MEASUREMENT if invalid else ExitCode.INCONCLUSIVE
    else:
        winner = documents[best]
        code = capacity_exit_code(winner.status, winner.capacity, winner.require)
    return RaceResult(unit=first.unit, best=best, entries=tuple(entries),
                      gain_over_given=gain, exit_code=int(code))
