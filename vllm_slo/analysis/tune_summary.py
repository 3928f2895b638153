"""A tune's summary from its results (pure): the ranking, the Pareto front, the exit code, the
warnings and the recommendation, and tune.json's content (schema
reports/schema/tune.schema.json). The decisions themselves are `tuning.py`'s; rendering is
`render/tune_html.py` and `render/tune_text.py`; `reports/tune_report.py` writes the files."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_slo.analysis.tuning import (
    CandidateResult,
    Gain,
    RankEntry,
    Ranking,
    SearchFinding,
    gain_over_given,
    given_candidate,
    machines_warning,
    median_or_nan,
    pareto_front,
    rank_candidates,
)
from vllm_slo.analysis.wording import format_change_interval, format_ratio
from vllm_slo.run_folder.run_files import RECOMMENDED_CONFIG_FILE
from vllm_slo.scenarios.errors import ExitCode
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.server_configs import engine_args_to_argv
from vllm_slo.serialise import derive, json_field

TUNE_SCHEMA_VERSION = 1
TESTABLE_TRIALS = {  # what each per-trial test needs before it can be significant
    "welch-log": "it needs >= 2 valid trials a candidate",
    "mann-whitney": "4 + 4 trials pass alone, not Holm over 2; 5 + 5 pass Holm over up to 6",
}
OBJECTIVE_CELLS = {  # how each objective's numbers are formatted
    "goodput": "request_throughput.mean",
    "output_throughput": "output_throughput.mean",
    "request_throughput": "request_throughput.mean",
}


@dataclass(frozen=True, slots=True)
class TuneResult:
    scenario: Scenario  # as given, tune section included
    run_id: str
    trials_per_candidate: int
    candidates: Sequence[CandidateResult]  # in the order they were first needed
    searches: Sequence[SearchFinding]
    latency_cell: str  # the Pareto front's latency axis
    throughput_cell: str
    interrupted: bool
    model: str  # the model argument of `vllm serve` in the recommended command


def args_text(args: dict[str, Any]) -> str:
    return " ".join(f"{flag}={value}" for flag, value in args.items()) or "as given"


def recommended_command(model: str, args: dict[str, Any]) -> str:
    return shlex.join(["vllm", "serve", model, *engine_args_to_argv(dict(args))])


def tune_exit_code(ranking: Ranking, candidates: Sequence[CandidateResult],
                   interrupted: bool) -> ExitCode:
    """4 when interrupted or nothing valid ran; with a recommendation its SLO verdict (PASS,
    or no SLO: 0; INCONCLUSIVE: 3); 1 when every candidate that ran failed an SLO."""
    if interrupted:
        return ExitCode.INVALID_MEASUREMENT
    if ranking.best is not None:
        best = next(c for c in candidates if c.name == ranking.best)
        return ExitCode.INCONCLUSIVE if best.slo_verdict == "INCONCLUSIVE" else ExitCode.PASS
    if any(c.slo_verdict == "FAIL" for c in candidates):
        return ExitCode.SLO_FAILED
    return ExitCode.INVALID_MEASUREMENT


def gain_json(gain: Gain | None) -> dict[str, Any] | None:
    """The gain over the as-given args as tune.json states it (`ratio` null, or the ratio with
    its interval)."""
    if gain is None:
        return None
    ratio = None if gain.ratio is None else {
        "value": gain.ratio, "ci_low": gain.ci_low, "ci_high": gain.ci_high,
        "confidence": gain.confidence}
    return {"given": gain.given, "best": gain.best, "ratio": ratio, "p_value": gain.p_value,
            "holm": gain.holm, "significant": gain.significant, "testable": gain.testable}


def gain_text(gain: Gain) -> str:
    """`c03 over c01 (as given): ×3.38 [×3.00, ×3.79], p=0.029 (significant, Holm ...)`."""
    if gain.ratio is None:
        return f"{gain.best} is the scenario's own args (as given): no gain from tuning here"
    p = "" if gain.p_value is None else f", p={gain.p_value:.2g}"
    standing = ("significant" if gain.significant else
                "too few trials to tell" if not gain.testable else "not significant")
    family = ("Holm over the ranking's comparisons with the best" if gain.holm else
              "one comparison: the as-given args are not eligible")
    return (f"{gain.best} over {gain.given} (as given): "
            f"{format_ratio(gain.ratio, gain.ci_low, gain.ci_high)}{p} ({standing}, {family}; "
            "the best was picked by these trials, so the estimate leans high)")


def versus_text(cell: str, entry: RankEntry) -> str:
    if entry.versus_best is None:
        return "" if entry.eligible else "n/a"
    comparison = entry.versus_best
    p = "" if comparison.p_adjusted is None else f", p={comparison.p_adjusted:.2g}"
    return f"{format_change_interval(cell, comparison)}{p}"




@dataclass(frozen=True, slots=True, kw_only=True)
class Recommendation:
    """tune.json's `recommended`: the candidate, its args, the command and config file."""

    candidate: str
    changed: Mapping[str, Any]
    args: Mapping[str, Any]
    command: str
    config_file: str = RECOMMENDED_CONFIG_FILE
    tied_with: tuple[str, ...]
    note: str


def ranking_entries(ranking: Ranking) -> tuple[RankEntry, ...]:
    return ranking.entries


@dataclass(frozen=True, slots=True, kw_only=True)
class TuneSummary:
    """What a tune decided, from its results; its fields in tune.json's order (schema
    reports/schema/tune.schema.json; `serialise.to_json` writes it, the writer redacts
    secrets). The result's facts tune.json states are copied into fields of their own."""

    schema_version: int = field(default=TUNE_SCHEMA_VERSION, init=False)
    kind: str = field(default="tune", init=False)
    result: TuneResult = json_field(skip=True)
    run_id: str = field(init=False)
    objective: str = field(init=False)
    alpha: float = field(init=False)
    test: str = field(init=False)
    trials_per_candidate: int = field(init=False)
    interrupted: bool = field(init=False)
    candidates: Sequence[CandidateResult] = field(init=False)
    ranking: Ranking = json_field(convert=ranking_entries)  # written as its entries
    latency_cell: str = json_field(group="pareto", init=False)
    throughput_cell: str = json_field(group="pareto", init=False)
    front: list[str] = json_field(group="pareto")  # the Pareto front's candidates
    searches: Sequence[SearchFinding] = field(init=False)
    recommended: Recommendation | None = field(init=False)
    # the recommendation against the scenario's own args, when run
    gain: Gain | None = json_field(default=None, key="gain_over_given", convert=gain_json)
    exit_code: ExitCode
    warnings: list[str]
    # started candidates: (throughput, latency) medians
    points: dict[str, tuple[float, float]] = json_field(skip=True)
    best: CandidateResult | None = json_field(skip=True)  # the recommended candidate
    # the recommended `vllm serve` command line ("" without one)
    command: str = json_field(skip=True)
    note: str = json_field(skip=True)  # how the recommendation stands against the others

    def __post_init__(self) -> None:
        result, best = self.result, self.best
        spec = result.scenario.tune
        assert spec is not None
        derive(self, run_id=result.run_id, objective=spec.objective,
               alpha=result.scenario.compare.alpha, test=result.scenario.compare.test,
               trials_per_candidate=result.trials_per_candidate,
               interrupted=result.interrupted, candidates=result.candidates,
               latency_cell=result.latency_cell, throughput_cell=result.throughput_cell,
               searches=result.searches,
               recommended=None if best is None else Recommendation(
                   candidate=best.name, changed=best.changed, args=best.args,
                   command=self.command, tied_with=self.ranking.tied_with_best,
                   note=self.note))

    @property
    def objective_cell(self) -> str:
        spec = self.result.scenario.tune
        assert spec is not None
        return OBJECTIVE_CELLS[spec.objective]


def build_tune_summary(result: TuneResult) -> TuneSummary:
    spec = result.scenario.tune
    assert spec is not None
    alpha, test = result.scenario.compare.alpha, result.scenario.compare.test
    candidates = list(result.candidates)
    by_name = {c.name: c for c in candidates}
    ranking = rank_candidates(candidates, alpha, test)
    points = {c.name: (median_or_nan(c.throughput_values), median_or_nan(c.latency_values))
              for c in candidates if c.started}
    front = pareto_front(points)
    exit_code = tune_exit_code(ranking, candidates, result.interrupted)
    warnings = []
    if result.interrupted:
        warnings.append("the tune was interrupted: the ranking covers the trials that finished")
    if spec.search:
        warnings.append("search steps run one after another (each step's trials back to back), "
                        "so drift over time is not balanced between steps as it is between "
                        "grid candidates")
    untestable = [e.name for e in ranking.entries
                  if e.versus_best is not None and not e.versus_best.testable]
    if untestable:
        warnings.append(f"{', '.join(untestable)}: too few valid trials ever to differ "
                        f"significantly from the best ({test}, alpha {alpha:g} after Holm; "
                        f"{TESTABLE_TRIALS[test]}): the ranking orders medians only there "
                        "(raise tune.trials)")
    machines = machines_warning(candidates)
    if machines:
        warnings.append(machines)
    warnings += [f"{c.objective_quantised}: its comparisons are tested over that bias"
                 for c in candidates if c.objective_quantised]
    gain = gain_over_given(candidates, ranking, alpha, test)
    given = given_candidate(candidates)
    if spec.baseline and given is not None and not given.objective_values:
        warnings.append(f"the scenario's own args ({given.name}, as given) ran no valid trial"
                        f"{' (its server did not start)' if not given.started else ''}: the "
                        "tune cannot say what tuning buys over them")
    best = by_name.get(ranking.best) if ranking.best else None
    command = recommended_command(result.model, dict(best.args)) if best else ""
    note = ""
    if best is not None:
        note = (f"not significantly better than {', '.join(ranking.tied_with_best)} "
                f"(alpha {alpha:g}, Holm): on this evidence they are as good"
                if ranking.tied_with_best else
                "significantly better than every other eligible candidate" if
                len([e for e in ranking.entries if e.eligible]) > 1 else
                "the only eligible candidate")
    return TuneSummary(result=result, ranking=ranking, points=points, front=front,
                       exit_code=exit_code, warnings=warnings, best=best, command=command,
                       note=note, gain=gain)
