"""Calibration of ``reports.statistics`` on simulated autocorrelated, heavy-tailed latencies:
prints the numbers quoted in ``docs/statistics.md``. The simulations (the latency model, what
each section measures) are ``tests/support/stats_simulation.py``, which
``tests/unit/test_statistics_calibration.py`` asserts on too.

Run: ``python benchmarks/stats_calibration.py`` (add ``--quick`` for the test-sized run;
``--only large`` for the large-series section, ``--only sectioning`` for the percentile
fallback's).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, vllm_slo

from tests.support.stats_simulation import (
    ITL_STEP_RHO_RANGE,
    ITL_STEPS_PER_RUN,
    LARGE_METHODS,
    LARGE_SAMPLES,
    LEVEL_SHIFT_CV_BANDS,
    LEVEL_SHIFT_CV_RANGE,
    REQUESTS_PER_RUN,
    RHO_BANDS,
    RHO_RANGE,
    SECTIONING_PERCENTILES,
    SECTIONING_REQUESTS,
    TAIL_S_RANGE,
    TRIAL_COUNTS,
    TRIAL_PERCENTILES,
    aa_trials_false_positive_rate,
    aa_trials_with_holm,
    instance_effect_coverage,
    itl_coverage,
    large_series_coverage_ar1,
    large_series_coverage_itl,
    large_series_coverage_open_loop,
    mean_and_goodput_coverage,
    naive_per_request_false_positive_rate,
    non_inferiority_false_pass_rate,
    percentile_coverage,
    percentile_timing_s,
    power_at_recommended_trials,
    sectioning_coverage,
)
from vllm_slo.stats import effective_size, statistics


def _print_large(ar1_runs: int, itl_runs: int, open_loop_runs: int) -> None:
    print(f"Large series (> {effective_size.BATCHED_ABOVE:,} samples: effective size from "
          f"batch means, batch length ceil(sqrt(n)): "
          f"{effective_size.batch_length(LARGE_SAMPLES)} at {LARGE_SAMPLES:,}) against the exact "
          "Geyer estimate: 95% CI coverage by method "
          f"({' / '.join(LARGE_METHODS)}), n_eff / exact n_eff (min, median, max), runs whose "
          "exact and batched intervals disagree on covering the truth; tau: what the runs "
          "show (replicated) and the mean of n / n_eff by method")
    for result in (*large_series_coverage_ar1(ar1_runs), *large_series_coverage_itl(itl_runs),
                   *large_series_coverage_open_loop(open_loop_runs)):
        coverage = " / ".join(f"{result.coverage(i):.1%}" for i in range(len(LARGE_METHODS)))
        ratios = "; ".join("{:.3f} {:.3f} {:.3f}".format(*result.ratio_range(i))
                           for i in (1, 2))
        taus = " / ".join(f"{t:,.1f}" for t in result.mean_tau)
        print(f"    {result.model} {result.what:>4}: {coverage} of {result.runs} runs of "
              f"{result.samples:,.0f}; exact n_eff {result.median_n_effective:,.0f}; ratio "
              f"{ratios}; disagree {result.disagree}; tau replicated "
              f"{result.replicated_tau:,.1f} vs {taus}")


def _print_sectioning(runs: int, stress_runs: int) -> None:
    bands = ", ".join(f"rho {low}-{high}" for low, high in RHO_BANDS)
    requests = ", ".join(f"{n:,}" for n in SECTIONING_REQUESTS)
    print(f"Sectioning fallback ({statistics.SECTIONING_METHOD}: {statistics.SECTIONS} time "
          "blocks, t interval on log block quantiles) where the tail rule opens the "
          f"order-statistic bound: AR(1) model, {runs} runs of each of {requests} requests; "
          "95% CI coverage among the runs that got each kind of interval; by band: "
          f"{bands}")
    cases = [(runs, RHO_RANGE, SECTIONING_REQUESTS), (stress_runs, (0.9, 0.97), (1472,))]
    for n_runs, rho_range, sizes in cases:
        if rho_range != RHO_RANGE:
            print(f"  stress, rho in {rho_range} (beyond the model's range), {n_runs} runs:")
        for r in sectioning_coverage(n_runs, sizes, SECTIONING_PERCENTILES, rho_range):
            ordered = r.order_statistic
            coverage = ("     –" if math.isnan(ordered.coverage)
                        else f"{ordered.coverage:6.1%}")
            line = (f"    {r.requests:>6,} p{r.percentile:<4g}: order statistics "
                    f"{ordered.with_value:>4} runs, coverage {coverage}; ")
            fallback = r.fallback
            if fallback is None:
                open_runs = n_runs - ordered.with_value
                line += (f"sectioning 0 runs ({open_runs} open: too few requests for it)"
                         if open_runs else "sectioning 0 runs (no bound open)")
            else:
                by_band = (" (" + " / ".join("–" if math.isnan(v) else f"{v:.1%}"
                                             for v in fallback.band_coverage())
                           + ")" if rho_range == RHO_RANGE else "")
                open_runs = n_runs - ordered.with_value - fallback.with_value
                line += (f"sectioning {fallback.with_value:>4} runs, coverage "
                         f"{fallback.coverage:.1%}{by_band}; {open_runs} open")
            print(line)


# --------------------------------------------------------------------------------------------


def _print_instance_effects(n_configs: int, runs_per_config: int, single_runs: int,
                            max_sets: int) -> None:
    results = instance_effect_coverage(n_configs, runs_per_config, single_runs,
                                       max_sets_per_config=max_sets)
    bands = " / ".join(f"{low:.0%}-{high:.0%}" for low, high in LEVEL_SHIFT_CV_BANDS)
    print(f"Instance effects ({n_configs} configurations, each run a fresh instance with a "
          f"log-normal level shift, CV in {LEVEL_SHIFT_CV_RANGE}); population quantity theta = "
          "E[per-run statistic] over instances")
    print("  single-run 95% intervals (percentile_estimate of one run):")
    for r in results:
        print(f"    p{r.percentile:g}: cover their own instance's percentile in "
              f"{r.single_coverage_own:.1%}, theta in {r.single_coverage_population:.1%} "
              f"({r.single_with_value} of {r.single_runs} runs had an interval); the per-run "
              f"statistic spreads around theta {r.spread_ratio:.1f}x as wide as the intervals "
              "claim")
    print(f"  trial-level 95% intervals (across_trials_estimate, t-log-across-trials), "
          f"coverage of theta; by CV band {bands}; [of the geometric target]; former raw-scale t "
          "interval: coverage, share with a lower bound < 0; modified Cox interval: coverage; "
          "median width / theta")
    for r in results:
        for level in r.trial_levels:
            by_band = " / ".join(f"{v:.1%}" for v in level.band_coverage())
            print(f"    p{r.percentile:g} k={level.trials:>2}: {level.coverage:.1%} "
                  f"({by_band}) [{level.coverage_geometric:.1%}] of {level.sets} sets; raw "
                  f"{level.raw_covered / level.sets:.1%}, {level.raw_below_zero / level.sets:.0%} "
                  f"below 0; Cox {level.cox_covered / level.sets:.1%}; width "
                  f"{level.median_relative_width:.2f}")


def _print_aa_with_holm(pairs: int) -> None:
    cells = ", ".join(f"p{q:g}" for q in TRIAL_PERCENTILES)
    print(f"A/A trial comparison with instance effects (CV in {LEVEL_SHIFT_CV_RANGE}), cells "
          f"{cells} of the same runs, alpha 0.05: per-cell p<0.05 / any cell after Holm")
    for k in (*TRIAL_COUNTS[:2], 4, *TRIAL_COUNTS[2:]):
        rates = aa_trials_with_holm(pairs, k)
        per_cell = " / ".join(f"{rates.per_cell[q] / pairs:.1%}" for q in TRIAL_PERCENTILES)
        print(f"    {k:>2} vs {k:<2}: {per_cell} / {rates.family / pairs:.1%} of {pairs} pairs "
              f"(minimum attainable p {rates.min_p:.2g})")


def _print_itl(runs: int, streams: Sequence[int], stress_runs: int) -> None:
    print(f"ITL with prefill stalls shared by all C streams ({ITL_STEPS_PER_RUN} decode steps per "
          f"run, step autocorrelation in {ITL_STEP_RHO_RANGE}): 95% CI coverage of the true "
          "percentile, median n_eff claimed, median width / truth")
    cases = [(c, ITL_STEP_RHO_RANGE, runs) for c in streams]
    cases.append((streams[len(streams) // 2], (0.98, 0.995), stress_runs))
    for c, rho_range, n_runs in cases:
        label = "" if rho_range == ITL_STEP_RHO_RANGE else f", stress: step rho in {rho_range}"
        for r in itl_coverage(n_runs, c, step_rho_range=rho_range):
            print(f"    C={c:>2}{label} p{r.percentile:g} {r.order:>7}-ordered: "
                  f"{r.coverage:.1%} of {r.with_value} runs, n_eff {r.median_n_effective:,.0f} "
                  f"of {r.median_gaps:,.0f} gaps, width {r.median_relative_width:.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="the sizes the unit tests use")
    parser.add_argument("--only", choices=("large", "sectioning"),
                        help="large: only the large-series (batch means) section; sectioning: "
                             "only the percentile fallback's section")
    parser.add_argument("--large-runs", type=int, nargs=3, default=(150, 40, 80),
                        metavar=("AR1", "ITL", "OPEN"), help="runs of the large-series section")
    args = parser.parse_args(argv)
    if args.only == "large":
        start = time.perf_counter()
        _print_large(*args.large_runs)
        print(f"(total {time.perf_counter() - start:.0f} s)")
        return 0
    sectioning_runs = (300, 150) if args.quick else (2000, 1000)
    if args.only == "sectioning":
        start = time.perf_counter()
        _print_sectioning(*sectioning_runs)
        print(f"(total {time.perf_counter() - start:.0f} s)")
        return 0
    runs, pairs, naive_pairs, power_reps, gate_reps = (
        (1000, 1000, 1000, 300, 500) if args.quick else (4000, 4000, 2000, 1000, 2000))
    instance_sizes = (8, 500, 40, 50) if args.quick else (40, 1000, 50, 100)
    holm_pairs = 300 if args.quick else 1000
    itl_runs, itl_streams, stress_runs = (
        (100, (16,), 50) if args.quick else (300, (16, 32, 64), 200))

    start = time.perf_counter()
    bands = ", ".join(f"rho {low}-{high}" for low, high in RHO_BANDS)
    print(f"95% CI coverage ({runs} runs of {REQUESTS_PER_RUN} requests, rho in {RHO_RANGE}, "
          f"log-normal s in {TAIL_S_RANGE}); by band: {bands}")
    for c in [*percentile_coverage(runs), *mean_and_goodput_coverage(runs)]:
        by_band = " / ".join(f"{v:.1%}" for v in c.band_coverage())
        which = ("their order-statistic bound open" if c.what.endswith(
            statistics.SECTIONING_METHOD) else "the rest 'insufficient samples'")
        print(f"  {c.what:>7}: coverage {c.coverage:.1%} ({by_band}) of {c.with_value} runs with "
              f"an interval ({c.with_value / c.runs:.0%}; {which})")
    _print_sectioning(*sectioning_runs)
    _print_instance_effects(*instance_sizes)
    for k in (8, 9, 10):
        rate = aa_trials_false_positive_rate(pairs, k)
        print(f"A/A trial comparison, {k} vs {k} trials, per-trial p95, alpha 0.05: "
              f"significant in {rate:.1%} of {pairs} pairs")
    _print_aa_with_holm(holm_pairs)
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
    _print_itl(itl_runs, itl_streams, stress_runs)
    print(f"percentile_estimate on 100,000 samples: {percentile_timing_s() * 1e3:.1f} ms")
    print(f"(total {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
