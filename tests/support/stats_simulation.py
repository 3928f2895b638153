"""Simulations that calibrate ``reports.statistics`` on autocorrelated, heavy-tailed
latencies: the library behind ``benchmarks/stats_calibration.py`` (which prints the numbers
quoted in ``docs/statistics.md``) and ``tests/unit/test_statistics_calibration.py`` (which
asserts on the same functions). It measures:

* coverage of 95% percentile CIs (p50/p90/p95/p99) of one run against the true percentile, by
  the method that gave them: order statistics, or the sectioning fallback where the tail rule
  left the order-statistic bound open (``sectioning_coverage``: the fallback at 1,000-10,000
  requests and p95/p99/p99.9);
* the A/A false-positive rate of the trial comparison (Mann-Whitney on per-trial p95);
* the A/A false-positive rate of a naive per-request Mann-Whitney on pooled requests;
* the power to detect a true 10% shift in per-trial p99 at the recommended trial count;
* the false-PASS rate of the non-inferiority gate at a true ratio equal to the margin;
* with a between-run random effect (every run a fresh instance, level shifted by 10-40%): how
  often single-run percentile intervals cover the population quantity a release gate cares
  about (``instance_effect_coverage``: they cover their own instance only), and how often
  trial-level intervals from k = 2, 3, 5, 10 trials (``across_trials_estimate``) do;
* the A/A false-positive rate of ``compare_trials`` per cell and after Holm over p50/p90/p99
  (``aa_trials_with_holm``) at k = 2, 3, 4, 5, 10 trials per side;
* ITL with prefill stalls that hit all concurrent streams at once (``simulate_itl_run``):
  coverage and claimed effective size of ITL percentile intervals from gaps pooled request by
  request (as ``run_metrics`` does today) versus ordered by arrival (``itl_percentile_estimate``);
* the time ``percentile_estimate`` takes on 100,000 samples;
* with ``--only large``: series of more than ``effective_size.BATCHED_ABOVE`` samples, whose
  effective sizes come from batch means, against the exact Geyer estimate on the same series
  (AR(1), lock-step ITL, the analysis benchmark's open-loop ITL): interval coverage by method,
  n_eff ratios and the tau the runs themselves show.

The latency model (one run = one server instance):
``latency_t = instance_effect * exp(mu + s * z_t)`` with ``z`` a stationary Gaussian AR(1)
(marginal N(0, 1), lag-1 autocorrelation rho drawn in [0.5, 0.9], as measured between
consecutive TTFTs on an H200) and ``s`` drawn in [0.5, 1.0] (log-normal tail, p99/p50 of
3.2 to 10). The instance effect is log-normal with mean 1 and a CV drawn in [0.13, 0.37] (the
measured run-to-run CV), independent per trial (each trial is a fresh instance). Without the
instance effect the true q-percentile of a run is ``exp(mu + s * Phi^-1(q))``. The
single-run versus trial-level section draws the instance CV in [0.10, 0.40]
(``LEVEL_SHIFT_CV_RANGE``); the ITL section has its own model (``simulate_itl_run``).

The documented numbers and the tested ones come from this one piece of code; benchmarks
import it (``tests.support``), the library never imports benchmarks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import signal, stats

from vllm_slo.stats import effective_size
from vllm_slo.stats.statistics import (
    ORDER_STATISTIC_METHOD,
    SECTIONING_METHOD,
    across_trials_estimate,
    goodput_estimate,
    itl_percentile_estimate,
    mean_estimate,
    order_statistic_interval,
    percentile_estimate,
    percentile_estimates,
    time_ordered,
)
from vllm_slo.stats.trial_planning import trials_needed
from vllm_slo.stats.trial_statistics import (
    compare_trials,
    min_p_value_mann_whitney,
    non_inferiority,
    with_holm,
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


def stationary_ar1(n: int, rho: float, seed: int) -> np.ndarray:
    """One stationary Gaussian AR(1) series (marginal N(0, 1), lag-1 autocorrelation rho)
    from `default_rng(seed)`."""
    return ar1_standard(np.array([rho]), n, np.random.default_rng(seed))[0]


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
    n_requests: int = REQUESTS_PER_RUN, rho_range: tuple[float, float] = RHO_RANGE,
) -> list[Coverage]:
    """Share of runs whose 95% percentile CI covers the true percentile, by the method that
    gave the interval: ``p99`` counts the runs with an order-statistic interval, ``p99
    sectioning-log`` those whose order-statistic bound was open and that got the sectioning
    fallback instead (listed when any did); runs with neither are "insufficient samples"."""
    rng = np.random.default_rng(seed)
    rho = rng.uniform(*rho_range, n_runs)
    tail_s = rng.uniform(*TAIL_S_RANGE, n_runs)
    runs = simulate_runs(rho, tail_s, np.ones(n_runs), n_requests, rng)
    methods = (ORDER_STATISTIC_METHOD, SECTIONING_METHOD)
    results = []
    for percentile in percentiles:
        has_value = {m: np.zeros(n_runs, dtype=bool) for m in methods}
        covered = np.zeros(n_runs, dtype=bool)
        for i, series in enumerate(runs):
            estimate = percentile_estimate(series, percentile)
            if estimate.ci_low is None or estimate.ci_high is None:
                continue
            has_value[estimate.method][i] = True
            truth = true_percentile_s(float(tail_s[i]), percentile)
            covered[i] = estimate.ci_low <= truth <= estimate.ci_high
        results.append(_coverage(f"p{percentile:g}", rho, has_value[ORDER_STATISTIC_METHOD],
                                 covered))
        if has_value[SECTIONING_METHOD].any():
            results.append(_coverage(f"p{percentile:g} {SECTIONING_METHOD}", rho,
                                     has_value[SECTIONING_METHOD], covered))
    return results


#: The fallback's calibration grid (`sectioning_coverage`): run lengths at and beyond the
#: smallest that sectioning bounds a p99 at (900), and the percentiles whose order-statistic
#: bound opens at them under the AR(1) model's autocorrelation.
SECTIONING_REQUESTS: tuple[int, ...] = (1000, 1472, 3000, 10_000)
SECTIONING_PERCENTILES: tuple[float, ...] = (95.0, 99.0, 99.9)


@dataclass(frozen=True)
class FallbackCoverage:
    """`percentile_coverage` at one run length and percentile, with the share of runs whose
    order-statistic bound was open (``fallback.runs - order_statistic.with_value``) and of
    those how many sectioning bounded."""

    requests: int
    percentile: float
    order_statistic: Coverage
    fallback: Coverage | None


def sectioning_coverage(n_runs: int, requests: Sequence[int] = SECTIONING_REQUESTS,
                        percentiles: Sequence[float] = SECTIONING_PERCENTILES,
                        rho_range: tuple[float, float] = RHO_RANGE, seed: int = 13,
                        ) -> list[FallbackCoverage]:
    """Coverage of the sectioning fallback (and, beside it, of the order-statistic interval)
    on the AR(1) latency model at several run lengths: where the tail rule leaves the
    order-statistic bound open, how often the fallback's 95% interval covers the truth."""
    out = []
    for n in requests:
        results = {c.what: c for c in percentile_coverage(
            n_runs, percentiles, seed=seed + n, n_requests=n, rho_range=rho_range)}
        for percentile in percentiles:
            label = f"p{percentile:g}"
            out.append(FallbackCoverage(n, percentile, results[label],
                                        results.get(f"{label} {SECTIONING_METHOD}")))
    return out


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
# Between-run (instance) effects: what one run's interval covers, and what k trials' does


#: Per-instance multiplicative level shifts (the CV of the log-normal instance effect) for the
#: single-run versus trial-level section: 10-40%, as the issue measured across restarts.
LEVEL_SHIFT_CV_RANGE: tuple[float, float] = (0.10, 0.40)
LEVEL_SHIFT_CV_BANDS: tuple[tuple[float, float], ...] = ((0.10, 0.20), (0.20, 0.30), (0.30, 0.40))
TRIAL_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
TRIAL_COUNTS: tuple[int, ...] = (2, 3, 5, 10)


@dataclass(frozen=True)
class ConfigurationPool:
    """Simulated runs of one configuration (rho, tail_s), before any instance effect.

    ``statistics[q]`` holds each run's percentile ``Q_q`` (``np.quantile`` of its requests, the
    statistic a trial reports). ``population[q]`` is ``E[Q_q]`` and ``log_population[q]`` is
    ``E[log Q_q]``, both as means over ``truth_runs`` further runs of the same configuration.
    """

    rho: float
    tail_s: float
    runs: np.ndarray
    statistics: dict[float, np.ndarray]
    population: dict[float, float]
    log_population: dict[float, float]


def configuration_pool(
    rho: float, tail_s: float, n_runs: int, truth_runs: int, rng: np.random.Generator,
    percentiles: Sequence[float] = TRIAL_PERCENTILES, n_requests: int = REQUESTS_PER_RUN,
) -> ConfigurationPool:
    """``n_runs`` runs to judge intervals on, and the population values from ``truth_runs`` more."""
    ones = np.ones(n_runs)
    runs = simulate_runs(rho * ones, tail_s * ones, ones, n_requests, rng)
    statistics = {q: np.quantile(runs, q / 100.0, axis=1) for q in percentiles}
    population: dict[float, float] = {}
    log_population: dict[float, float] = {}
    sums = {q: [0.0, 0.0] for q in percentiles}
    done = 0
    while done < truth_runs:  # in chunks: truth_runs x n_requests can be large
        size = min(500, truth_runs - done)
        chunk = simulate_runs(np.full(size, rho), np.full(size, tail_s), np.ones(size),
                              n_requests, rng)
        for q in percentiles:
            values = np.quantile(chunk, q / 100.0, axis=1)
            sums[q][0] += float(values.sum())
            sums[q][1] += float(np.log(values).sum())
        done += size
    for q in percentiles:
        population[q] = sums[q][0] / truth_runs
        log_population[q] = sums[q][1] / truth_runs
    return ConfigurationPool(rho, tail_s, runs, statistics, population, log_population)


@dataclass(frozen=True)
class TrialLevelCoverage:
    """Coverage of 95% trial-level intervals (``across_trials_estimate``) from k trials."""

    trials: int
    sets: int
    covered: int  # of the population quantity theta = E[T]
    covered_geometric: int  # of exp(E[log T])
    band_sets: tuple[int, ...]  # per LEVEL_SHIFT_CV_BANDS
    band_covered: tuple[int, ...]
    raw_covered: int  # the former raw-scale t interval, for comparison
    raw_below_zero: int  # raw-scale intervals whose lower bound was < 0
    cox_covered: int  # modified Cox interval for a log-normal mean, for comparison
    median_relative_width: float  # (ci_high - ci_low) / theta

    @property
    def coverage(self) -> float:
        return self.covered / self.sets

    @property
    def coverage_geometric(self) -> float:
        return self.covered_geometric / self.sets

    def band_coverage(self) -> tuple[float, ...]:
        return tuple(c / n if n else float("nan")
                     for c, n in zip(self.band_covered, self.band_sets, strict=True))


@dataclass(frozen=True)
class InstanceCoverage:
    """Single-run versus trial-level 95% intervals of one percentile, with instance effects."""

    percentile: float
    single_runs: int
    single_with_value: int
    single_covered_own: int  # covers the run's own instance's true percentile
    single_covered_population: int  # covers theta = E[T], what a release gate cares about
    spread_ratio: float  # sd of (log T - log theta) / the sd the single-run intervals claim
    trial_levels: tuple[TrialLevelCoverage, ...]

    @property
    def single_coverage_own(self) -> float:
        return self.single_covered_own / self.single_with_value

    @property
    def single_coverage_population(self) -> float:
        return self.single_covered_population / self.single_with_value


def _cv_band(cv: np.ndarray) -> np.ndarray:
    """Index into LEVEL_SHIFT_CV_BANDS (the upper edge belongs to the last band)."""
    edges = np.array([high for _, high in LEVEL_SHIFT_CV_BANDS[:-1]])
    return np.searchsorted(edges, cv, side="right")


def instance_effect_coverage(
    n_configs: int, runs_per_config: int, single_runs_per_config: int,
    truth_runs: int = 2000, max_sets_per_config: int = 200,
    percentiles: Sequence[float] = TRIAL_PERCENTILES,
    trial_counts: Sequence[int] = TRIAL_COUNTS, seed: int = 9,
) -> list[InstanceCoverage]:
    """Coverage of single-run and trial-level 95% intervals when every run is a fresh instance.

    Model: a configuration is (rho, s) drawn as in ``percentile_coverage`` plus an instance CV
    drawn in ``LEVEL_SHIFT_CV_RANGE``; one run on instance i has latencies ``e_i * x_t`` with
    ``x`` the AR(1) log-normal run and ``e_i`` the log-normal instance effect (E[e] = 1, that
    CV), drawn afresh per run. The per-run statistic is ``T_q = np.quantile(e_i x, q)``.

    Population quantity (what a release gate cares about): ``theta_q = E[T_q]``, the expected
    per-run statistic over server instances (and over the run's own randomness) of the
    configuration. Because ``E[e] = 1`` and ``e`` is independent of the run,
    ``theta_q = E[Q_q]`` of a run without the effect; it is computed as the mean over
    ``truth_runs`` independent runs of the configuration (Monte Carlo error about 1% of theta for
    p99 at 2000 runs, small against the intervals it judges). The geometric counterpart
    ``exp(E[log T_q]) = exp(E[log Q_q]) / sqrt(1 + cv^2)`` is reported as well: it is what a
    t interval on logarithms estimates, and it is the median over instances when ``log T`` is
    symmetric.

    Single-run intervals: ``percentile_estimate`` of the run (scale-equivariant: the interval of
    ``e x`` is ``e`` times that of ``x``), judged against theta and against the run's own
    instance's percentile ``e_i * exp(mu + s Phi^-1(q))``. Trial-level intervals:
    ``across_trials_estimate`` of k per-run statistics, each from its own fresh instance (k
    disjoint runs, fresh effects), judged against theta; the former raw-scale t interval is
    computed alongside for comparison, and so is the modified Cox interval for a log-normal
    mean (``exp(m + s^2/2 ± t sqrt(s^2/k + s^4/(2(k-1))))`` on the logs), which targets
    ``E[T]`` itself rather than the geometric mean.
    """
    rng = np.random.default_rng(seed)
    single_n = {q: 0 for q in percentiles}
    single_with = {q: 0 for q in percentiles}
    single_own = {q: 0 for q in percentiles}
    single_population = {q: 0 for q in percentiles}
    single_z: dict[float, list[np.ndarray]] = {q: [] for q in percentiles}
    n_bands = len(LEVEL_SHIFT_CV_BANDS)
    counts = {(q, k): np.zeros(6 + 2 * n_bands, dtype=np.int64)
              for q in percentiles for k in trial_counts}
    widths: dict[tuple[float, int], list[float]] = {key: [] for key in counts}
    half_normal = float(stats.norm.ppf(0.975))
    for _ in range(n_configs):
        rho, tail_s = rng.uniform(*RHO_RANGE), rng.uniform(*TAIL_S_RANGE)
        pool = configuration_pool(rho, tail_s, runs_per_config, truth_runs, rng, percentiles)
        # single runs: one fresh instance each
        m = min(single_runs_per_config, runs_per_config)
        cv = rng.uniform(*LEVEL_SHIFT_CV_RANGE, m)
        effects = instance_effects(cv, rng)
        for q in percentiles:
            theta = pool.population[q]
            own_truth = effects * true_percentile_s(tail_s, q)
            single_n[q] += m
            z = []
            for i in range(m):
                estimate = percentile_estimate(pool.runs[i], q)
                if estimate.ci_low is None or estimate.ci_high is None or estimate.value is None:
                    continue
                low, high = effects[i] * estimate.ci_low, effects[i] * estimate.ci_high
                single_with[q] += 1
                single_own[q] += bool(low <= own_truth[i] <= high)
                single_population[q] += bool(low <= theta <= high)
                claimed_sd = math.log(high / low) / (2.0 * half_normal)
                if claimed_sd > 0.0:
                    z.append((math.log(effects[i] * estimate.value) - math.log(theta))
                             / claimed_sd)
            single_z[q].append(np.asarray(z))
        # trial sets: k disjoint runs, one configuration (one CV) per set, fresh effects
        for k in trial_counts:
            n_sets = min(runs_per_config // k, max_sets_per_config)
            set_cv = rng.uniform(*LEVEL_SHIFT_CV_RANGE, n_sets)
            set_effects = instance_effects(np.repeat(set_cv, k), rng).reshape(n_sets, k)
            band = _cv_band(set_cv)
            t_crit = float(stats.t.ppf(0.975, k - 1))
            for q in percentiles:
                theta = pool.population[q]
                values = set_effects * pool.statistics[q][: n_sets * k].reshape(n_sets, k)
                geometric = np.exp(pool.log_population[q]) / np.sqrt(1.0 + set_cv**2)
                raw_mean = values.mean(axis=1)
                raw_half = t_crit * values.std(axis=1, ddof=1) / math.sqrt(k)
                # modified Cox: log-normal mean exp(m + s^2/2), se sqrt(s^2/k + s^4/(2(k-1)))
                logs = np.log(values)
                log_var = logs.var(axis=1, ddof=1)
                cox_center = logs.mean(axis=1) + log_var / 2.0
                cox_half = t_crit * np.sqrt(log_var / k + log_var**2 / (2.0 * (k - 1)))
                cox_covered = np.abs(math.log(theta) - cox_center) <= cox_half
                row = counts[(q, k)]
                for j in range(n_sets):
                    estimate = across_trials_estimate(values[j])
                    assert estimate.ci_low is not None and estimate.ci_high is not None
                    covered = estimate.ci_low <= theta <= estimate.ci_high
                    row[0] += 1
                    row[1] += covered
                    row[2] += estimate.ci_low <= geometric[j] <= estimate.ci_high
                    row[3] += abs(raw_mean[j] - theta) <= raw_half[j]
                    row[4] += raw_mean[j] - raw_half[j] < 0.0
                    row[5] += cox_covered[j]
                    row[6 + band[j]] += 1
                    row[6 + n_bands + band[j]] += covered
                    widths[(q, k)].append((estimate.ci_high - estimate.ci_low) / theta)
    results = []
    for q in percentiles:
        levels = []
        for k in trial_counts:
            row = counts[(q, k)]
            levels.append(TrialLevelCoverage(
                k, int(row[0]), int(row[1]), int(row[2]),
                tuple(int(v) for v in row[6: 6 + n_bands]),
                tuple(int(v) for v in row[6 + n_bands:]), int(row[3]), int(row[4]),
                int(row[5]), float(np.median(widths[(q, k)]))))
        z_all = np.concatenate(single_z[q]) if single_z[q] else np.empty(0)
        results.append(InstanceCoverage(
            q, single_n[q], single_with[q], single_own[q], single_population[q],
            float(z_all.std()) if z_all.size > 1 else float("nan"), tuple(levels)))
    return results


@dataclass(frozen=True)
class AATrialRates:
    """A/A (same configuration, fresh instances) false-positive rates of ``compare_trials``."""

    trials_per_side: int
    pairs: int
    per_cell: dict[float, int]  # pairs whose unadjusted p < alpha, per percentile cell
    family: int  # pairs where any cell is significant after Holm over the cells
    min_p: float  # smallest attainable two-sided p at this k


def aa_trials_with_holm(
    n_pairs: int, trials_per_side: int, percentiles: Sequence[float] = TRIAL_PERCENTILES,
    alpha: float = 0.05, n_configs: int = 20, seed: int = 10,
) -> AATrialRates:
    """A/A: k vs k fresh-instance trials of one configuration, the cells ``percentiles`` of each
    run (so the cells are correlated, as in a real experiment), Mann-Whitney per cell and Holm
    over the cells (what ``compare_groups`` does for one pair of variants)."""
    rng = np.random.default_rng(seed)
    per_cell = {q: 0 for q in percentiles}
    family = 0
    pairs_per_config = math.ceil(n_pairs / n_configs)
    done = 0
    while done < n_pairs:
        rho, tail_s = rng.uniform(*RHO_RANGE), rng.uniform(*TAIL_S_RANGE)
        size = min(pairs_per_config, n_pairs - done)
        n_runs = 2 * trials_per_side * size
        cv = np.repeat(rng.uniform(*LEVEL_SHIFT_CV_RANGE, size), 2 * trials_per_side)
        runs = simulate_runs(np.full(n_runs, rho), np.full(n_runs, tail_s),
                             instance_effects(cv, rng), REQUESTS_PER_RUN, rng)
        values = {q: np.quantile(runs, q / 100.0, axis=1).reshape(size, 2, trials_per_side)
                  for q in percentiles}
        for j in range(size):
            raw = [compare_trials(values[q][j, 0], values[q][j, 1], alpha=alpha)
                   for q in percentiles]
            for q, comparison in zip(percentiles, raw, strict=True):
                per_cell[q] += comparison.significant
            family += any(c.significant for c in with_holm(raw))
        done += size
    return AATrialRates(trials_per_side, n_pairs, per_cell, family,
                        min_p_value_mann_whitney(trials_per_side, trials_per_side))


# --------------------------------------------------------------------------------------------
# ITL: cross-stream correlated stalls, request-ordered versus time-ordered gaps


ITL_DECODE_STEP_S: float = 0.020  # median decode step with no prefill in it
ITL_STEP_SIGMA: float = 0.10  # log-sd of the decode step (batch composition drift)
ITL_STEP_RHO_RANGE: tuple[float, float] = (0.5, 0.95)  # step-to-step autocorrelation of it
ITL_PREFILL_S_PER_TOKEN: float = ITL_DECODE_STEP_S / 1000.0  # a 1000-token prefill doubles a step
ITL_PROMPT_TOKENS: tuple[int, int] = (100, 2000)
ITL_OUTPUT_TOKENS: tuple[int, int] = (50, 400)
ITL_JITTER_S: float = 0.0003  # mean per-stream delivery delay (exponential)
ITL_STEPS_PER_RUN: int = 2500  # ~60 s of decoding
ITL_PERCENTILES: tuple[float, ...] = (50.0, 99.0)


def _first_request_starts(streams: int, rng: np.random.Generator) -> np.ndarray:
    """Start step of each stream's first request, from the stationary delay distribution.

    For a renewal process with request lengths L the time to the next start is ``j`` with
    probability ``P(L > j) / E[L]``; starting there makes every stream stationary from step 0,
    so each step holds Binomial(C, 1 / E[L]) new requests.
    """
    low, high = ITL_OUTPUT_TOKENS
    lengths = np.arange(low, high + 1)
    survival = (lengths[None, :] > np.arange(high)[:, None]).mean(axis=1)
    return rng.choice(high, size=streams, p=survival / survival.sum())


@dataclass(frozen=True)
class ItlRun:
    """One simulated run's inter-token gaps, in the two orders."""

    request_ordered: np.ndarray  # requests by start, each request's gaps in order (today)
    gap_s: np.ndarray  # the same gaps in generation order, with
    arrival_s: np.ndarray  # the wall-clock arrival of each gap's later chunk


def simulate_itl_run(
    streams: int, steps: int, step_rho: float, rng: np.random.Generator,
) -> ItlRun:
    """C concurrent streams decoding in lock step, with prefill stalls that hit all of them.

    Each decode step emits one token on every stream. Step t lasts
    ``d_t = ITL_DECODE_STEP_S * exp(ITL_STEP_SIGMA * z_t) + ITL_PREFILL_S_PER_TOKEN * P_t``,
    ``z`` a stationary AR(1) over steps (autocorrelation ``step_rho``) and ``P_t`` the prompt
    tokens of the requests that start at step t (their prefill shares the step, delaying every
    stream). Each stream runs back-to-back requests of ``ITL_OUTPUT_TOKENS`` tokens (uniform);
    a request's first token is its TTFT, the later ones make gaps. A chunk reaches the client at
    ``sum(d_1..d_t) + delta``, ``delta`` exponential with mean ``ITL_JITTER_S`` per stream and
    chunk, so a gap is ``d_t + delta_t - delta_(t-1)``.
    """
    low, high = ITL_OUTPUT_TOKENS
    n_requests = steps // low + 2
    lengths = rng.integers(low, high + 1, (streams, n_requests))
    starts = _first_request_starts(streams, rng)[:, None] + np.concatenate(
        [np.zeros((streams, 1), dtype=np.int64), np.cumsum(lengths, axis=1)[:, :-1]], axis=1)
    starts = np.concatenate([np.full((streams, 1), -high), starts], axis=1)  # the one running
    step = np.arange(steps)
    start_of = np.take_along_axis(
        starts, np.stack([np.searchsorted(row, step, side="right") - 1 for row in starts]),
        axis=1)
    is_first = start_of == step[None, :]
    prompts = rng.integers(ITL_PROMPT_TOKENS[0], ITL_PROMPT_TOKENS[1] + 1, (streams, steps))
    prefill_s = (is_first * prompts).sum(axis=0) * ITL_PREFILL_S_PER_TOKEN
    z = ar1_standard(np.array([step_rho]), steps, rng)[0]
    duration_s = ITL_DECODE_STEP_S * np.exp(ITL_STEP_SIGMA * z) + prefill_s
    arrival_s = np.cumsum(duration_s)[None, :] + rng.exponential(ITL_JITTER_S, (streams, steps))
    keep = ~is_first[:, 1:]
    gaps = np.diff(arrival_s, axis=1)[keep]
    arrivals = arrival_s[:, 1:][keep]
    stream = np.broadcast_to(np.arange(streams)[:, None], keep.shape)[keep]
    order = np.lexsort((np.broadcast_to(step[None, 1:], keep.shape)[keep], stream,
                        start_of[:, 1:][keep]))
    return ItlRun(gaps[order], gaps, arrivals)


def itl_true_percentiles(
    streams: int, percentiles: Sequence[float] = ITL_PERCENTILES, n_draws: int = 4_000_000,
    seed: int = 11,
) -> dict[float, float]:
    """Percentiles of the stationary ITL distribution that ``simulate_itl_run`` samples.

    A gap at a step with N new requests (N ~ Binomial(C, 1 / E[L]), exact for the stationary
    streams) is ``d + delta - delta'`` with ``d = ITL_DECODE_STEP_S exp(ITL_STEP_SIGMA Z)`` plus
    the prefill of N prompts, and such a step yields C - N gaps. The gap distribution is that
    mixture weighted by C - N; its quantiles come from ``n_draws`` independent draws (Monte
    Carlo error about 0.1% of p99, far inside the intervals judged).
    """
    gaps, weights = _itl_stationary_draws(streams, n_draws, seed)
    order = np.argsort(gaps)
    weight = np.cumsum(weights[order])
    weight /= weight[-1]
    return {q: float(gaps[order][np.searchsorted(weight, q / 100.0)]) for q in percentiles}


def itl_true_mean(streams: int, n_draws: int = 4_000_000, seed: int = 11) -> float:
    """Mean of the stationary ITL distribution (the draws of ``itl_true_percentiles``)."""
    gaps, weights = _itl_stationary_draws(streams, n_draws, seed)
    return float(np.average(gaps, weights=weights))


def _itl_stationary_draws(streams: int, n_draws: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Independent step gaps and their weights (gaps a step yields) for the two above."""
    rng = np.random.default_rng(seed)
    mean_length = float(np.mean(np.arange(ITL_OUTPUT_TOKENS[0], ITL_OUTPUT_TOKENS[1] + 1)))
    new = rng.binomial(streams, 1.0 / mean_length, n_draws)
    prompt_tokens = np.zeros(n_draws)
    for j in range(1, int(new.max()) + 1):
        prompt_tokens += np.where(new >= j, rng.integers(ITL_PROMPT_TOKENS[0],
                                                         ITL_PROMPT_TOKENS[1] + 1, n_draws), 0)
    gaps = (ITL_DECODE_STEP_S * np.exp(ITL_STEP_SIGMA * rng.standard_normal(n_draws))
            + ITL_PREFILL_S_PER_TOKEN * prompt_tokens
            + rng.exponential(ITL_JITTER_S, n_draws) - rng.exponential(ITL_JITTER_S, n_draws))
    return gaps, (streams - new).astype(float)


@dataclass(frozen=True)
class ItlCoverage:
    """Coverage of 95% ITL percentile intervals over simulated runs, for one gap order."""

    streams: int
    percentile: float
    order: str  # "request" (pooled request by request) or "time" (by arrival)
    runs: int
    with_value: int
    covered: int
    median_gaps: float
    median_n_effective: float
    median_relative_width: float

    @property
    def coverage(self) -> float:
        return self.covered / self.with_value if self.with_value else float("nan")


def itl_coverage(
    n_runs: int, streams: int, steps: int = ITL_STEPS_PER_RUN,
    step_rho_range: tuple[float, float] = ITL_STEP_RHO_RANGE,
    percentiles: Sequence[float] = ITL_PERCENTILES, truth_draws: int = 4_000_000, seed: int = 12,
) -> list[ItlCoverage]:
    """ITL percentile intervals from gaps pooled request by request versus time-ordered.

    Both go through ``percentile_estimate``: the request-ordered series as
    ``vllm_slo/analysis/run_metrics.py`` pools it today, the time-ordered one through
    ``itl_percentile_estimate`` (gaps sorted by arrival). Truth: ``itl_true_percentiles``.
    """
    rng = np.random.default_rng(seed)
    truth = itl_true_percentiles(streams, percentiles, truth_draws)
    rows: dict[tuple[float, str], list[list[float]]] = {
        (q, order): [] for q in percentiles for order in ("request", "time")}
    n_gaps = []
    for _ in range(n_runs):
        run = simulate_itl_run(streams, steps, float(rng.uniform(*step_rho_range)), rng)
        n_gaps.append(run.gap_s.size)
        for q in percentiles:
            for order, estimate in (
                ("request", percentile_estimate(run.request_ordered, q)),
                ("time", itl_percentile_estimate(run.gap_s, run.arrival_s, q)),
            ):
                if estimate.ci_low is None or estimate.ci_high is None:
                    rows[(q, order)].append([0.0, 0.0, estimate.n_effective, math.nan])
                    continue
                rows[(q, order)].append([
                    1.0, float(estimate.ci_low <= truth[q] <= estimate.ci_high),
                    estimate.n_effective, (estimate.ci_high - estimate.ci_low) / truth[q]])
    results = []
    for (q, order), values in rows.items():
        table = np.asarray(values)
        results.append(ItlCoverage(
            streams, q, order, n_runs, int(table[:, 0].sum()), int(table[:, 1].sum()),
            float(np.median(n_gaps)), float(np.median(table[:, 2])),
            float(np.nanmedian(table[:, 3])) if table[:, 0].any() else float("nan")))
    return results


# --------------------------------------------------------------------------------------------
# Large series: the batch-means effective size (effective_size.batch_means_tau) that series of
# more than effective_size.BATCHED_ABOVE samples get, against the exact estimate


#: Just above ``BATCHED_ABOVE`` (4,194,304), so ``percentile_estimates`` and ``mean_estimate``
#: themselves take the batched path; the exact estimate is computed beside them.
LARGE_SAMPLES: int = 4_200_000
LARGE_RHO_RANGE: tuple[float, float] = (0.5, 0.99)
LARGE_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0)
#: Short batches for comparison: ``ceil(n / 2^20)`` samples (5 at 4.2 M samples), about a
#: million batch means instead of the rule's sqrt(n).
LARGE_SHORT_MEANS: int = 1 << 20
LARGE_ITL_STREAMS: int = 64
LARGE_ITL_STEPS: int = 70_000  # ~4.46 M gaps at 64 streams
LARGE_METHODS: tuple[str, ...] = ("exact", "batched", "short batches")


@dataclass(frozen=True)
class LargeSeriesCoverage:
    """One statistic's 95% intervals on large simulated series, by effective-size method.

    ``covered[i]``: runs whose interval with the ``LARGE_METHODS[i]`` effective size covers the
    truth; ``ratios[i]``: that effective size over the exact one, per run; ``disagree``: runs
    where the exact and the batched (report's) interval differ in covering the truth.
    ``replicated_tau``: the tau the runs themselves show, the mean over runs of ``n (S -
    s)^2 / v`` (S the run's share of samples at or below the true percentile s = q, v = q (1 -
    q); for the mean, S the run's mean, s the true mean, v the run's variance), against
    ``mean_tau[i]``, the mean of ``n / n_eff`` by method."""

    model: str
    what: str
    runs: int
    samples: float  # median series length
    covered: tuple[int, ...]
    ratios: tuple[tuple[float, ...], ...]
    median_n_effective: float  # exact
    disagree: int
    replicated_tau: float
    mean_tau: tuple[float, ...]

    def coverage(self, method: int) -> float:
        return self.covered[method] / self.runs

    def ratio_range(self, method: int) -> tuple[float, float, float]:
        """Minimum, median and maximum of n_eff(method) / n_eff(exact) over the runs."""
        values = np.asarray(self.ratios[method])
        return float(values.min()), float(np.median(values)), float(values.max())


def _t_interval(x: np.ndarray, n_eff: float) -> tuple[float, float]:
    half = float(stats.t.ppf(0.975, n_eff - 1.0)) * float(x.std(ddof=1)) / math.sqrt(n_eff)
    return float(x.mean()) - half, float(x.mean()) + half


def _replicated_terms(x: np.ndarray, truth: dict[str, float]) -> dict[str, float]:
    """``n (S - s)^2 / v`` of one run for each statistic (see ``LargeSeriesCoverage``)."""
    n = x.size
    terms = {}
    for what, value in truth.items():
        if what == "mean":
            terms[what] = n * (float(x.mean()) - value) ** 2 / float(x.var())
        else:
            q = float(what[1:]) / 100.0
            terms[what] = n * (float(np.count_nonzero(x <= value)) / n - q) ** 2 / (q * (1 - q))
    return terms


def _large_series_intervals(
    x: np.ndarray, percentiles: Sequence[float],
) -> dict[str, list[tuple[float, float, float]]]:
    """(n_eff, ci_low, ci_high) by method for each percentile and the mean of one series.

    The batched row is what the report computes (``percentile_estimates``, ``mean_estimate``:
    the series is longer than ``BATCHED_ABOVE``); the exact and stress rows put their own
    effective size into the same order-statistic and t intervals (short batches: 2^20 batch
    means, ``LARGE_SHORT_MEANS``)."""
    n = x.size
    short = -(-n // LARGE_SHORT_MEANS)
    ordered = np.sort(x)
    reported = percentile_estimates(x, percentiles)
    mean = mean_estimate(x)
    rows: dict[str, list[tuple[float, float, float]]] = {}
    for percentile in percentiles:
        q = percentile / 100.0
        estimate = reported[percentile]
        assert estimate.ci_low is not None and estimate.ci_high is not None
        row = []
        for tau in (effective_size.exact_indicator_tau(x, estimate.value),
                    effective_size.batched_indicator_tau(x, estimate.value, short)):
            n_eff = min(float(n), max(1.0, n / tau))
            interval = order_statistic_interval(ordered, q, n_eff)
            assert interval is not None
            row.append((n_eff, *interval))
        rows[f"p{percentile:g}"] = [row[0], (estimate.n_effective, estimate.ci_low,
                                             estimate.ci_high), row[1]]
    assert mean.ci_low is not None and mean.ci_high is not None
    mean_row = [(n_eff, *_t_interval(x, n_eff)) for n_eff in (
        min(float(n), n / effective_size.exact_series_tau(x)),
        min(float(n), n / effective_size.batched_series_tau(x, short)))]
    rows["mean"] = [mean_row[0], (mean.n_effective, mean.ci_low, mean.ci_high), mean_row[1]]
    return rows


def _large_coverage(
    model: str, per_run: list[dict[str, list[tuple[float, float, float]]]],
    truths: list[dict[str, float]], samples: list[int], replicated: list[dict[str, float]],
) -> list[LargeSeriesCoverage]:
    results = []
    for what in per_run[0]:
        covered = np.array([[low <= truth[what] <= high for _, low, high in run[what]]
                            for run, truth in zip(per_run, truths, strict=True)])
        n_eff = np.array([[value for value, _, _ in run[what]] for run in per_run])
        results.append(LargeSeriesCoverage(
            model, what, len(per_run), float(np.median(samples)),
            tuple(int(c) for c in covered.sum(axis=0)),
            tuple(tuple(float(r) for r in n_eff[:, i] / n_eff[:, 0])
                  for i in range(len(LARGE_METHODS))),
            float(np.median(n_eff[:, 0])), int((covered[:, 0] != covered[:, 1]).sum()),
            float(np.mean([terms[what] for terms in replicated])),
            tuple(float(v) for v in (np.asarray(samples)[:, None] / n_eff).mean(axis=0))))
    return results


def large_series_coverage_ar1(
    n_runs: int, n_samples: int = LARGE_SAMPLES, seed: int = 21,
) -> list[LargeSeriesCoverage]:
    """AR(1) log-normal series (rho in ``LARGE_RHO_RANGE``, s in ``TAIL_S_RANGE``) of
    `n_samples`: coverage of the true percentiles and mean by effective-size method."""
    rng = np.random.default_rng(seed)
    per_run, truths, replicated = [], [], []
    for _ in range(n_runs):
        rho, tail_s = float(rng.uniform(*LARGE_RHO_RANGE)), float(rng.uniform(*TAIL_S_RANGE))
        x = simulate_runs(np.array([rho]), np.array([tail_s]), np.ones(1), n_samples, rng)[0]
        per_run.append(_large_series_intervals(x, LARGE_PERCENTILES))
        truth = {f"p{q:g}": true_percentile_s(tail_s, q) for q in LARGE_PERCENTILES}
        truth["mean"] = math.exp(MU_LOG_S + tail_s**2 / 2.0)
        truths.append(truth)
        replicated.append(_replicated_terms(x, truth))
    return _large_coverage("AR(1)", per_run, truths, [n_samples] * n_runs, replicated)


def large_series_coverage_itl(
    n_runs: int, streams: int = LARGE_ITL_STREAMS, steps: int = LARGE_ITL_STEPS,
    seed: int = 22, truth_draws: int = 4_000_000,
) -> list[LargeSeriesCoverage]:
    """Time-ordered ITL gaps of ``simulate_itl_run`` (C streams in lock step, shared prefill
    stalls, step autocorrelation in ``ITL_STEP_RHO_RANGE``), the same comparison."""
    rng = np.random.default_rng(seed)
    truth = {f"p{q:g}": v for q, v in itl_true_percentiles(streams, ITL_PERCENTILES,
                                                           truth_draws).items()}
    truth["mean"] = itl_true_mean(streams, truth_draws)
    per_run, samples, replicated = [], [], []
    for _ in range(n_runs):
        run = simulate_itl_run(streams, steps, float(rng.uniform(*ITL_STEP_RHO_RANGE)), rng)
        gaps = time_ordered(run.gap_s, run.arrival_s)
        samples.append(gaps.size)
        per_run.append(_large_series_intervals(gaps, ITL_PERCENTILES))
        replicated.append(_replicated_terms(gaps, truth))
    return _large_coverage(f"ITL C={streams}", per_run, [truth] * n_runs, samples, replicated)


#: The open-loop model of benchmarks/analysis_scale.py (its synthetic 1 M-request run): requests
#: sent at random at 160 a second, 250 chunks each; a request's gaps share its level.
OPEN_LOOP_REQUESTS: int = 18_000  # 4.48 M gaps
OPEN_LOOP_CHUNKS: int = 250
OPEN_LOOP_RATE: float = 160.0
OPEN_LOOP_LEVEL_RHO: float = 0.9
OPEN_LOOP_GAP_S: float = 0.015
OPEN_LOOP_LEVEL_SIGMA: float = 0.25
OPEN_LOOP_NOISE_SIGMA: float = 0.35


def simulate_open_loop_itl(n_requests: int, rng: np.random.Generator) -> np.ndarray:
    """Time-ordered ITL gaps of the analysis benchmark's synthetic run.

    Request i (sent uniformly at random at ``OPEN_LOOP_RATE`` a second) has a level ``z_i``, a
    stationary AR(1) over requests with marginal N(0, 1) (the load); its TTFT is
    ``0.08 exp(0.45 z_i + 0.25 e)`` and each of its ``OPEN_LOOP_CHUNKS - 1`` gaps
    ``OPEN_LOOP_GAP_S exp(OPEN_LOOP_LEVEL_SIGMA z_i + OPEN_LOOP_NOISE_SIGMA e')``. About 600
    requests stream at once, so one request's gaps lie ~600 positions apart in arrival order
    and its level correlates gaps over ~150,000 positions, a little at each lag."""
    send_s = np.sort(rng.uniform(0.0, n_requests / OPEN_LOOP_RATE, n_requests))
    level = ar1_standard(np.array([OPEN_LOOP_LEVEL_RHO]), n_requests, rng)[0]
    gaps = (OPEN_LOOP_GAP_S * np.exp(OPEN_LOOP_LEVEL_SIGMA * level))[:, None] * np.exp(
        OPEN_LOOP_NOISE_SIGMA * rng.standard_normal((n_requests, OPEN_LOOP_CHUNKS - 1)))
    ttft_s = 0.08 * np.exp(0.45 * level + 0.25 * rng.standard_normal(n_requests))
    arrival_s = (send_s + ttft_s)[:, None] + np.cumsum(gaps, axis=1)
    return time_ordered(gaps.ravel(), arrival_s.ravel())


def large_series_coverage_open_loop(
    n_runs: int, n_requests: int = OPEN_LOOP_REQUESTS, seed: int = 23,
) -> list[LargeSeriesCoverage]:
    """``simulate_open_loop_itl`` runs; truth: a gap is log-normal with log-sd
    ``sqrt(OPEN_LOOP_LEVEL_SIGMA^2 + OPEN_LOOP_NOISE_SIGMA^2)`` (analytic)."""
    rng = np.random.default_rng(seed)
    sigma = math.hypot(OPEN_LOOP_LEVEL_SIGMA, OPEN_LOOP_NOISE_SIGMA)
    truth = {f"p{q:g}": OPEN_LOOP_GAP_S * math.exp(sigma * float(stats.norm.ppf(q / 100.0)))
             for q in LARGE_PERCENTILES}
    truth["mean"] = OPEN_LOOP_GAP_S * math.exp(sigma**2 / 2.0)
    per_run, samples, replicated = [], [], []
    for _ in range(n_runs):
        gaps = simulate_open_loop_itl(n_requests, rng)
        samples.append(gaps.size)
        per_run.append(_large_series_intervals(gaps, LARGE_PERCENTILES))
        replicated.append(_replicated_terms(gaps, truth))
    return _large_coverage("open-loop ITL", per_run, [truth] * n_runs, samples, replicated)
