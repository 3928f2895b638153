"""A closed loop moving in waves, for the quantised-throughput calibration
(`vllm_slo.analysis.quantised_cells`; tests/unit/test_quantised_cells.py,
benchmarks/quantised_throughput_calibration.py).

Every user of the loop runs the same cycle of ``period_s``: a prefill part (``prefill_share`` of
the cycle, no tokens), then its ``tokens`` output tokens at an even pace, the request completing
at the cycle's end, all users in step. A trial is a fresh server: its period is the arm's times
a log-normal restart factor (``restart_sd``), its phase (where the measured window starts within
a cycle) the arm's phase plus a small jitter (``phase_sd``, in cycles) — the warm-up places the
window the same way each trial. Its output throughput is the tokens emitted in the window over
the window, its request count the completions in it, as the suite counts them."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class WaveArm:
    period_s: float  # the arm's (median) cycle: its true output rate is users * tokens / period
    phase: float  # in cycles, [0, 1): where the window starts within a cycle
    users: int = 64
    tokens: int = 128
    prefill_share: float = 0.3

    @property
    def true_rate(self) -> float:
        return self.users * self.tokens / self.period_s


def _emitted(t_s: np.ndarray, arm: WaveArm, period_s: np.ndarray) -> np.ndarray:
    """Tokens all users emitted by time ``t_s`` (cycles counted from phase 0)."""
    cycles = t_s / period_s
    whole = np.floor(cycles)
    within = np.clip((cycles - whole - arm.prefill_share) / (1.0 - arm.prefill_share), 0.0, 1.0)
    return arm.users * arm.tokens * (whole + within)


def wave_trials(arm: WaveArm, trials: int, window_s: float, rng: np.random.Generator,
                restart_sd: float = 0.01, phase_sd: float = 0.01
                ) -> tuple[np.ndarray, np.ndarray]:
    """Per trial: output throughput (tokens/s) over the window, and requests completed in it."""
    period = arm.period_s * np.exp(rng.normal(0.0, restart_sd, trials))
    start = ((arm.phase + rng.normal(0.0, phase_sd, trials)) % 1.0) * period
    end = start + window_s
    rates = (_emitted(end, arm, period) - _emitted(start, arm, period)) / window_s
    completions = np.floor(end / period) - np.floor(start / period)
    return rates, (arm.users * completions).astype(int)


def random_arm(rng: np.random.Generator, period_s: float, users: int = 64) -> WaveArm:
    return WaveArm(period_s=period_s, phase=float(rng.uniform()), users=users)


def log_ratio(candidate: WaveArm, baseline: WaveArm) -> float:
    return math.log(candidate.true_rate / baseline.true_rate)
