"""What the capacity search saves against a sweep: on the M/D/c stand-in
(``tests/support/capacity_simulation.py``), the search's steps, simulated minutes, coverage
and median bracket width, against (a) a 10-rate geometric sweep over the same [low, high] and
(b) the geometric sweep with enough rates to reach the search's median width; every sweep
point is read once with the same verdicts and the same stability rule, and the sweep's
interval is the same bracket (highest load under, lowest over). Quoted in docs/statistics.md
("Capacity").

Run: ``nice python benchmarks/capacity_cost.py`` (``--seeds N``, default 300).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, vllm_slo

from benchmarks.capacity_calibration import BUDGET_S, HIGH, LOW, WARMUP_S, truth
from tests.support.capacity_simulation import PercentileSlo, search, sweep
from vllm_slo.stats.capacity_search import SearchRange, estimate_capacity
from vllm_slo.stats.statistics import clopper_pearson_interval

SLO = PercentileSlo("ttft", 90.0, 0.5)
CONFIGS = ((30.0, 0.10), (60.0, 0.10), (60.0, 0.05))  # (window_s, tolerance)


def grid(points: int) -> np.ndarray:
    return np.asarray(LOW * (HIGH / LOW) ** (np.arange(points) / (points - 1)))


def rates_for(width: float) -> int:
    """The geometric grid over [LOW, HIGH] whose neighbours are at most `width` apart."""
    return math.ceil(math.log(HIGH / LOW) / math.log1p(width)) + 1


def coverage_text(covered: int, total: int) -> str:
    low, high = clopper_pearson_interval(covered, total, 0.95)
    return f"{covered / total:.1%} [{low:.1%}, {high:.1%}]"


def sweep_row(name: str, points: int, window_s: float, seeds: int, key: int) -> str:
    loads = grid(points)
    range_ = SearchRange(LOW, HIGH, 1.0)
    covered, widths = 0, []
    true = truth(SLO)
    for index in range(seeds):
        readings = sweep(np.random.default_rng([key, index]), [SLO], loads, WARMUP_S, window_s)
        estimate = estimate_capacity(readings, range_, 0.95)
        if estimate.low is not None or estimate.high is not None:
            covered += ((estimate.low is None or estimate.low <= true)
                        and (estimate.high is None or true <= estimate.high))
        widths.append(math.inf if estimate.low is None or estimate.high is None
                      else estimate.high / estimate.low - 1)
    minutes = points * (WARMUP_S + window_s) / 60
    return (f"| {name}: {points} rates, "
            f"neighbours {loads[1] / loads[0] - 1:.1%} apart | {points} | {minutes:.1f} | "
            f"{coverage_text(covered, seeds)} | {np.median(widths):.1%} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    began = time.perf_counter()
    print(f"`{SLO.text}` (true crossing {truth(SLO):.2f} req/s), range [{LOW:g}, {HIGH:g}], "
          f"warm-up {WARMUP_S:g} s, {args.seeds} searches / sweeps a row\n")
    print("| procedure | steps (median) | simulated minutes (median) | coverage [95% CI] | "
          "median width |")
    print("|---|---|---|---|---|")
    for window_s, tolerance in CONFIGS:
        key = zlib.crc32(f"{args.seed}|{window_s}|{tolerance}".encode())
        range_ = SearchRange(LOW, HIGH, tolerance)
        outcomes = [search(np.random.default_rng([key, index]), [SLO], range_, WARMUP_S,
                           window_s, BUDGET_S) for index in range(args.seeds)]
        width = float(np.median([o.width for o in outcomes]))
        covered = sum(o.covers(truth(SLO)) for o in outcomes)
        print(f"| search, window {window_s:.0f} s, tolerance {tolerance:.0%} | "
              f"{np.median([o.steps for o in outcomes]):.0f} | "
              f"{np.median([o.minutes for o in outcomes]):.1f} | "
              f"{coverage_text(covered, args.seeds)} | {width:.1%} |")
        sweep_key = zlib.crc32(f"{args.seed}|sweep|{window_s}".encode())
        print(sweep_row("sweep", 10, window_s, args.seeds, sweep_key))
        if math.isfinite(width) and width > 0:
            points = rates_for(width)
            print(sweep_row("sweep at the search's median width", points, window_s,
                            args.seeds, sweep_key))
    print(f"\n{time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
