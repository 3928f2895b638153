"""Sequential experiments: after each interleaved round (one more trial per arm) the compared
cells are re-tested, and the experiment may stop as soon as every cell is decided — a change, or
equivalence within ``±effect`` — without inflating its error rates (docs/statistics.md,
"Sequential trials").

The procedure: a group-sequential design per hypothesis with Lan-DeMets O'Brien-Fleming-type
alpha spending over the information fraction ``n / max_trials`` (one look per added trial per arm
from ``min_trials`` on), its boundaries computed exactly for the Brownian-motion (normal) limit by
numerical integration and applied to each look's test as nominal p-value levels; Holm over the
compared cells as the sequentially rejective group-sequential procedure of Maurer & Bretz (2013):
a cell is tested against the boundaries of a design at ``alpha / (cells not yet rejected)``, a
rejection passes its level on (to the current and earlier looks). The change test and the
equivalence test (two one-sided tests against ratio bounds ``1/(1+effect)`` and ``1+effect``)
are two such families at level alpha each. With ``min_trials == max_trials`` there is one look,
its nominal level is alpha, and everything reduces to the fixed design: Welch (or Mann-Whitney)
with Holm.

Pure functions; the vectorized cores (``welch_log_tests``, ``mann_whitney_log_tests``,
``sequential_rejections``) are what ``decide_cells`` uses and what the calibration simulates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

import numpy as np
from scipy import optimize, stats

from vllm_slo.stats.inputs import check_alpha
from vllm_slo.stats.statistics import Estimate
from vllm_slo.stats.trial_statistics import (  # the tests' names: re-exported
    TRIAL_TESTS as TRIAL_TESTS,
)
from vllm_slo.stats.trial_statistics import TrialTest as TrialTest
from vllm_slo.stats.trial_statistics import (
    below_alpha,
    hodges_lehmann,
    holm_adjust,
    mann_whitney_null_cdf,
    welch_log_ratio,
)

CellDecisionWord = Literal["changed", "equivalent", "undecided"]
SpendingFunction = Literal["obrien-fleming", "pocock"]
SPENDING_FUNCTIONS: tuple[SpendingFunction, ...] = ("obrien-fleming", "pocock")

#: Trials per arm beyond which a sequential design is refused (its boundaries would take long to
#: integrate, and no experiment on real servers runs that many).
MAX_SEQUENTIAL_TRIALS: int = 200


@dataclass(frozen=True, slots=True)
class SequentialDesign:
    """A (possibly sequential) two-arm experiment's statistical design.

    ``min_trials``/``max_trials``: trials per arm at the first and the last look (equal: a fixed
    design); ``alpha``: familywise, over the compared cells and all looks, for "changed" and for
    "equivalent" each; ``effect``: the relative equivalence margin (ratio bounds
    ``1/(1+effect)`` and ``1+effect``); ``cells``: the compared cells (Holm's family).
    """

    min_trials: int
    max_trials: int
    alpha: float
    effect: float
    cells: int
    test: TrialTest = "welch-log"
    spending: SpendingFunction = "obrien-fleming"

    def __post_init__(self) -> None:
        if self.min_trials < 1:
            raise ValueError(f"min_trials must be >= 1, got {self.min_trials}")
        if self.max_trials < self.min_trials:
            raise ValueError(f"max_trials ({self.max_trials}) must be >= min_trials "
                             f"({self.min_trials})")
        if self.max_trials > MAX_SEQUENTIAL_TRIALS:
            raise ValueError(f"max_trials must be <= {MAX_SEQUENTIAL_TRIALS}, got "
                             f"{self.max_trials}")
        check_alpha(self.alpha)
        if not (self.effect > 0.0) or not math.isfinite(self.effect):
            raise ValueError(f"effect must be a positive relative margin, got {self.effect!r}")
        if self.cells < 1:
            raise ValueError(f"cells must be >= 1, got {self.cells}")
        if self.test not in TRIAL_TESTS:
            raise ValueError(f"test must be one of {', '.join(TRIAL_TESTS)}, got {self.test!r}")
        if self.spending not in SPENDING_FUNCTIONS:
            raise ValueError(f"spending must be one of {', '.join(SPENDING_FUNCTIONS)}, got "
                             f"{self.spending!r}")

    @property
    def looks(self) -> tuple[int, ...]:
        """Trials per arm at each look."""
        return tuple(range(self.min_trials, self.max_trials + 1))

    @property
    def sequential(self) -> bool:
        return self.max_trials > self.min_trials


@dataclass(frozen=True, slots=True)
class CellDecision:
    """One compared cell at one look.

    ``p_change``/``p_equivalence``: this look's p-values (equivalence: the larger of the two
    one-sided p), Holm-adjusted over the cells at this look. ``alpha_look``: the nominal level
    this cell's change test is held to at this look (the group-sequential boundary of its Holm
    step). ``decision_trials``: trials per arm at the look where the cell was decided (None:
    undecided); a decided cell stays decided.

    What a reader is shown is the evidence for the decision, self-consistent: ``shown_trials``
    is the look whose test decided the cell (the current look while undecided), ``p_shown`` that
    test's own (unadjusted) p there — the change test's, or the TOST's for ``equivalent`` — and
    ``level_shown`` the boundary it was held to (``p_shown < level_shown`` exactly when that look
    decided it); ``ratio`` is B/A at that look (geometric-mean ratio for welch-log,
    Hodges-Lehmann for mann-whitney) with its interval at ``1 - level_shown`` (change) or
    ``1 - 2 level_shown`` (equivalence: inside ``1 ± effect`` exactly when the TOST rejects), so
    a `changed` cell's interval excludes 1 and an `equivalent` one's lies within the margin.
    """

    cell: str
    decision: CellDecisionWord
    ratio: Estimate
    p_change: float | None
    p_equivalence: float | None
    alpha_look: float
    warnings: tuple[str, ...] = ()
    decision_trials: int | None = None
    shown_trials: int = 0
    p_shown: float | None = None
    level_shown: float = 0.0


@dataclass(frozen=True, slots=True)
class DesignCheck:
    can_decide: bool
    smallest_trials: int | None  # smallest max trials per arm that can reach significance
    reason: str  # one line for the terminal ("" when fine)


# --------------------------------------------------------------------------------------------
# alpha spending and group-sequential boundaries


def spending(fraction: float, level: float, sided: int = 2,
             function: SpendingFunction = "obrien-fleming") -> float:
    """The error spent by information fraction t (Lan & DeMets 1983).

    O'Brien-Fleming type: two-sided ``2 - 2 Phi(z_{1-level/2} / sqrt(t))``, one-sided
    ``1 - Phi(z_{1-level} / sqrt(t))``; Pocock type: ``level log(1 + (e - 1) t)``. 0 at t = 0,
    ``level`` at t = 1."""
    if fraction <= 0.0:
        return 0.0
    if fraction >= 1.0:
        return level  # exactly: a fixed design's one look is the fixed test
    t = fraction
    if function == "pocock":
        return float(level * math.log1p((math.e - 1.0) * t))
    if sided == 2:
        return float(2.0 * stats.norm.sf(stats.norm.isf(level / 2.0) / math.sqrt(t)))
    return float(stats.norm.sf(stats.norm.isf(level) / math.sqrt(t)))


def _crossing(b: float, u: np.ndarray, weights: np.ndarray, root_prev: float, root_now: float,
              sd: float, sided: int) -> float:
    upper = stats.norm.sf((b * root_now - u * root_prev) / sd)
    if sided == 2:
        upper = upper + stats.norm.sf((b * root_now + u * root_prev) / sd)
    return float(np.dot(weights, upper))


def _crossing_excess(b: float, u: np.ndarray, weights: np.ndarray, root_prev: float,
                     root_now: float, sd: float, sided: int, target: float) -> float:
    return _crossing(b, u, weights, root_prev, root_now, sd, sided) - target


@lru_cache(maxsize=512)
def nominal_levels(looks: tuple[int, ...], max_trials: int, level: float, sided: int = 2,
                   function: SpendingFunction = "obrien-fleming") -> tuple[float, ...]:
    """Nominal p-value levels, one per look, of the group-sequential design that spends
    ``spending(n / max_trials, level, sided, function)`` by look n: boundaries ``b_k`` on the z
    scale with P(first crossing at look k) equal to the spending increment, for the canonical joint
    distribution (independent increments, information proportional to trials), by recursive
    numerical integration (Jennison & Turnbull 2000, ch. 19); level = ``2 Phi(-b_k)`` two-sided,
    ``Phi(-b_k)`` one-sided. One look: ``(level,)`` exactly."""
    if sided not in (1, 2):
        raise ValueError(f"sided must be 1 or 2, got {sided}")
    check_alpha(level)
    spent = [spending(n / max_trials, level, sided, function) for n in looks]
    increments = np.diff([0.0, *spent])
    tail = 2.0 if sided == 2 else 1.0
    result: list[float] = []
    grid = weights = np.zeros(0)
    lower_limit = -12.0
    for k, (n, increment) in enumerate(zip(looks, increments, strict=True)):
        if k == 0:
            b = float(stats.norm.isf(increment / tail)) if increment > 0 else math.inf
            result.append(float(min(increment, level)) if increment > 0 else 0.0)
        else:
            n_prev = looks[k - 1]
            root_prev, root_now = math.sqrt(n_prev), math.sqrt(n)
            sd = math.sqrt(n - n_prev)
            if increment <= 1e-14 or _crossing(0.0, grid, weights, root_prev, root_now, sd,
                                               sided) <= increment:
                b = math.inf if increment <= 1e-14 else 0.0
            else:
                b = float(optimize.brentq(
                    _crossing_excess, 0.0, 40.0, xtol=1e-10,
                    args=(grid, weights, root_prev, root_now, sd, sided, increment)))
            result.append(0.0 if math.isinf(b) else float(tail * stats.norm.sf(b)))
        # the sub-density of Z_k on its continuation region (-b, b) or (-inf, b)
        high = min(b, 12.0)
        low = -high if sided == 2 else lower_limit
        if k == 0:
            points = _grid(low, high, 0.02)
            density = stats.norm.pdf(points)
        else:
            n_prev = looks[k - 1]
            scale = math.sqrt((n - n_prev) / n)  # sd of Z_k given Z_{k-1}, on the z scale
            points = _grid(low, high, min(0.02, scale / 6.0))
            mean = grid[None, :] * math.sqrt(n_prev / n)
            kernel = stats.norm.pdf((points[:, None] - mean) / scale) / scale
            density = kernel @ weights
        grid, weights = points, _simpson_weights(points) * density
    return tuple(result)


def _grid(low: float, high: float, step: float) -> np.ndarray:
    count = max(3, math.ceil((high - low) / step))
    count += count % 2 == 0  # Simpson needs an odd number of points
    return np.linspace(low, high, count)


def _simpson_weights(points: np.ndarray) -> np.ndarray:
    h = (points[-1] - points[0]) / (points.size - 1)
    w = np.ones(points.size)
    w[1:-1:2] = 4.0
    w[2:-1:2] = 2.0
    return np.asarray(w * h / 3.0, dtype=float)


def alpha_spent(design: SequentialDesign, trials_per_arm: int) -> float:
    """Familywise error (two-sided, change test) spent by the look at ``trials_per_arm``."""
    if trials_per_arm < design.min_trials:
        return 0.0
    return spending(min(trials_per_arm, design.max_trials) / design.max_trials, design.alpha, 2,
                    design.spending)


def _levels(design: SequentialDesign, level: float, sided: int) -> np.ndarray:
    return np.asarray(nominal_levels(design.looks, design.max_trials, level, sided,
                                     design.spending))


def look_alpha(design: SequentialDesign, trials_per_arm: int) -> float:
    """The nominal two-sided level a change p-value is held to at the look at ``trials_per_arm``
    (the group-sequential boundary at level alpha: Holm's last step, or a single cell); alpha
    itself in a fixed design; 0 before the first look."""
    if trials_per_arm > design.max_trials:
        raise ValueError(f"look at {trials_per_arm} trials per arm is beyond max_trials "
                         f"({design.max_trials})")
    if trials_per_arm < design.min_trials:
        return 0.0
    return float(_levels(design, design.alpha, 2)[trials_per_arm - design.min_trials])


# --------------------------------------------------------------------------------------------
# the tests, vectorized over leading axes (last axis: trials)


@dataclass(frozen=True, slots=True)
class TestArrays:
    """Per-look test results, shapes of the inputs' leading axes: log-ratio estimate, two-sided
    change p, equivalence p (max of the two one-sided p; NaN where no test exists)."""

    log_ratio: np.ndarray
    p_change: np.ndarray
    p_equivalence: np.ndarray


def welch_log_tests(log_a: np.ndarray, log_b: np.ndarray, effect: float) -> TestArrays:
    """Welch t on logarithms: change (two-sided, ratio 1) and TOST against ``±log(1+effect)``.
    Needs >= 2 trials per arm (NaN p otherwise). No variation on either side: p 0 or 1 by
    position (an exact, degenerate answer)."""
    n_a, n_b = log_a.shape[-1], log_b.shape[-1]
    difference = log_b.mean(axis=-1) - log_a.mean(axis=-1)
    shape = difference.shape
    if n_a < 2 or n_b < 2:
        nan = np.full(shape, np.nan)
        return TestArrays(difference, nan, nan.copy())
    var_a = log_a.var(axis=-1, ddof=1) / n_a
    var_b = log_b.var(axis=-1, ddof=1) / n_b
    se = np.sqrt(var_a + var_b)
    margin = math.log1p(effect)
    with np.errstate(divide="ignore", invalid="ignore"):
        df = (var_a + var_b) ** 2 / (var_a**2 / (n_a - 1) + var_b**2 / (n_b - 1))
        df = np.where(np.isfinite(df), df, 1.0)
        t = difference / se
        p_change = 2.0 * stats.t.sf(np.abs(t), df)
        p_low = stats.t.sf((difference + margin) / se, df)  # H0: ratio <= 1/(1+effect)
        p_high = stats.t.cdf((difference - margin) / se, df)  # H0: ratio >= 1+effect
    flat = se == 0.0
    if flat.any():
        p_change = np.where(flat, np.where(difference == 0.0, 1.0, 0.0), p_change)
        p_low = np.where(flat, np.where(difference > -margin, 0.0, 1.0), p_low)
        p_high = np.where(flat, np.where(difference < margin, 0.0, 1.0), p_high)
    return TestArrays(difference, p_change, np.maximum(p_low, p_high))


def _mw_u(log_a: np.ndarray, log_b: np.ndarray) -> np.ndarray:
    """U = #(b > a) + #(b == a) / 2 over all pairs, along the last axes."""
    d = log_b[..., :, None] - log_a[..., None, :]
    return np.asarray((d > 0).sum(axis=(-2, -1)) + 0.5 * (d == 0).sum(axis=(-2, -1)),
                      dtype=float)


def mann_whitney_log_tests(log_a: np.ndarray, log_b: np.ndarray, effect: float) -> TestArrays:
    """Exact Mann-Whitney: change (two-sided) and TOST with B shifted by ``∓log(1+effect)``.
    Ties count half and the p-value is then rounded toward 1 (conservative). The log-ratio
    estimate is Hodges-Lehmann's (median of pairwise differences)."""
    n_a, n_b = log_a.shape[-1], log_b.shape[-1]
    pairs = log_b[..., :, None] - log_a[..., None, :]
    estimate = np.median(pairs.reshape(*pairs.shape[:-2], n_a * n_b), axis=-1) \
        if n_a and n_b else np.full(log_a.shape[:-1], np.nan)
    if n_a == 0 or n_b == 0:
        nan = np.full(estimate.shape, np.nan)
        return TestArrays(estimate, nan, nan.copy())
    cdf = mann_whitney_null_cdf(n_a, n_b)  # P(U <= u), u = 0 .. n_a n_b
    total = n_a * n_b
    margin = math.log1p(effect)
    u = _mw_u(log_a, log_b)
    tail = np.ceil(np.minimum(u, total - u)).astype(int)  # conservative with ties
    p_change = np.minimum(1.0, 2.0 * cdf[np.minimum(tail, total)])
    # H0 ratio >= 1+effect: small U of (b - margin) against a; p = P(U <= u), ties upward
    u_high = np.ceil(_mw_u(log_a, log_b - margin)).astype(int)
    p_high = cdf[u_high]
    # H0 ratio <= 1/(1+effect): large U of (b + margin); p = P(U >= u) = P(U <= total - u)
    u_low = np.floor(_mw_u(log_a, log_b + margin)).astype(int)
    p_low = cdf[total - u_low]
    return TestArrays(estimate, p_change, np.maximum(p_low, p_high))


def trial_tests(test: TrialTest, log_a: np.ndarray, log_b: np.ndarray, effect: float
                ) -> TestArrays:
    if test == "welch-log":
        return welch_log_tests(log_a, log_b, effect)
    return mann_whitney_log_tests(log_a, log_b, effect)


# --------------------------------------------------------------------------------------------
# the sequentially rejective (Holm) group-sequential decision


def _holm_rejections(p: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """p: (..., cells, looks); levels: (cells, looks) nominal levels of the designs at
    alpha / (cells - r), r = 0 .. cells-1. Returns (..., cells, looks) booleans: rejected by
    that look (a cell crossed its Holm level's boundary at that or an earlier look, the level
    raised by the cells rejected by that look)."""
    m = p.shape[-2]
    hits = np.stack([np.logical_or.accumulate(below_alpha(np.nan_to_num(p, nan=2.0),
                                                          levels[r]), axis=-1)
                     for r in range(m)])  # (m, ..., cells, looks)
    rejected = np.zeros(p.shape, dtype=bool)
    for _ in range(m):
        count = np.minimum(rejected.sum(axis=-2, keepdims=True), m - 1)  # (..., 1, looks)
        index = np.broadcast_to(count, p.shape)[None]
        now = np.take_along_axis(hits, index, axis=0)[0]
        if (now == rejected).all():
            break
        rejected |= now
    return rejected


def holm_levels(design: SequentialDesign, cells: int, sided: int) -> np.ndarray:
    """(cells, looks): the nominal levels of Holm's steps (designs at alpha / (cells - r))."""
    return np.stack([_levels(design, design.alpha / (cells - r), sided) for r in range(cells)])


def sequential_rejections(design: SequentialDesign, p_change: np.ndarray,
                          p_equivalence: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first look (index into ``design.looks``) at which each cell is decided changed and
    decided equivalent; ``len(looks)`` where never. Inputs (..., cells, looks)."""
    cells = p_change.shape[-2]
    looks = len(design.looks)
    changed = _holm_rejections(p_change, holm_levels(design, cells, 2))
    equivalent = _holm_rejections(p_equivalence, holm_levels(design, cells, 1))
    first_changed = np.where(changed.any(axis=-1), changed.argmax(axis=-1), looks)
    first_equivalent = np.where(equivalent.any(axis=-1), equivalent.argmax(axis=-1), looks)
    return first_changed, first_equivalent


def decision_words(first_changed: np.ndarray, first_equivalent: np.ndarray, look: int
                   ) -> np.ndarray:
    """0 undecided, 1 changed, 2 equivalent at look index ``look``: the decision reached first
    (both at one look: changed)."""
    changed = (first_changed <= look) & (first_changed <= first_equivalent)
    equivalent = (first_equivalent <= look) & ~changed
    return np.asarray(np.where(changed, 1, np.where(equivalent, 2, 0)), dtype=int)


# --------------------------------------------------------------------------------------------
# one experiment


def _clean(values: Sequence[float], side: str) -> tuple[np.ndarray, tuple[str, ...]]:
    arr = np.asarray(list(values), dtype=float)
    warnings: tuple[str, ...] = ()
    bad = ~np.isfinite(arr)
    if bad.any():
        warnings += (f"dropped {int(bad.sum())} missing value(s) of {side}",)
    nonpositive = np.isfinite(arr) & (arr <= 0)
    if nonpositive.any():
        warnings += (f"dropped {int(nonpositive.sum())} non-positive value(s) of {side} (a "
                     "ratio needs positive values)",)
    return arr, warnings


def _usable(arr: np.ndarray) -> np.ndarray:
    return np.asarray(arr[np.isfinite(arr) & (arr > 0)], dtype=float)


def look_needs(design: SequentialDesign) -> int:
    """Valid trials each arm needs for a look to test anything: the design's `min_trials` (a
    look with a missing trial, 3 + 2, waits for the next round). Welch's df at 3 + 2 is
    1.2-2.5, and at the looks' small levels its A/A rate there is 1.1-2.8x nominal when the
    arm with 2 is the noisier (9x at 6 + 2); Hsu's conservative df of 1 makes such a look
    decide nothing anyway (docs/statistics.md, "Looks with a missing trial")."""
    return max(design.min_trials, 2 if design.test == "welch-log" else 1)


def _look_tests(design: SequentialDesign, a: np.ndarray, b: np.ndarray
                ) -> tuple[float, float, float]:
    """(log ratio, p change, p equivalence) at one look; NaN where no test exists (fewer
    than `look_needs` valid trials on an arm)."""
    xa, xb = _usable(a), _usable(b)
    need = look_needs(design)
    if xa.size < need or xb.size < need:
        return math.nan, math.nan, math.nan
    result = trial_tests(design.test, np.log(xa), np.log(xb), design.effect)
    return float(result.log_ratio), float(result.p_change), float(result.p_equivalence)


def _ratio(design: SequentialDesign, a: np.ndarray, b: np.ndarray, confidence: float
           ) -> Estimate:
    xa, xb = _usable(a), _usable(b)
    if design.test == "mann-whitney":
        return hodges_lehmann(xa, xb, confidence=confidence, log_scale=True)
    return welch_log_ratio(xb, xa, confidence)


def decide_cells(design: SequentialDesign, trials_per_arm: int,
                 values: Mapping[str, tuple[Sequence[float], Sequence[float]]]
                 ) -> tuple[CellDecision, ...]:
    """Every compared cell's decision at the look after ``trials_per_arm`` trials per arm.

    ``values``: per cell, (A values, B values) per trial in round order (a failed trial: NaN in
    its place, or left out). The look at n uses each arm's first n values, so every earlier look
    is replayed from the same data: the decision is a pure function of the trials so far, and a
    cell decided at an earlier look keeps that decision. Missing or non-positive values are
    dropped with a warning; a look with fewer than `look_needs` valid trials on an arm tests
    nothing there, and a cell without a test stays undecided with a warning, never an error.
    """
    if trials_per_arm > design.max_trials:
        raise ValueError(f"look at {trials_per_arm} trials per arm is beyond max_trials "
                         f"({design.max_trials})")
    cells = list(values)
    if not cells:
        return ()
    cleaned: list[tuple[np.ndarray, np.ndarray, tuple[str, ...]]] = []
    for cell in cells:
        a, b = values[cell]
        xa, warn_a = _clean(a, "A")
        xb, warn_b = _clean(b, "B")
        cleaned.append((xa, xb, (*warn_a, *warn_b)))
    if trials_per_arm < design.min_trials:
        note = (f"no look before {design.min_trials} trials per arm (have {trials_per_arm})",)
        return tuple(CellDecision(cell, "undecided",
                                  _ratio(design, xa[:trials_per_arm], xb[:trials_per_arm], 0.95),
                                  None, None, 0.0, (*warns, *note))
                     for cell, (xa, xb, warns) in zip(cells, cleaned, strict=True))
    looks = [n for n in design.looks if n <= trials_per_arm]
    m = len(cells)
    p_change = np.full((m, len(design.looks)), np.nan)
    p_equivalence = np.full((m, len(design.looks)), np.nan)
    for i, (xa, xb, _) in enumerate(cleaned):
        for k, n in enumerate(looks):
            _, p_change[i, k], p_equivalence[i, k] = _look_tests(design, xa[:n], xb[:n])
    first_changed, first_equivalent = sequential_rejections(design, p_change, p_equivalence)
    k_now = len(looks) - 1
    words = decision_words(first_changed, first_equivalent, k_now)
    change_rejected = first_changed <= k_now
    levels = holm_levels(design, m, 2)
    equivalence_levels = holm_levels(design, m, 1)
    current_change = [None if math.isnan(p) else float(p) for p in p_change[:, k_now]]
    current_equivalence = [None if math.isnan(p) else float(p) for p in p_equivalence[:, k_now]]
    adjusted_change = holm_adjust(current_change)
    adjusted_equivalence = holm_adjust(current_equivalence)
    names: dict[int, CellDecisionWord] = {0: "undecided", 1: "changed", 2: "equivalent"}
    result = []
    for i, (cell, (xa, xb, warns)) in enumerate(zip(cells, cleaned, strict=True)):
        others = int(change_rejected.sum() - change_rejected[i])
        alpha_look = float(levels[min(others, m - 1), k_now])
        a_now, b_now = xa[:trials_per_arm], xb[:trials_per_arm]
        word = names[int(words[i])]
        evidence = _evidence(word, i, first_changed, first_equivalent, p_change, p_equivalence,
                             levels, equivalence_levels, k_now)
        look_index, p_shown, level_shown = evidence
        shown_trials = looks[look_index]
        confidence = 1.0 - (2.0 * level_shown if word == "equivalent" else level_shown)
        confidence = min(confidence, 1.0 - 1e-12) if level_shown > 0 else 0.999999
        ratio = _ratio(design, xa[:shown_trials], xb[:shown_trials], confidence)
        notes = list(warns)
        if current_change[i] is None:
            notes.append(f"no test at {trials_per_arm} trials per arm: a look needs "
                         f"{look_needs(design)} valid trials per arm (have "
                         f"{_usable(a_now).size} + {_usable(b_now).size})")
        decided_at = None
        if word == "changed":
            decided_at = design.looks[int(first_changed[i])]
        elif word == "equivalent":
            decided_at = design.looks[int(first_equivalent[i])]
        result.append(CellDecision(cell, word, ratio, adjusted_change[i], adjusted_equivalence[i],
                                   alpha_look, tuple(notes), decided_at, shown_trials,
                                   None if math.isnan(p_shown) else p_shown, level_shown))
    return tuple(result)


def _evidence(word: str, i: int, first_changed: np.ndarray, first_equivalent: np.ndarray,
              p_change: np.ndarray, p_equivalence: np.ndarray, levels: np.ndarray,
              equivalence_levels: np.ndarray, k_now: int) -> tuple[int, float, float]:
    """(look index, unadjusted p, boundary) that decided cell i: the earliest look up to the
    deciding one whose p crossed the boundary of the Holm step the cell was tested at (Holm
    raises a cell's level when others are rejected, also for its earlier looks); for an
    undecided cell the current look's change test at its current step."""
    m = p_change.shape[0]
    if word == "undecided":
        others = int((first_changed <= k_now).sum() - (first_changed[i] <= k_now))
        return k_now, float(p_change[i, k_now]), float(levels[min(others, m - 1), k_now])
    first, p, step_levels = ((first_changed, p_change, levels) if word == "changed"
                             else (first_equivalent, p_equivalence, equivalence_levels))
    decided = int(first[i])
    step = min(int((first <= decided).sum()) - 1, m - 1)  # the others rejected by then
    for look in range(decided + 1):
        if below_alpha(p[i, look], step_levels[step, look]):
            return look, float(p[i, look]), float(step_levels[step, look])
    return decided, float(p[i, decided]), float(step_levels[step, decided])


def all_decided(decisions: Sequence[CellDecision]) -> bool:
    """True when every cell is changed or equivalent (and there is at least one)."""
    return bool(decisions) and all(d.decision != "undecided" for d in decisions)


# --------------------------------------------------------------------------------------------
# the design check


def _min_p(test: TrialTest, n: int) -> float:
    """Smallest two-sided change p that n trials per arm can give."""
    if test == "welch-log":
        return 0.0 if n >= 2 else 1.0
    return min(1.0, 2.0 * float(mann_whitney_null_cdf(n, n)[0]))


def _reachable(design: SequentialDesign) -> tuple[bool, float, float]:
    """Can some look reject Holm's first step (level alpha / cells)? Also the last look's
    smallest p and level, for the message."""
    levels = _levels(design, design.alpha / design.cells, 2)
    best = [(_min_p(design.test, n), float(level)) for n, level in zip(design.looks, levels,
                                                                         strict=True)]
    ok = any(bool(below_alpha(p, level)) for p, level in best)
    return ok, best[-1][0], best[-1][1]


def check_design(design: SequentialDesign) -> DesignCheck:
    """From the design alone: can any outcome reach significance (a change on at least one cell
    at Holm's first, strictest step, at some look)? If not, the smallest max trials per arm that
    can (a fixed design stays fixed; a sequential one keeps its min_trials)."""
    ok, min_p, level = _reachable(design)
    if ok:
        return DesignCheck(True, None, "")
    smallest: int | None = None
    for m in range(max(design.max_trials + 1, 2), MAX_SEQUENTIAL_TRIALS + 1):
        candidate = replace(design, max_trials=m,
                            min_trials=m if not design.sequential else min(design.min_trials, m))
        if _reachable(candidate)[0]:
            smallest = m
            break
    counts = (f"{design.max_trials} trials per arm" if not design.sequential else
              f"{design.min_trials} to {design.max_trials} trials per arm")
    family = f" over {design.cells} compared cells (Holm)" if design.cells > 1 else ""
    if design.test == "welch-log":
        reason = (f"{counts}{family} cannot test a change with welch-log: it needs >= 2 trials "
                  "per arm")
    else:
        reason = (f"{counts} with the rank test (mann-whitney){family} can never reach "
                  f"significance: smallest possible p={min_p:.2g} at the last look against its "
                  f"level {level:.2g}")
    if smallest is not None:
        reason += f"; use max trials >= {smallest} per arm"
        if design.test == "mann-whitney":
            reason += ", or test: welch-log"
    return DesignCheck(False, smallest, reason)
