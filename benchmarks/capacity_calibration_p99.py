"""Calibration of the capacity search for a p99 SLO (`e2e p99 < 2s` on the simulated M/D/8
stand-in, true crossing 10.23 req/s): the range [6, 16] req/s keeps `low x window` large enough
for a p99 to PASS its first step. Prints coverage, median width, steps and simulated minutes
for 120 s and 240 s windows with steps decided at 0.95 and 0.99 (100 searches a row, tolerance
10%, warm-up 10 s, lengthen 1, budget 60 simulated minutes).

Run: ``nice python benchmarks/capacity_calibration_p99.py`` (about 1 minute on 2 cores).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, vllm_slo

from tests.support.capacity_simulation import PercentileSlo, search
from tests.support.queue_simulation import KNOWN_CROSSINGS
from vllm_slo.stats.capacity_search import SearchRange

SLO = PercentileSlo("e2e", 99.0, 2.0)
SEARCHES = 100


def main() -> int:
    truth = KNOWN_CROSSINGS[(SLO.metric, SLO.percentile, SLO.threshold_s)]
    print(f"{SLO.text} (true crossing {truth:.2f} req/s), range [6, 16] req/s, tolerance 10%, "
          f"{SEARCHES} searches a row")
    print("| window | step confidence | coverage | median width | median steps | median minutes |")
    print("|---|---|---|---|---|---|")
    for window_s in (120.0, 240.0):
        for step_confidence in (0.95, 0.99):
            rng = np.random.default_rng(3)
            outcomes = [search(rng, [SLO], SearchRange(6.0, 16.0, 0.10, lengthen=1), 10.0,
                               window_s, 3600.0, step_confidence=step_confidence)
                        for _ in range(SEARCHES)]
            coverage = np.mean([o.covers(truth) for o in outcomes])
            print(f"| {window_s:.0f} s | {step_confidence:g} | {coverage:.1%} | "
                  f"{np.median([o.width for o in outcomes]):.1%} | "
                  f"{np.median([o.steps for o in outcomes]):.0f} | "
                  f"{np.median([o.minutes for o in outcomes]):.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
