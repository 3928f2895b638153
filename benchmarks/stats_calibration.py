"""Calibration of ``reports.statistics`` on simulated autocorrelated, heavy-tailed latencies.

Prints the numbers quoted in ``docs/statistics.md``:

* coverage of 95% percentile CIs (p50/p90/p95/p99) of one run against the true percentile;
* the A/A false-positive rate of the trial comparison (Mann-Whitney on per-trial p95);
* the A/A false-positive rate of a naive per-request Mann-Whitney on pooled requests;
* the power to detect a true 10% shift in per-trial p99 at the recommended trial count;
* the false-PASS rate of the non-inferiority gate at a true ratio equal to the margin;
* the time ``percentile_estimate`` takes on 100,000 samples.

The latency model (one run = one server instance):
``latency_t = instance_effect * exp(mu + s * z_t)`` with ``z`` a stationary Gaussian AR(1)
(marginal N(0, 1), lag-1 autocorrelation rho drawn in [0.5, 0.9], as measured between
consecutive TTFTs on an H200) and ``s`` drawn in [0.5, 1.0] (log-normal tail, p99/p50 of
3.2 to 10). The instance effect is log-normal with mean 1 and a CV drawn in [0.13, 0.37] (the
measured run-to-run CV), independent per trial (each trial is a fresh instance). Without the
instance effect the true q-percentile of a run is ``exp(mu + s * Phi^-1(q))``.

``tests/unit/test_statistics_calibration.py`` imports this file and asserts on the same
functions, so the documented numbers and the tested ones come from one piece of code.

Run: ``python benchmarks/stats_calibration.py`` (add ``--quick`` for the test-sized run).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import signal, stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vllm_slo.reports.analysis.statistics import (
    goodput_estimate,
    mean_estimate,
    percentile_estimate,
)
from vllm_slo.reports.analysis.trial_statistics import (
    compare_trials,
    non_inferiority,
    trials_needed,
)

RHO_RANGE: tuple[float, float] = (0.5, 0.9)
TAIL_S_RANGE: tuple[float, float] = (0.5, 1.0)
INSTANCE_CV_RANGE: tuple[float, float] = (0.13, 0.37)
MU_LOG_S: float = math.log(0.2)  # median latency 0.2 s
REQUESTS_PER_RUN: int = 1000


def ar1_standard(rho: np.ndarray, n_requests: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of a stationary Gaussian AR(1) with marginal N(0, 1), one rho per row."""
    rho = np.asarray(rho, dtype=float)
    noise = rng.standard_normal((rho.size, n_requests))
    innovation_scale = np.sqrt(1.0 - rho**2)
    noise[:, 1:] *= innovation_scale[:, None]  # noise[:, 0] is the stationary start z_0
    if np.all(rho == rho[0]):
        return signal.lfilter([1.0], [1.0, -rho[0]], noise, axis=1)
    z = noise
    for t in range(1, n_requests):
        z[:, t] += rho * z[:, t - 1]
    return z


def instance_effects(cv: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Log-normal multiplicative effects with mean 1 and the given CV (one per element)."""
    sigma = np.sqrt(np.log1p(np.asarray(cv, dtype=float) ** 2))
    return np.exp(sigma * rng.standard_normal(sigma.shape) - sigma**2 / 2.0)


def simulate_runs(
    rho: np.ndarray, tail_s: np.ndarray, effect: np.ndarray, n_requests: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Latencies in seconds, one run per row."""
    z = ar1_standard(rho, n_requests, rng)
    return np.asarray(effect)[:, None] * np.exp(MU_LOG_S + np.asarray(tail_s)[:, None] * z)


def true_percentile_s(tail_s: float, percentile: float) -> float:
    """Percentile of the stationary distribution of a run without instance effect."""
    return math.exp(MU_LOG_S + tail_s * float(stats.norm.ppf(percentile / 100.0)))


# --------------------------------------------------------------------------------------------


RHO_BANDS: tuple[tuple[float, float], ...] = ((0.5, 0.7), (0.7, 0.8), (0.8, 0.9))


@dataclass(frozen=True)
class Coverage:
    """How often 95% intervals cover the truth, among the runs that got an interval."""

    what: str
    runs: int
    with_value: int
    covered: int
    band_with_value: tuple[int, ...] = ()  # per RHO_BANDS
    band_covered: tuple[int, ...] = ()

    @property
    def coverage(self) -> float:
        return self.covered / self.with_value if self.with_value else float("nan")

    def band_coverage(self) -> tuple[float, ...]:
        return tuple(c / w if w else float("nan")
                     for c, w in zip(self.band_covered, self.band_with_value, strict=True))


def _coverage(what: str, rho: np.ndarray, has_value: np.ndarray, covered: np.ndarray) -> Coverage:
    bands = [(rho >= low) & (rho <= high) for low, high in RHO_BANDS]
    return Coverage(what, rho.size, int(has_value.sum()), int((covered & has_value).sum()),
                    tuple(int((has_value & band).sum()) for band in bands),
                    tuple(int((covered & has_value & band).sum()) for band in bands))


def _simulated_single_runs(
    n_runs: int, seed: int, n_requests: int = REQUESTS_PER_RUN,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rho = rng.uniform(*RHO_RANGE, n_runs)
    tail_s = rng.uniform(*TAIL_S_RANGE, n_runs)
    return rho, tail_s, simulate_runs(rho, tail_s, np.ones(n_runs), n_requests, rng)


def percentile_coverage(
    n_runs: int, percentiles: Sequence[float] = (50.0, 90.0, 95.0, 99.0), seed: int = 1,
) -> list[Coverage]:
    """Share of runs whose 95% percentile CI covers the true percentile (runs with a value)."""
    rho, tail_s, runs = _simulated_single_runs(n_runs, seed)
    results = []
    for percentile in percentiles:
        has_value = np.zeros(n_runs, dtype=bool)
        covered = np.zeros(n_runs, dtype=bool)
        for i, series in enumerate(runs):
            estimate = percentile_estimate(series, percentile)
            if estimate.ci_low is None or estimate.ci_high is None:
                continue
            has_value[i] = True
            truth = true_percentile_s(float(tail_s[i]), percentile)
            covered[i] = estimate.ci_low <= truth <= estimate.ci_high
        results.append(_coverage(f"p{percentile:g}", rho, has_value, covered))
    return results


def mean_and_goodput_coverage(n_runs: int, seed: int = 7) -> list[Coverage]:
    """Coverage of the run mean's CI and of goodput's CI (SLO: latency <= the true p90)."""
    rho, tail_s, runs = _simulated_single_runs(n_runs, seed)
    send_times_s = np.arange(REQUESTS_PER_RUN) * 0.01
    window_s = REQUESTS_PER_RUN * 0.01
    has_mean = np.zeros(n_runs, dtype=bool)
    mean_covered = np.zeros(n_runs, dtype=bool)
    goodput_covered = np.zeros(n_runs, dtype=bool)
    for i, series in enumerate(runs):
        mean = mean_estimate(series)
        if mean.ci_low is not None and mean.ci_high is not None:
            has_mean[i] = True
            truth = math.exp(MU_LOG_S + tail_s[i] ** 2 / 2.0)
            mean_covered[i] = mean.ci_low <= truth <= mean.ci_high
        goodput = goodput_estimate(series <= true_percentile_s(float(tail_s[i]), 90.0),
                                   send_times_s, window_s)
        assert goodput.ci_low is not None and goodput.ci_high is not None
        truth = 0.9 * REQUESTS_PER_RUN / window_s
        goodput_covered[i] = goodput.ci_low <= truth <= goodput.ci_high
    return [_coverage("mean", rho, has_mean, mean_covered),
            _coverage("goodput", rho, np.ones(n_runs, dtype=bool), goodput_covered)]


def _trial_statistics(
    n_trials: int, rho: float, tail_s: float, cv: float, percentile: float, scale: float,
    rng: np.random.Generator, n_requests: int = REQUESTS_PER_RUN,
) -> np.ndarray:
    """Per-trial percentile of ``n_trials`` fresh-instance runs of one configuration."""
    effects = instance_effects(np.full(n_trials, cv), rng)
    runs = simulate_runs(np.full(n_trials, rho), np.full(n_trials, tail_s), effects, n_requests,
                         rng)
    return scale * np.quantile(runs, percentile / 100.0, axis=1)


def aa_trials_false_positive_rate(
    n_pairs: int, trials_per_side: int, percentile: float = 95.0, alpha: float = 0.05,
    seed: int = 2,
) -> float:
    """A/A: share of pairs (k vs k fresh-instance trials, same config) called significant."""
    rng = np.random.default_rng(seed)
    significant = 0
    for _ in range(n_pairs):
        rho, tail_s, cv = (rng.uniform(*RHO_RANGE), rng.uniform(*TAIL_S_RANGE),
                           rng.uniform(*INSTANCE_CV_RANGE))
        both = _trial_statistics(2 * trials_per_side, rho, tail_s, cv, percentile, 1.0, rng)
        comparison = compare_trials(both[:trials_per_side], both[trials_per_side:], alpha=alpha)
        significant += comparison.significant
    return significant / n_pairs


def naive_per_request_false_positive_rate(
    n_pairs: int, alpha: float = 0.05, with_instance_effect: bool = True, seed: int = 3,
) -> float:
    """A/A: share of pairs of single runs where Mann-Whitney over all requests says p < alpha."""
    rng = np.random.default_rng(seed)
    rho = np.repeat(rng.uniform(*RHO_RANGE, n_pairs), 2)
    tail_s = np.repeat(rng.uniform(*TAIL_S_RANGE, n_pairs), 2)
    cv = np.repeat(rng.uniform(*INSTANCE_CV_RANGE, n_pairs), 2)
    effects = instance_effects(cv, rng) if with_instance_effect else np.ones(2 * n_pairs)
    runs = simulate_runs(rho, tail_s, effects, REQUESTS_PER_RUN, rng)
    p = stats.mannwhitneyu(runs[0::2], runs[1::2], axis=1, method="asymptotic").pvalue
    return float(np.mean(p < alpha))


@dataclass(frozen=True)
class Power:
    trial_cv: float
    trials_per_variant: int
    detected: float


def pilot_trial_cv(
    rho: float, tail_s: float, instance_cv: float, percentile: float, n_trials: int, seed: int,
) -> float:
    """Trial-to-trial CV of a per-trial percentile, as a pilot would measure it."""
    rng = np.random.default_rng(seed)
    values = _trial_statistics(n_trials, rho, tail_s, instance_cv, percentile, 1.0, rng)
    return float(values.std(ddof=1) / values.mean())


def power_at_recommended_trials(
    n_reps: int, effect: float = 0.10, percentile: float = 99.0, rho: float = 0.7,
    tail_s: float = 0.8, instance_cv: float = 0.13, alpha: float = 0.05, seed: int = 4,
) -> Power:
    """Share of simulated A/B comparisons that detect a true ``effect`` shift in the percentile.

    The trial count is what ``trials_needed`` recommends for the trial-to-trial CV a large
    pilot measures for the same configuration.
    """
    cv = pilot_trial_cv(rho, tail_s, instance_cv, percentile, 2000, seed)
    plan = trials_needed(cv, effect, alpha=alpha, power=0.8)
    if plan.trials_per_variant is None:
        raise ValueError(f"no trial plan for CV {cv:.3f}: {plan.warnings}")
    k = plan.trials_per_variant
    rng = np.random.default_rng(seed + 1)
    detected = 0
    for _ in range(n_reps):
        a = _trial_statistics(k, rho, tail_s, instance_cv, percentile, 1.0, rng)
        b = _trial_statistics(k, rho, tail_s, instance_cv, percentile, 1.0 + effect, rng)
        detected += compare_trials(a, b, alpha=alpha).significant
    return Power(cv, k, detected / n_reps)


def non_inferiority_false_pass_rate(
    n_reps: int, trials_per_side: int = 10, margin: float = 0.05, percentile: float = 95.0,
    seed: int = 5,
) -> float:
    """Share of gates that PASS when the candidate is worse by exactly the margin."""
    rng = np.random.default_rng(seed)
    passed = 0
    for _ in range(n_reps):
        rho, tail_s, cv = (rng.uniform(*RHO_RANGE), rng.uniform(*TAIL_S_RANGE),
                           rng.uniform(*INSTANCE_CV_RANGE))
        baseline = _trial_statistics(trials_per_side, rho, tail_s, cv, percentile, 1.0, rng)
        candidate = _trial_statistics(trials_per_side, rho, tail_s, cv, percentile,
                                      1.0 + margin, rng)
        passed += non_inferiority(candidate, baseline, margin).verdict.value == "PASS"
    return passed / n_reps


def percentile_timing_s(n_samples: int = 100_000, repeats: int = 5, seed: int = 6) -> float:
    """Median wall time of ``percentile_estimate`` (p99) on an autocorrelated series."""
    rng = np.random.default_rng(seed)
    series = simulate_runs(np.array([0.8]), np.array([0.8]), np.ones(1), n_samples, rng)[0]
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        percentile_estimate(series, 99.0)
        timings.append(time.perf_counter() - start)
    return float(np.median(timings))


# --------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="the sizes the unit tests use")
    args = parser.parse_args(argv)
    runs, pairs, naive_pairs, power_reps, gate_reps = (
        (1000, 1000, 1000, 300, 500) if args.quick else (4000, 4000, 2000, 1000, 2000))

    start = time.perf_counter()
    bands = ", ".join(f"rho {low}-{high}" for low, high in RHO_BANDS)
    print(f"95% CI coverage ({runs} runs of {REQUESTS_PER_RUN} requests, rho in {RHO_RANGE}, "
          f"log-normal s in {TAIL_S_RANGE}); by band: {bands}")
    for c in [*percentile_coverage(runs), *mean_and_goodput_coverage(runs)]:
        by_band = " / ".join(f"{v:.1%}" for v in c.band_coverage())
        print(f"  {c.what:>7}: coverage {c.coverage:.1%} ({by_band}) of {c.with_value} runs with "
              f"an interval ({c.with_value / c.runs:.0%}; the rest 'insufficient samples')")
    for k in (8, 9, 10):
        rate = aa_trials_false_positive_rate(pairs, k)
        print(f"A/A trial comparison, {k} vs {k} trials, per-trial p95, alpha 0.05: "
              f"significant in {rate:.1%} of {pairs} pairs")
    for with_effect in (True, False):
        rate = naive_per_request_false_positive_rate(naive_pairs, with_instance_effect=with_effect)
        what = "with" if with_effect else "without"
        print(f"A/A naive per-request Mann-Whitney (1000 vs 1000 requests, {what} instance "
              f"effect): p<0.05 in {rate:.1%} of {naive_pairs} pairs")
    for instance_cv in (0.13, 0.25):
        power = power_at_recommended_trials(power_reps, instance_cv=instance_cv)
        print(f"power, true 10% shift in per-trial p99 (instance CV {instance_cv:.0%}, measured "
              f"trial CV {power.trial_cv:.1%}): trials_needed -> {power.trials_per_variant} per "
              f"variant, detected in {power.detected:.1%} of {power_reps} comparisons")
    rate = non_inferiority_false_pass_rate(gate_reps)
    print(f"non-inferiority gate, 10 vs 10 trials, true ratio = 1 + margin (5%): "
          f"false PASS in {rate:.1%} of {gate_reps} gates (nominal <= 2.5%)")
    print(f"percentile_estimate on 100,000 samples: {percentile_timing_s() * 1e3:.1f} ms")
    print(f"(total {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
