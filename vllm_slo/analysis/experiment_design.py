"""An experiment's design, before and while it runs (pure): the SequentialDesign its scenario
asks for (variants, trials, compare: cells = Holm's family, alpha, effect, test), whether it can
ever decide (`check_design`, before any server starts), the server time it will take, after
each interleaved round each compared cell's decision at that look (`look_decisions`) and
whether to run another (`next_action`), and why its rounds ended (`Stopping`, the record
stopping.json holds). The procedure itself (spending,
boundaries, tests) is `analysis.sequential`; running the rounds is the experiment runner's."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from vllm_slo.analysis.comparison import Group, pair_quantisation, per_pair_alpha
from vllm_slo.analysis.quantised_cells import decision_over_box, pair_bias_log
from vllm_slo.analysis.trials import trial_cell_value
from vllm_slo.scenarios.model import Scenario
from vllm_slo.stats.sequential import (
    MAX_SEQUENTIAL_TRIALS,
    CellDecision,
    DesignCheck,
    SequentialDesign,
    all_decided,
    check_design,
    decide_cells,
)

StopReason = Literal["decided", "max_trials", "budget", "interrupted"]
# a launched server's start-up (until ready) when no earlier run of the scenario measured one:
# an H200 took about 50-120 s as the torch.compile cache warmed (a 7B shape: 55-99 s,
# results/h200-7b-startup-2026-12-03/README.md), vLLM's CPU build 35-45 s on a 2-core CI host
DEFAULT_STARTUP_S = {"gpu": 90.0, "cpu": 45.0}


def sequential_design(scenario: Scenario) -> SequentialDesign | None:
    """The design of the scenario's comparisons (each candidate against the baseline, one Holm
    family of `compare.cells` each, at `per_pair_alpha`: Bonferroni over the pairs); None
    without variants to compare."""
    if len(scenario.variants) < 2 or scenario.max_trials > MAX_SEQUENTIAL_TRIALS:
        return None  # (a fixed count above the cap decides whatever the test)
    compare = scenario.compare
    return SequentialDesign(scenario.min_trials, scenario.max_trials,
                            per_pair_alpha(compare.alpha, len(scenario.variants)),
                            compare.effect, len(compare.cells), compare.test)


def design_check(scenario: Scenario) -> DesignCheck | None:
    """`check_design` of the scenario's design (None: nothing is compared)."""
    design = sequential_design(scenario)
    return None if design is None else check_design(design)


def refusal_line(scenario: Scenario, check: DesignCheck) -> str:
    """The one line `vllm-slo run` refuses an undecidable design with."""
    smallest = check.smallest_trials
    override = ("" if smallest is None else
                f" (override: trials.max={smallest})" if scenario.trials.sequential
                else f" (override: trials={smallest})")
    return (f"scenario {scenario.name!r} can never decide: {check.reason}{override}; "
            "--force runs it anyway")


@dataclass(frozen=True, slots=True)
class NextAction:
    """After a round: stop (with the reason) or run another."""

    stop: bool
    reason: StopReason | None
    detail: str

    @classmethod
    def another(cls, detail: str) -> NextAction:
        return cls(False, None, detail)


def next_action(decisions: Sequence[CellDecision], rounds_done: int,
                design: SequentialDesign | None, max_rounds: int, elapsed_s: float,
                budget_s: float | None, rounds_kept: int = 0) -> NextAction:
    """Whether to run another interleaved round after `rounds_done` (one trial per variant
    each), `elapsed_s` of wall time since the first: stop when every compared cell is decided
    (from the design's first look on), at `max_rounds`, or when one more round, as long as the
    rounds so far took on average, would end past `budget_s`. Without a design (nothing
    compared) only `max_rounds` and the budget stop it.

    A resumed experiment replays the `rounds_kept` rounds an earlier session ran (their trials
    are on disk; that session judged the budget after each and went on): the budget is judged
    only from the last of them on, before a round this session starts, with `elapsed_s` the
    recorded time of every session so far (so the average round is that over `rounds_done`)."""
    if rounds_done >= max_rounds:
        return NextAction(True, "max_trials", f"{rounds_done} of {max_rounds} round(s) run")
    if design is not None and rounds_done >= design.min_trials and all_decided(decisions):
        return NextAction(True, "decided", "every compared cell decided")
    if budget_s is not None and rounds_done > 0 and rounds_done >= rounds_kept:
        per_round_s = elapsed_s / rounds_done
        if elapsed_s + per_round_s > budget_s:
            return NextAction(True, "budget",
                              f"another round (~{per_round_s:.0f} s) would end past the "
                              f"budget: {elapsed_s:.0f} s of {budget_s:.0f} s spent")
    undecided = sum(1 for d in decisions if d.decision == "undecided")
    return NextAction.another(f"{undecided} compared cell(s) undecided" if decisions
                              else f"round {rounds_done + 1} of {max_rounds}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Stopping:
    """Why an experiment's rounds ended (the runner writes it to stopping.json after every
    round; the summary echoes it): `rounds` completed (one trial per variant each), `looks`
    taken at the compared cells (from trials.min on)."""

    reason: StopReason
    rounds: int
    looks: int
    min_trials: int
    max_trials: int
    budget_s: float | None
    elapsed_s: float
    detail: str

    @classmethod
    def from_json_dict(cls, data: Mapping[str, Any]) -> Stopping:
        return cls(reason=data["reason"], rounds=int(data["rounds"]), looks=int(data["looks"]),
                   min_trials=int(data["min_trials"]), max_trials=int(data["max_trials"]),
                   budget_s=data.get("budget_s"), elapsed_s=float(data["elapsed_s"]),
                   detail=str(data.get("detail", "")))

    @property
    def text(self) -> str:
        """`stopped: decided after 4 round(s), 2 look(s) (trials 3-10 per variant)`."""
        span = (f"{self.max_trials}" if self.min_trials == self.max_trials
                else f"{self.min_trials}-{self.max_trials}")
        reason = self.reason.replace("_", " ")
        return (f"stopped: {reason} after {self.rounds} round(s), {self.looks} look(s) "
                f"(trials {span} per variant, {self.elapsed_s / 60:.1f} min)"
                + (f": {self.detail}" if self.detail else ""))


def looks_taken(rounds: int, min_trials: int) -> int:
    """Looks at the compared cells after `rounds` rounds: one per round from trials.min on."""
    return max(0, rounds - min_trials + 1)


def round_values(baseline: Group, candidate: Group, cells: Sequence[str]
                 ) -> dict[str, tuple[list[float], list[float]]]:
    """Per cell, each arm's per-trial values in round order (its trials by position), NaN in
    the place of an invalid trial or one without a value: what a look tests."""
    def values(group: Group, cell: str) -> list[float]:
        result = []
        for trial in sorted(group.trials, key=lambda t: t.position):
            value = trial_cell_value(trial, cell) if trial.valid else None
            result.append(math.nan if value is None else value)
        return result

    return {cell: (values(baseline, cell), values(candidate, cell)) for cell in cells}


def look_decisions(design: SequentialDesign, groups: Sequence[Group], cells: Sequence[str],
                   trials_per_arm: int) -> tuple[tuple[str, tuple[CellDecision, ...]], ...]:
    """Each candidate's decisions against the baseline (the first group) at the look after
    `trials_per_arm` rounds: (candidate label, one decision per cell)."""
    baseline = groups[0]
    return tuple((candidate.label, _boxed(design, baseline, candidate, cells, trials_per_arm))
                 for candidate in groups[1:])


def _boxed(design: SequentialDesign, baseline: Group, candidate: Group, cells: Sequence[str],
           trials_per_arm: int) -> tuple[CellDecision, ...]:
    """`decide_cells` of a pair, each quantised cell's decision held against its phase-bias
    box (`quantised_cells.decision_over_box`), so the runner's stopping rule and the summary
    see the box as `compare_pair` does."""
    values = round_values(baseline, candidate, cells)
    quantised = pair_quantisation(baseline, candidate, cells)
    decided = []
    for decision in decide_cells(design, trials_per_arm, values):
        base, cand = values[decision.cell]
        boxed = decision_over_box(decision, base, cand,
                                  pair_bias_log(quantised.get(decision.cell, ())),
                                  design.test, design.effect)
        decided.append(decision if boxed is None else boxed.decision)
    return tuple(decided)


@dataclass(frozen=True, slots=True)
class TimeEstimate:
    """Expected server (GPU) time of an experiment: server starts × start-up + the trials'
    windows (warm-up + measured + cool-down), for its min and its max trials."""

    startup_s: float
    startup_source: str  # where the start-up figure comes from, for the terminal
    window_s: float
    arms: int
    min_trials: int
    max_trials: int
    together: bool  # side by side: a round's servers run at the same time
    budget_s: float | None = None  # trials.budget: wall time no round may end past

    def server_starts(self, trials: int) -> int:
        return self.arms * trials

    def server_time_s(self, trials: int) -> float:
        return self.server_starts(trials) * (self.startup_s + self.window_s)

    def wall_time_s(self, trials: int) -> float:
        per_round = self.startup_s + self.window_s
        return trials * per_round * (1 if self.together else self.arms)

    def line(self) -> str:
        """`expected server time: 6-20 server starts × 90 s start-up (...) + 25 s windows
        = 11.5-38.3 min (wall 11.5-38.3 min)`."""
        low, high = self.min_trials, self.max_trials

        def span(values: tuple[float, float], unit: str = "") -> str:
            return (f"{values[0]:.0f}{unit}" if values[0] == values[1]
                    else f"{values[0]:.0f}-{values[1]:.0f}{unit}")

        def minutes(seconds: tuple[float, float]) -> str:
            a, b = (s / 60.0 for s in seconds)
            return f"{a:.1f} min" if math.isclose(a, b) else f"{a:.1f}-{b:.1f} min"

        starts = span((self.server_starts(low), self.server_starts(high)))
        text = (f"expected server time: {starts} server start(s) × {self.startup_s:.0f} s "
                f"start-up ({self.startup_source}) + {self.window_s:g} s window(s) each = "
                f"{minutes((self.server_time_s(low), self.server_time_s(high)))}")
        if self.together:
            text += (f" (wall {minutes((self.wall_time_s(low), self.wall_time_s(high)))}, "
                     "the variants side by side)")
        if self.budget_s is not None:
            rounds = self.rounds_in_budget()
            text += (f"; budget {self.budget_s / 60:g} min of wall time: about {rounds} "
                     f"round(s)" + (" (fewer than trials.min: the budget ends it first)"
                                    if rounds < low else ""))
        return text

    def rounds_in_budget(self) -> int:
        """Rounds that end within the budget at this estimate (all of them without one)."""
        per_round_s = self.wall_time_s(1)
        if self.budget_s is None or per_round_s <= 0:
            return self.max_trials
        return min(self.max_trials, int(self.budget_s // per_round_s))


def time_estimate(scenario: Scenario, startup_s: float, startup_source: str) -> TimeEstimate:
    """The scenario's expected server time with this start-up figure (attach mode: no server
    starts, so no start-up)."""
    traffic = scenario.traffic
    arms = max(1, len(scenario.variants))
    if scenario.server.url is not None:
        startup_s, startup_source = 0.0, "attach mode: no server starts"
    return TimeEstimate(startup_s, startup_source,
                        traffic.warmup_s + traffic.duration_s + traffic.cooldown_s, arms,
                        scenario.min_trials, scenario.max_trials,
                        scenario.side_by_side is not None, scenario.trials.budget_s)


def trial_order(variant_names: list[str], trials: int) -> list[tuple[str, int]]:
    """Balanced interleaving: round r runs the variants forward when r is even, backward when
    odd (A B, B A, A B, ...), so drift over time hits every variant alike.
    Returns (variant, trial number from 1) in execution order."""
    order: list[tuple[str, int]] = []
    for round_index in range(trials):
        names = variant_names if round_index % 2 == 0 else list(reversed(variant_names))
        order.extend((name, round_index + 1) for name in names)
    return order
