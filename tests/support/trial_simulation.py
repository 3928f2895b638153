"""Simulations that calibrate the sequential trial decision (``vllm_slo.stats.sequential``):
the library behind ``benchmarks/sequential_calibration.py`` (which prints the tables quoted in
docs/statistics.md, "Sequential trials") and ``tests/unit/test_sequential.py`` (which asserts on
the same functions, smaller).

The model: one trial = one fresh server instance; a cell's per-trial statistic (e.g. TPOT p50)
is ``level_arm * exp(e)`` with ``e`` the instance effect on the log scale, drawn per trial and
shared in part between the compared cells (a slow instance is slow on every cell; correlation
``CELL_CORRELATION`` of the Gaussian parts). ``level_B / level_A`` is the true ratio. Instance
models (``InstanceModel``):

* ``lognormal``: ``e ~ N(0, s^2)`` with ``s = sqrt(log(1 + cv^2))`` (CV of the statistic cv);
* ``t3``: heavy-tailed, ``e = s * T / sqrt(3)`` with T a multivariate t with 3 degrees of
  freedom (one chi-square per trial, shared by the cells): the same log-scale variance as the
  lognormal of that CV, with far heavier tails;
* ``contaminated``: ``e ~ N(0, s^2)``, but one instance in ten is an outlier with ``3 s``
  (shared by the cells).

The sequential rule is simulated with the very functions ``decide_cells`` uses
(``trial_tests`` per look, ``sequential_rejections``, ``decision_words``), vectorized over
replications; ``decide_cells`` itself is checked against it in the unit tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from vllm_slo.stats.sequential import (
    SequentialDesign,
    decision_words,
    sequential_rejections,
    trial_tests,
)

InstanceModel = Literal["lognormal", "t3", "contaminated"]
INSTANCE_MODELS: tuple[InstanceModel, ...] = ("lognormal", "t3", "contaminated")
CELL_CORRELATION: float = 0.5
CONTAMINATION: float = 0.1  # share of outlier instances in the contaminated model
CONTAMINATION_SCALE: float = 3.0  # their log-scale sd, in units of s

UNDECIDED, CHANGED, EQUIVALENT = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Scenario:
    """An instance model at a trial-to-trial CV, with a true B/A ratio on every cell."""

    model: InstanceModel
    cv: float
    ratio: float = 1.0

    @property
    def label(self) -> str:
        name = "lognormal" if self.model == "lognormal" else f"{self.model} (scale of"
        return f"{name} CV {self.cv:.0%}" + ("" if self.model == "lognormal" else ")")


def log_sd(cv: float) -> float:
    """The log-scale sd of a lognormal with this coefficient of variation."""
    return math.sqrt(math.log1p(cv * cv))


def instance_effects(rng: np.random.Generator, scenario: Scenario, shape: tuple[int, int, int]
                     ) -> np.ndarray:
    """Log-scale instance effects, shape (reps, cells, trials); cells correlated in each trial."""
    reps, cells, trials = shape
    s = log_sd(scenario.cv)
    shared = rng.standard_normal((reps, 1, trials))
    own = rng.standard_normal((reps, cells, trials))
    rho = CELL_CORRELATION
    z = math.sqrt(rho) * shared + math.sqrt(1.0 - rho) * own
    if scenario.model == "lognormal":
        return s * z
    if scenario.model == "t3":
        chi = rng.chisquare(3.0, size=(reps, 1, trials))
        return s * z / np.sqrt(chi / 3.0) / math.sqrt(3.0)
    outlier = rng.random((reps, 1, trials)) < CONTAMINATION
    return s * z * np.where(outlier, CONTAMINATION_SCALE, 1.0)


@dataclass(frozen=True, slots=True)
class SequentialOutcome:
    """Per replication: trials per arm at the stop, and per cell the decision there."""

    stop_trials: np.ndarray  # (reps,)
    decisions: np.ndarray  # (reps, cells): UNDECIDED, CHANGED, EQUIVALENT

    @property
    def any_changed(self) -> float:
        return float((self.decisions == CHANGED).any(axis=1).mean())

    @property
    def any_equivalent(self) -> float:
        return float((self.decisions == EQUIVALENT).any(axis=1).mean())

    @property
    def changed(self) -> float:
        """Share of (replication, cell) decided changed (power, when every cell changed)."""
        return float((self.decisions == CHANGED).mean())

    @property
    def equivalent(self) -> float:
        return float((self.decisions == EQUIVALENT).mean())

    @property
    def all_decided(self) -> float:
        return float((self.decisions != UNDECIDED).all(axis=1).mean())

    @property
    def mean_server_starts(self) -> float:
        """Trials per arm at the stop, times two arms."""
        return float(2.0 * self.stop_trials.mean())


def run_sequential(design: SequentialDesign, log_a: np.ndarray, log_b: np.ndarray
                   ) -> SequentialOutcome:
    """The sequential rule on simulated per-trial log values (reps, cells, max_trials): a look
    after each round from min to max trials per arm, stopping when every cell is decided."""
    looks = design.looks
    reps, cells, _ = log_a.shape
    p_change = np.full((reps, cells, len(looks)), np.nan)
    p_equivalence = np.full((reps, cells, len(looks)), np.nan)
    for k, n in enumerate(looks):
        result = trial_tests(design.test, log_a[..., :n], log_b[..., :n], design.effect)
        p_change[..., k] = result.p_change
        p_equivalence[..., k] = result.p_equivalence
    first_changed, first_equivalent = sequential_rejections(design, p_change, p_equivalence)
    decided_look = np.minimum(first_changed, first_equivalent)  # (reps, cells)
    last = len(looks) - 1
    stop_index = np.minimum(decided_look.max(axis=1), last)  # every cell decided, or the max
    words = decision_words(first_changed, first_equivalent, stop_index[:, None])
    stop_trials = np.asarray(looks)[stop_index]
    return SequentialOutcome(stop_trials, words)


def simulate(design: SequentialDesign, scenario: Scenario, reps: int, seed: int
             ) -> SequentialOutcome:
    """``reps`` experiments of ``design`` (its ``cells`` cells, every cell at the scenario's
    true ratio), per-trial values from the scenario's instance model."""
    rng = np.random.default_rng(seed)
    shape = (reps, design.cells, design.max_trials)
    log_a = instance_effects(rng, scenario, shape)
    log_b = math.log(scenario.ratio) + instance_effects(rng, scenario, shape)
    return run_sequential(design, log_a, log_b)


def proportion_interval(p: float, n: int) -> tuple[float, float]:
    """Wilson 95% interval of a proportion measured on n replications."""
    z = 1.959963984540054
    denominator = 1.0 + z * z / n
    center = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1.0 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, center - half), min(1.0, center + half)
