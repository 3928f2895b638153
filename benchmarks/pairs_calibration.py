"""Family-wise A/A rate over the pairs of a many-armed comparison: each arm against the
baseline, 2 cells, Welch on logs, fixed trials; any false "changed" over every pair and cell,
with each pair at alpha and at `per_pair_alpha` (Bonferroni over the pairs, Holm within).

    python3 benchmarks/pairs_calibration.py [--experiments 4000]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # vllm_slo

from vllm_slo.analysis.comparison import per_pair_alpha
from vllm_slo.stats.trial_statistics import compare_trials, with_holm


def family_rates(experiments: int, arms: int, trials: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    levels = (0.05, per_pair_alpha(0.05, arms))
    found = dict.fromkeys(levels, 0)
    for _ in range(experiments):
        values = rng.lognormal(0.0, 0.1, (arms, 2, trials))
        for alpha in levels:
            found[alpha] += any(
                r.significant for arm in range(1, arms)
                for r in with_holm([compare_trials(values[0, c], values[arm, c], alpha=alpha,
                                                   test="welch-log") for c in range(2)]))
    return found[levels[0]] / experiments, found[levels[1]] / experiments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=4000)
    n = parser.parse_args().experiments
    print(f"{n} seeded A/A experiments a row (binomial 95% half-width at 5%: "
          f"±{1.96 * math.sqrt(0.05 * 0.95 / n):.1%})")
    print("arms | trials an arm | any false 'changed': each pair at 0.05 / at 0.05/(arms-1)")
    for seed, (arms, trials) in enumerate([(3, 4), (3, 6), (4, 6), (5, 4)]):
        naive, corrected = family_rates(n, arms, trials, seed)
        print(f"{arms} | {trials} | {naive:.1%} / {corrected:.1%}")


if __name__ == "__main__":
    main()
