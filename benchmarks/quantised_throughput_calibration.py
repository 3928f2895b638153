"""Coverage of output-throughput ratio intervals when a closed loop moves in waves
(tests/support/wave_simulation.py): the plain Welch-on-logs interval against the same test over
the phase-bias box of quantised sides (vllm_slo/analysis/quantised_cells.py). Prints one row per
setting: the share of sides flagged quantised, each interval's coverage of the true ratio (95%,
unadjusted) and median width, and the share called "changed" (false at a true ratio of 1,
power otherwise).

    python3 benchmarks/quantised_throughput_calibration.py [--experiments 2000]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.wave_simulation import random_arm, wave_trials
from vllm_slo.analysis.quantised_cells import counts_quantisation, pair_bias_log
from vllm_slo.stats.trial_statistics import compare_trials

CELL = "output_throughput.mean"


def one_setting(experiments: int, trials: int, window_s: float, period_s: float,
                true_ratio: float, restart_sd: float, phase_sd: float, seed: int
                ) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    covered = {"plain": 0, "box": 0}
    changed = {"plain": 0, "box": 0}
    widths: dict[str, list[float]] = {"plain": [], "box": []}
    flagged = 0
    for _ in range(experiments):
        base = random_arm(rng, period_s)
        cand = random_arm(rng, period_s / true_ratio)
        truth = cand.true_rate / base.true_rate
        sides = []
        values = []
        for arm in (base, cand):
            rates, counts = wave_trials(arm, trials, window_s, rng, restart_sd, phase_sd)
            sides.append(counts_quantisation(CELL, "arm", list(counts), arm.users))
            values.append(rates)
        flagged += sum(q is not None for q in sides)
        for name, bias in (("plain", 0.0), ("box", pair_bias_log(sides))):
            result = compare_trials(values[0], values[1], test="welch-log", bias_log=bias)
            low, high = result.ratio.ci_low, result.ratio.ci_high
            if low is None or high is None:
                continue
            covered[name] += low <= truth <= high
            changed[name] += result.significant
            widths[name].append(math.log(high / low))
    row = {"flagged": flagged / (2 * experiments)}
    for name in ("plain", "box"):
        row[f"{name}_coverage"] = covered[name] / experiments
        row[f"{name}_changed"] = changed[name] / experiments
        row[f"{name}_width"] = float(np.median(widths[name]))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=2000)
    options = parser.parse_args()
    print(f"{options.experiments} seeded experiments a row; 64 users, 128 tokens a cycle, "
          "restart sd 1%, phase jitter 1% of a cycle; 95% intervals, alpha 0.05")
    print("trials | window/cycle | true ratio | flagged | coverage plain / box | "
          "'changed' plain / box (false at ratio 1, power otherwise) | "
          "median log-width plain / box")
    settings = [(4, 20.0, 4.0, 1.0), (4, 20.0, 4.0, 1.3), (3, 20.0, 2.5, 1.0), (6, 60.0, 4.0, 1.0),
                (4, 20.0, 4.0, 0.52)]
    for seed, (trials, window_s, period_s, ratio) in enumerate(settings):
        row = one_setting(options.experiments, trials, window_s, period_s, ratio, 0.01, 0.01,
                          seed)
        print(f"{trials} | {window_s / period_s:.1f} | {ratio:g} | {row['flagged']:.0%} | "
              f"{row['plain_coverage']:.1%} / {row['box_coverage']:.1%} | "
              f"{row['plain_changed']:.1%} / {row['box_changed']:.1%} | "
              f"{row['plain_width']:.3f} / {row['box_width']:.3f}")


if __name__ == "__main__":
    main()
