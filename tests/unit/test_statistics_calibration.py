"""Calibration of reports.statistics on simulated autocorrelated, heavy-tailed latencies.

The simulation lives in ``tests/support/stats_simulation.py`` (``benchmarks/stats_calibration.py``
prints the numbers quoted in ``docs/statistics.md`` from it); these tests assert on the same
functions at CI-sized counts. Every
simulation is seeded, so the outcomes are reproducible.
"""

from __future__ import annotations

import pytest

from tests.support import stats_simulation as calibration
from vllm_slo.stats.statistics import SECTIONING_METHOD, percentile_estimate
from vllm_slo.stats.trial_statistics import min_p_value_mann_whitney

pytestmark = pytest.mark.slow


def test_simulated_series_have_the_intended_autocorrelation() -> None:
    import numpy as np

    from vllm_slo.stats.effective_size import lag1_autocorrelation

    rng = np.random.default_rng(0)
    z = calibration.ar1_standard(np.array([0.5, 0.9]), 200_000, rng)
    assert [lag1_autocorrelation(row) for row in z] == pytest.approx([0.5, 0.9], abs=0.01)
    assert z.std(axis=1) == pytest.approx([1.0, 1.0], abs=0.03)
    effects = calibration.instance_effects(np.full(200_000, 0.25), rng)
    assert effects.mean() == pytest.approx(1.0, abs=0.01)
    assert effects.std() / effects.mean() == pytest.approx(0.25, abs=0.01)


def test_percentile_intervals_cover_the_true_percentile() -> None:
    results = {c.what: c for c in calibration.percentile_coverage(2000)}
    for what in ("p50", "p90", "p95"):
        assert results[what].with_value >= 0.95 * results[what].runs
        assert 0.93 <= results[what].coverage <= 0.97, results[what]
    # p99 from 1000 autocorrelated requests: mostly too few effective samples for an
    # order-statistic interval; when one is given, it is conservative rather than optimistic.
    assert results["p99"].with_value <= 0.5 * results["p99"].runs
    assert results["p99"].coverage >= 0.93
    # the others get the sectioning fallback, calibrated in its own right
    fallback = results[f"p99 {SECTIONING_METHOD}"]
    assert results["p99"].with_value + fallback.with_value == fallback.runs
    assert 0.93 <= fallback.coverage <= 0.97, fallback


def test_sectioning_fallback_covers_where_it_is_used() -> None:
    for result in calibration.sectioning_coverage(600, requests=(1000, 1472),
                                                  percentiles=(99.0,)):
        fallback = result.fallback
        assert fallback is not None and fallback.with_value >= 100, result
        assert 0.93 <= fallback.coverage <= 0.97, result
    # too few requests for three blocks of 3 beyond p99: open, not a guess
    (short,) = calibration.sectioning_coverage(100, requests=(600,), percentiles=(99.0,))
    assert short.fallback is None


def test_goodput_interval_covers_the_true_goodput() -> None:
    results = {c.what: c for c in calibration.mean_and_goodput_coverage(1000)}
    assert 0.93 <= results["goodput"].coverage <= 0.97
    assert results["mean"].coverage >= 0.90  # heavy tail: documented slight under-coverage


def test_aa_trial_comparison_false_positive_rate_is_nominal() -> None:
    trials = 8  # the exact test's achievable size at 8 vs 8 is 0.0499
    assert min_p_value_mann_whitney(trials, trials) < 0.05
    rate = calibration.aa_trials_false_positive_rate(2000, trials)
    assert 0.03 <= rate <= 0.07


def test_single_run_intervals_miss_the_population_but_trial_intervals_cover_it() -> None:
    results = calibration.instance_effect_coverage(
        n_configs=6, runs_per_config=400, single_runs_per_config=30, truth_runs=600,
        max_sets_per_config=40)
    sets = covered = 0
    for r in results:
        # one run's interval covers its own instance, not the population over instances (p99
        # has an interval in few runs, and those are the widest)
        assert r.single_coverage_own >= 0.90, r
        # (p99's intervals from 1000 requests are mostly the wider sectioning ones)
        margin = 0.1 if r.percentile >= 99.0 else 0.2
        assert r.single_coverage_population < r.single_coverage_own - margin, r
        if r.percentile < 99.0:
            assert r.single_coverage_population <= 0.6, r
            assert r.spread_ratio >= 2.5, r
        for level in r.trial_levels:
            assert level.coverage >= 0.88, (r.percentile, level)
            sets += level.sets
            covered += level.covered
            if level.trials == 2:  # the raw-scale interval reached below 0 for most pairs
                assert level.raw_below_zero > 0.3 * level.sets
    assert 0.93 <= covered / sets <= 0.97


def test_aa_trial_comparison_with_holm_over_cells() -> None:
    assert calibration.aa_trials_with_holm(100, 3).family == 0  # minimum p 0.1 > alpha
    rates = calibration.aa_trials_with_holm(400, 10)  # exact size at 10 vs 10: 0.043
    per_cell = sum(rates.per_cell.values()) / (len(rates.per_cell) * rates.pairs)
    assert 0.025 <= per_cell <= 0.07, rates
    assert rates.family / rates.pairs <= 0.05  # Holm over correlated cells: conservative


def test_itl_intervals_need_time_ordered_gaps() -> None:
    results = {(r.percentile, r.order): r for r in calibration.itl_coverage(
        120, streams=16, steps=1500, truth_draws=1_000_000)}
    for q in calibration.ITL_PERCENTILES:
        request, time_ordered = results[(q, "request")], results[(q, "time")]
        assert request.coverage <= 0.75, request
        assert time_ordered.with_value == time_ordered.runs
        assert time_ordered.coverage >= 0.91, time_ordered
        assert request.median_n_effective > 5.0 * time_ordered.median_n_effective


def test_naive_per_request_test_is_far_off() -> None:
    assert calibration.naive_per_request_false_positive_rate(1000) > 0.20
    # autocorrelation alone, with no restart-to-restart effect, already breaks it
    without = calibration.naive_per_request_false_positive_rate(1000, with_instance_effect=False)
    assert without > 0.20


def test_power_at_the_recommended_trial_count() -> None:
    power = calibration.power_at_recommended_trials(600, effect=0.10, percentile=99.0)
    assert power.trials_per_variant >= 4
    assert power.detected >= 0.80, power


def test_non_inferiority_false_pass_rate_at_the_margin() -> None:
    rate = calibration.non_inferiority_false_pass_rate(1000, trials_per_side=10, margin=0.05)
    assert rate <= 0.04  # nominal 0.025 for a two-sided 95% interval


def test_percentile_estimate_is_fast_on_100k_samples() -> None:
    assert calibration.percentile_timing_s(100_000, repeats=3) < 0.5
    assert percentile_estimate is calibration.percentile_estimate
