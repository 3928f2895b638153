"""A tune's decisions as pure functions: the grid's candidates, each search step's next value
and when a search stops, the ranking (one candidate is better than another only when the
difference across trials is significant), the Pareto front of latency against throughput and
the recommendation. The orchestration (servers, trials, folders) is `vllm_slo.tuner`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vllm_slo.analysis.trials import machines_text
from vllm_slo.scenarios.server_spec import EngineArgValue
from vllm_slo.scenarios.tune_spec import SearchSpec
from vllm_slo.serialise import derive, json_field
from vllm_slo.stats.trial_statistics import (
    Comparison,
    TrialTest,
    compare_trials,
    with_holm,
)

Args = Mapping[str, EngineArgValue]


def grid_candidates(grid: Mapping[str, Sequence[EngineArgValue]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the first flag varying slowest."""
    flags = list(grid)
    return [dict(zip(flags, values, strict=True))
            for values in itertools.product(*(grid[flag] for flag in flags))]


def args_key(args: Args) -> tuple[tuple[str, str], ...]:
    """An order-free identity for a set of server args (two candidates with the same args are
    one candidate)."""
    return tuple(sorted((flag, repr(value)) for flag, value in args.items()))


def _same_value(given: Any, effective: Any) -> bool:
    if isinstance(given, bool) or isinstance(effective, bool):
        return given is effective
    if isinstance(given, (int, float)) and isinstance(effective, (int, float)):
        return float(given) == float(effective)
    return str(given) == str(effective)


def same_server(args: Args, ran_args: Args, ran_effective: Mapping[str, Any]) -> bool:
    """Pure: `args` start the server a candidate that ran with `ran_args` already was: they
    differ from `ran_args` only by flags it did not set, each at the value that server stated
    it ran with (`ran_effective`, its defaults included: servers.server_facts), e.g. a search
    step of max-num-batched-tokens 8192 from vLLM's defaults where its default is 8192."""
    if any(flag not in args or repr(args[flag]) != repr(value)
           for flag, value in ran_args.items()):
        return False
    added = {flag: value for flag, value in args.items() if flag not in ran_args}
    return bool(added) and all(flag in ran_effective and _same_value(value, ran_effective[flag])
                               for flag, value in added.items())


def search_start(search: SearchSpec, base_args: Args) -> float:
    """The first value: a number, or the value of the named server arg (ValueError when the
    base configuration does not set it)."""
    if not isinstance(search.start, str):
        return float(search.start)
    value = base_args.get(search.start)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"tune.search over {search.arg!r} starts from {search.start!r}, which the server "
            f"args do not set to a number ({value!r}); set server.args.{search.start} or give "
            f"start as a number")
    return float(value)


def _integral(value: float) -> bool:
    return float(value).is_integer()


def search_values(search: SearchSpec, start: float) -> list[int | float]:
    """The values a search tries, in order: start, then times `factor` or plus `step`, while
    at most `max` and for at most `max_steps` steps. Whole numbers stay ints (token counts,
    sequence counts); fractions are rounded to 6 decimals (0.8 + 0.05 is 0.85)."""
    whole = _integral(start) and (search.factor is None or _integral(search.factor)) and (
        search.step is None or _integral(search.step))
    values: list[int | float] = []
    value = start
    while len(values) < search.max_steps and (search.max is None or value <= search.max + 1e-9):
        values.append(round(value) if whole else round(value, 6))
        if search.factor is not None:
            value = value * search.factor
        else:
            assert search.step is not None  # a SearchSpec sets exactly one of factor and step
            value = value + search.step
    return values


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateResult:
    """What a candidate's trials showed, as the tuner's decisions need it (and tune.json's
    `candidates` states it)."""

    name: str
    origin: str  # "grid", "search 1 (max-num-seqs) step 2"
    changed: Mapping[str, Any]  # the args that differ from the scenario's own
    args: Mapping[str, Any]  # the full server args this candidate ran with
    objective_values: tuple[float, ...]  # per valid trial
    median: float | None = field(init=False)  # of objective_values
    start_failures: tuple[str, ...] = ()  # per trial whose server did not come up
    invalid_trials: int = 0  # trials that ran but whose measurement is invalid
    slo_verdict: str = "none"  # PASS | FAIL | INCONCLUSIVE across trials; none: no SLO
    preemptions: float | None = None  # vLLM's count over the trials; None: not exported
    throughput_values: tuple[float, ...] = ()  # output tokens/s per valid trial
    latency_values: tuple[float, ...] = ()  # the Pareto latency cell per valid trial
    gpu_sets: tuple[str, ...] = ()  # the GPU UUID sets ("a,b") its trials ran on; () on CPU
    #: the objective's quantisation (`quantised_cells`: a closed loop whose trials completed
    #: identical request counts), its text; None: not quantised
    objective_quantised: str | None = None
    #: that side's bound on the log-bias of the objective (0: none); a comparison of two
    #: candidates is tested over the sum of theirs (`compare_trials`' ``bias_log``)
    objective_bias_log: float = 0.0

    def __post_init__(self) -> None:
        values = self.objective_values
        derive(self, median=float(np.median(values)) if values else None)

    @property
    def started(self) -> bool:
        return not self.start_failures

    @property
    def eligible(self) -> bool:
        """May be recommended: every server started, a valid trial, and no SLO failed."""
        return self.started and bool(self.objective_values) and self.slo_verdict != "FAIL"

    @property
    def why_ineligible(self) -> str | None:
        if not self.started:
            return f"server did not start ({len(self.start_failures)} trial(s))"
        if not self.objective_values:
            return "no valid trial"
        if self.slo_verdict == "FAIL":
            return "an SLO failed"
        return None


def stop_reason(search: SearchSpec, steps: Sequence[CandidateResult]) -> str | None:
    """Why a search stops after its latest step (None: go on). Conditions are checked in the
    order `until` lists them; `no_gain` compares the latest step's objective median with the
    previous step's."""
    latest = steps[-1]
    for condition in search.until:
        if condition == "start_failure" and not latest.started:
            return "the server did not start"
        if condition == "preemptions" and (latest.preemptions or 0) > 0:
            return f"vLLM preempted {latest.preemptions:g} request(s)"
        if condition == "slo_fail" and latest.slo_verdict == "FAIL":
            return "an SLO failed"
        if condition == "no_gain" and len(steps) >= 2:
            previous, now = steps[-2].median, latest.median
            if now is None or (previous is not None and now <= previous):
                return "the objective did not rise"
    if not latest.started:  # nothing more can be learnt above a value that does not start
        return "the server did not start"
    return None


@dataclass(frozen=True, slots=True)
class SearchFinding:
    """What one search procedure found: its steps, why it stopped and the boundary value."""

    index: int  # 1-based, in the scenario's order
    arg: str
    values: tuple[Any, ...]  # the values tried, in order
    candidates: tuple[str, ...]  # the candidate each value ran as
    stop: str  # why it stopped ("reached max_steps or max" when no condition held)
    boundary: Any  # the last value before the stop condition held; None: none passed
    boundary_candidate: str | None


def search_finding(index: int, search: SearchSpec, values: Sequence[Any],
                   steps: Sequence[CandidateResult], stopped: str | None) -> SearchFinding:
    """The boundary is the last step before the one that stopped the search (for no_gain: the
    step before it, the best of the climb); with no stop, the last step tried."""
    names = tuple(step.name for step in steps)
    if stopped is None:
        last = len(steps) - 1
        reason = "tried every value (max_steps or max reached)"
    else:
        last = len(steps) - 2
        reason = stopped
    boundary = values[last] if last >= 0 else None
    return SearchFinding(index, search.arg, tuple(values[:len(steps)]), names, reason,
                         boundary, names[last] if last >= 0 else None)


def ratio_to_best_json(comparison: Comparison | None) -> dict[str, Any] | None:
    """A ranked candidate's ratio to the best as tune.json states it."""
    if comparison is None:
        return None
    ratio = comparison.ratio
    return {"value": ratio.value, "ci_low": ratio.ci_low, "ci_high": ratio.ci_high,
            "confidence": comparison.interval_confidence, "p_adjusted": comparison.p_adjusted,
            "significant": comparison.significant, "testable": comparison.testable}


@dataclass(frozen=True, slots=True)
class RankEntry:
    rank: int  # 1 = best median among the eligible; ineligible candidates rank after them
    name: str
    median: float | None
    eligible: bool
    why_ineligible: str | None
    standing: str = field(init=False)  # in words: best, significantly worse, ~, not eligible
    # against the best candidate (None for the best itself and the ineligible): ratio of this
    # candidate's objective to the best's with its interval, p adjusted (Holm over the family)
    versus_best: Comparison | None = json_field(default=None, key="ratio_to_best",
                                                convert=ratio_to_best_json)

    def __post_init__(self) -> None:
        derive(self, standing=_standing(self.eligible, self.why_ineligible, self.versus_best))


def _standing(eligible: bool, why_ineligible: str | None, versus_best: Comparison | None
              ) -> str:
    if not eligible:
        return f"not eligible: {why_ineligible}"
    if versus_best is None:
        return "best median"
    if versus_best.significant:
        return "significantly worse than the best"
    if not versus_best.testable:
        return "~ too few trials to tell from the best"
    return "~ not significantly different from the best"


@dataclass(frozen=True, slots=True)
class Ranking:
    entries: tuple[RankEntry, ...]
    alpha: float
    best: str | None  # the recommendation: best median among the eligible
    tied_with_best: tuple[str, ...] = field(default=())  # eligible, not significantly worse


def rank_candidates(candidates: Sequence[CandidateResult], alpha: float = 0.05,
                    test: TrialTest = "welch-log") -> Ranking:
    """Eligible candidates by objective median (higher is better), each compared with the
    best on per-trial values with the scenario's per-trial test (`compare.test`: Welch t on
    the logarithms, ratio of geometric means, as the experiment's own comparisons; or
    Mann-Whitney U with the Hodges-Lehmann ratio), over the pair's phase-bias box where an
    objective is quantised (as `compare_pair`), Holm over all comparisons with the best;
    then the ineligible, in the order given."""
    eligible = sorted((c for c in candidates if c.eligible), key=lambda c: -(c.median or 0.0))
    others = [c for c in candidates if not c.eligible]
    if not eligible:
        return Ranking(tuple(RankEntry(i, c.name, c.median, False, c.why_ineligible)
                             for i, c in enumerate(others, start=1)), alpha, None)
    best = eligible[0]
    comparisons = with_holm([compare_trials(np.array(best.objective_values),
                                            np.array(c.objective_values), alpha, test=test,
                                            bias_log=best.objective_bias_log
                                            + c.objective_bias_log)
                             for c in eligible[1:]])
    entries = [RankEntry(1, best.name, best.median, True, None)]
    entries += [RankEntry(i, c.name, c.median, True, None, comparison)
                for i, (c, comparison) in enumerate(zip(eligible[1:], comparisons, strict=True),
                                                    start=2)]
    entries += [RankEntry(len(eligible) + i, c.name, c.median, False, c.why_ineligible)
                for i, c in enumerate(others, start=1)]
    tied = tuple(e.name for e in entries[1:] if e.eligible and e.versus_best is not None
                 and not e.versus_best.significant)
    return Ranking(tuple(entries), alpha, best.name, tied)


def pareto_front(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """Names whose (throughput, latency) no other point beats on both (higher throughput,
    lower latency), by ascending latency. NaN points are never on the front."""
    finite = {n: p for n, p in points.items() if all(math.isfinite(v) for v in p)}
    front = [name for name, (tput, lat) in finite.items()
             if not any(t >= tput and lt <= lat and (t > tput or lt < lat)
                        for other, (t, lt) in finite.items() if other != name)]
    return sorted(front, key=lambda name: finite[name][1])


def median_or_nan(values: Sequence[float]) -> float:
    return float(np.median(values)) if len(values) else float("nan")


GIVEN_ORIGIN = "as given"  # the candidate of the scenario's own server args (tune.baseline)


@dataclass(frozen=True, slots=True)
class Gain:
    """What the recommendation buys over the scenario's own server args ("as given"): best /
    as-given on the objective's per-trial values. When the as-given candidate is eligible it is
    one of the ranking's comparisons with the best, and the gain is that comparison turned
    round (a ratio on logarithms, Welch's or Hodges-Lehmann's, and its interval invert
    exactly; p is the same), Holm over the ranking's family, so the page never calls one pair
    both tied and different; when it is not eligible (an SLO failed), one comparison of its
    own. `ratio` is None when the as-given candidate is itself the recommendation. The
    recommendation was picked by these same trials, so the estimate leans high (a winner's
    curse): confirm a gain that matters with an A/B of the two configs on fresh trials."""

    given: str
    best: str
    ratio: float | None = None  # best / given
    ci_low: float | None = None  # None: these trials allow no interval at this level
    ci_high: float | None = None
    confidence: float | None = None
    p_value: float | None = None  # Holm-adjusted within the ranking when `holm`
    significant: bool = False
    testable: bool = False
    holm: bool = False


def given_candidate(candidates: Sequence[CandidateResult]) -> CandidateResult | None:
    """The candidate whose args are the scenario's own (nothing changed), if one ran."""
    return next((c for c in candidates if not c.changed), None)


def _inverse(value: float | None) -> float | None:
    return None if value is None or value == 0 else 1.0 / value


def gain_over_given(candidates: Sequence[CandidateResult], ranking: Ranking,
                    alpha: float = 0.05, test: TrialTest = "welch-log") -> Gain | None:
    """The recommendation against the as-given candidate, when both exist and the as-given
    one has valid trials; else None."""
    given = given_candidate(candidates)
    best = ranking.best
    if best is None or given is None or not given.objective_values:
        return None
    if given.name == best:
        return Gain(given.name, best)
    entry = next(e for e in ranking.entries if e.name == given.name)
    if entry.versus_best is not None:  # given / best in the ranking's Holm family: inverted
        comparison = entry.versus_best
        ratio = comparison.ratio
        return Gain(given.name, best, _inverse(ratio.value), _inverse(ratio.ci_high),
                    _inverse(ratio.ci_low), comparison.interval_confidence,
                    comparison.p_adjusted, comparison.significant, comparison.testable, True)
    chosen = next(c for c in candidates if c.name == best)
    comparison = compare_trials(np.array(given.objective_values),
                                np.array(chosen.objective_values), alpha, test=test,
                                bias_log=given.objective_bias_log
                                + chosen.objective_bias_log)  # best / given
    ratio = comparison.ratio
    return Gain(given.name, best, ratio.value, ratio.ci_low, ratio.ci_high,
                comparison.interval_confidence, comparison.p_value, comparison.significant,
                comparison.testable, False)


def machines_warning(candidates: Sequence[CandidateResult]) -> str | None:
    """When the candidates' trials ran on more than one set of GPUs (a tune resumed on another
    machine), which ran where: a comparison across machines includes the machine."""
    where = machines_text([(c.name, gpus) for c in candidates for gpus in c.gpu_sets])
    if where is None:
        return None
    return (f"the trials ran on {where}: a comparison of "
            "candidates from different machines includes the machine; confirm the "
            "recommendation (and its gain) with an A/B of the two configs on one machine")
