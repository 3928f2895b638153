"""Quantised rate cells: a closed loop of equal conversations moves in waves, every trial
completes the same number of them, and a rate's per-trial values then barely differ — not
because the rate is known that well but because every trial's window cut the waves at the same
phase. The spread between trials cannot show that phase's bias; `quantisation` bounds it so the
comparison can carry it (`stats.trial_statistics.compare_trials`' ``bias_log``). Pure.

The bound. A closed loop of U users, each finishing a request every T seconds in step, emits
its tokens (and completions) in a pattern of period T. A window of W seconds holds k whole
periods and a part r < T; what the part holds depends on the phase and lies between nothing
and a whole period's worth, against the r / T of one at the long-run rate. The window's count
is therefore off by at most one period's worth, a relative error of at most T / W = U / N for
N completions in the window (each user completes W / T). On logarithms that is at most
``-log(1 - U / N)`` either way, the side's bias bound; a pair's is the sum of its sides'.
docs/statistics.md ("Quantised throughput") gives the coverage this buys by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from vllm_slo.analysis.trials import Trial
from vllm_slo.scenarios.metrics import MetricKind, parse_cell, split_cell
from vllm_slo.stats.sequential import CellDecision
from vllm_slo.stats.statistics import Estimate
from vllm_slo.stats.trial_statistics import TrialTest, compare_trials

#: the relative step the bound is capped at (a window of about one wave: a rate off by up to
#: a factor of 100 either way, which decides nothing)
MAX_RELATIVE_STEP = 0.99


@dataclass(frozen=True, slots=True)
class Quantisation:
    """One side's quantised rate cell: every valid trial completed ``requests`` requests in its
    window under a closed loop of ``users`` users."""

    cell: str
    label: str  # the side (variant or folder)
    trials: int
    requests: int
    users: int

    @property
    def relative_step(self) -> float:
        """One more wave against the window's count: users / requests (T / W)."""
        return self.users / self.requests

    @property
    def bias_log(self) -> float:
        """The side's bound on the log-bias of its rate: -log(1 - users / requests), the step
        capped at `MAX_RELATIVE_STEP`."""
        return -math.log1p(-min(self.relative_step, MAX_RELATIVE_STEP))

    def text(self) -> str:
        bound = f"a phase bias of up to ±{min(self.relative_step, 1.0):.1%}"
        return (f"{self.cell} of {self.label} is quantised: all {self.trials} trials completed "
                f"{self.requests} requests under a closed loop of {self.users} users (waves in "
                f"step; {bound}, which the trials' spread cannot show)")


def quantisation(label: str, trials: Sequence[Trial], cell: str) -> Quantisation | None:
    """The side's quantisation of a rate cell, or None: not a rate, fewer than 2 valid trials,
    not every trial a closed loop with the same users, or request counts that differ between
    trials (their phases differ, and the spread shows the phase's effect)."""
    if parse_cell(cell).metric.kind is not MetricKind.RATE:
        return None
    valid = [t for t in trials if t.valid]
    if len(valid) < 2:
        return None
    arrivals = {(t.scenario.traffic.arrival.kind, t.scenario.traffic.arrival.users)
                for t in valid}
    if len(arrivals) != 1:
        return None
    ((kind, users),) = arrivals
    if kind != "closed":
        return None
    part, _ = split_cell(cell)
    counts = []
    for trial in valid:
        series = trial.series if part is None else trial.parts.get(part)
        if series is None or series.counted_end_unix_s is None:
            return None
        counts.append(int(series.counted_end_unix_s.size))
    return counts_quantisation(cell, label, counts, users)


def counts_quantisation(cell: str, label: str, counts: Sequence[int], users: int
                        ) -> Quantisation | None:
    """The rule on a closed loop's per-trial completion counts: quantised when >= 2 trials all
    completed the same positive number of requests."""
    if len(counts) < 2 or len(set(counts)) != 1 or counts[0] <= 0:
        return None
    return Quantisation(cell, label, len(counts), counts[0], users)


def pair_bias_log(sides: Sequence[Quantisation | None]) -> float:
    """A pair's bound on its log-ratio's bias: the sum of its quantised sides' bounds."""
    return sum(q.bias_log for q in sides if q is not None)


@dataclass(frozen=True, slots=True)
class BoxedDecision:
    """A sequential look's decision of a quantised cell, held against the phase-bias box."""

    decision: CellDecision  # the design's decision, or `undecided` where the box undid it
    box: Estimate  # the ratio over the box at the decision's own level
    without_box: str | None = None  # the design's word where the box undid it


def decision_over_box(decision: CellDecision, baseline: Sequence[float],
                      candidate: Sequence[float], bias_log: float, test: TrialTest,
                      effect: float) -> BoxedDecision | None:
    """The decision of a quantised cell (``bias_log`` > 0) over its phase-bias box, at the
    look and the level the decision shows (`CellDecision.shown_trials`, ``level_shown``): a
    `changed` cell holds only when the box's interval excludes 1, an `equivalent` one only
    when it lies within the margin (``1/(1+effect)`` to ``1+effect``); otherwise the cell is
    `undecided`, saying so. None where there is nothing to hold (no box, no test)."""
    if not bias_log > 0.0 or not decision.level_shown > 0.0:
        return None
    word = decision.decision
    alpha = 2.0 * decision.level_shown if word == "equivalent" else decision.level_shown
    n = decision.shown_trials
    base = np.asarray([v for v in baseline[:n] if math.isfinite(v) and v > 0], dtype=float)
    cand = np.asarray([v for v in candidate[:n] if math.isfinite(v) and v > 0], dtype=float)
    if base.size < 2 or cand.size < 2 or not 0.0 < alpha < 1.0:
        return None
    box = compare_trials(base, cand, alpha=alpha, test=test, bias_log=bias_log).ratio
    low, high = box.ci_low, box.ci_high
    if low is None or high is None:
        return None
    holds = {"changed": low > 1.0 or high < 1.0,
             "equivalent": 1.0 / (1.0 + effect) <= low and high <= 1.0 + effect}.get(word, True)
    if holds:
        return BoxedDecision(decision, box)
    note = (f"{word} without the closed loop's phase bias; over it the ratio is "
            f"[×{low:.3g}, ×{high:.3g}]: undecided")
    return BoxedDecision(replace(decision, decision="undecided", decision_trials=None,
                                 warnings=(*decision.warnings, note)), box, word)
