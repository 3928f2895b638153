"""A/A rate of the sequential design when trials go missing (a failed or interrupted trial
counts as missing at its look), with and without the rule that a look needs `min_trials` valid
trials an arm (`stats.sequential.look_needs`). Each experiment: 2 arms of up to 6 trials
(looks at 3..6, O'Brien-Fleming spending, Welch on logs, 2 cells, alpha 0.05), a log-normal
trial-to-trial CV of 10% on arm A and `ratio` times that on arm B, each trial missing with
probability `missing` independently, no true change. Prints the share called "changed".

    python3 benchmarks/missing_trials_calibration.py [--experiments 4000]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # vllm_slo

from vllm_slo.stats import sequential
from vllm_slo.stats.sequential import SequentialDesign, decide_cells


def aa_rate(experiments: int, missing: float, ratio: float, seed: int, rule: bool,
            design: SequentialDesign) -> float:
    rng = np.random.default_rng(seed)
    changed = 0
    sd = math.log1p(0.10)
    with mock.patch.object(sequential, "look_needs",
                           sequential.look_needs if rule else (lambda d: 2)):
        for _ in range(experiments):
            values = {}
            for cell in ("c1", "c2"):
                a = np.exp(rng.normal(0.0, sd, design.max_trials))
                b = np.exp(rng.normal(0.0, sd * ratio, design.max_trials))
                a[rng.uniform(size=a.size) < missing] = np.nan
                b[rng.uniform(size=b.size) < missing] = np.nan
                values[cell] = (list(a), list(b))
            decisions = decide_cells(design, design.max_trials, values)
            changed += any(d.decision == "changed" for d in decisions)
    return changed / experiments


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=4000)
    options = parser.parse_args()
    design = SequentialDesign(3, 6, 0.05, 0.10, 2)
    n = options.experiments
    print(f"{n} seeded A/A experiments a row; looks at 3..6 trials an arm, 2 cells, "
          "alpha 0.05; the binomial 95% half-width at 5% is "
          f"±{1.96 * math.sqrt(0.05 * 0.95 / n):.1%}")
    print("missing | B's spread / A's | A/A 'changed': looks at >= 2 valid / >= 3 valid")
    for seed, (missing, ratio) in enumerate([(0.0, 1.0), (0.0, 2.0), (0.1, 1.0), (0.1, 2.0),
                                             (0.2, 1.0), (0.2, 2.0)]):
        old = aa_rate(n, missing, ratio, seed, False, design)
        new = aa_rate(n, missing, ratio, seed, True, design)
        print(f"{missing:.0%} | {ratio:g} | {old:.1%} / {new:.1%}")


if __name__ == "__main__":
    main()
