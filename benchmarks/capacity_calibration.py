"""Calibration of the capacity search (``vllm_slo.stats.capacity_search``) on the M/D/c
stand-in of known capacity: prints the table quoted in docs/statistics.md ("Capacity"). The
simulations are ``tests/support/capacity_simulation.py`` (each step read as ``vllm-slo
capacity`` reads one: ``percentile_threshold_test`` verdicts, the TTFT growth rule), which
``tests/unit/test_capacity_search.py`` asserts on too.

For each SLO, window (warm-up 10 s) and tolerance: the share of N searches whose bracket holds
the true crossing (Clopper-Pearson 95% interval), the median bracket width (high / low - 1),
the median steps and simulated minutes (warm-up + window of every step), and how the searches
ended. Range [4, 16] req/s, lengthen 1, budget 30 simulated minutes.

Run: ``nice python benchmarks/capacity_calibration.py`` (``--seeds N``, default 1000;
``--quick`` for 200; ``--step-confidence C``, default capacity.step_confidence's 0.99);
``--crossings`` recomputes ``KNOWN_CROSSINGS`` at 20 M requests (about 15 s each).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, vllm_slo

from tests.support.capacity_simulation import PercentileSlo, SearchOutcome, search
from tests.support.queue_simulation import KNOWN_CROSSINGS, true_crossing
from vllm_slo.scenarios.capacity_spec import DEFAULT_STEP_CONFIDENCE
from vllm_slo.stats.capacity_search import SearchRange, SearchStatus
from vllm_slo.stats.statistics import clopper_pearson_interval

SLOS = (PercentileSlo("ttft", 90.0, 0.5), PercentileSlo("e2e", 99.0, 2.0),
        PercentileSlo("ttft", 50.0, 0.2))
LOW, HIGH = 4.0, 16.0
WARMUP_S = 10.0
WINDOWS_S = (30.0, 60.0)
TOLERANCES = (0.05, 0.10)
BUDGET_S = 30 * 60.0


def truth(slo: PercentileSlo) -> float:
    return KNOWN_CROSSINGS[(slo.metric, slo.percentile, slo.threshold_s)]


def run_config(slo: PercentileSlo, window_s: float, tolerance: float, seeds: int,
               seed: int = 0, step_confidence: float = DEFAULT_STEP_CONFIDENCE
               ) -> list[SearchOutcome]:
    key = zlib.crc32(f"{seed}|{slo.text}|{window_s}|{tolerance}".encode())
    range_ = SearchRange(LOW, HIGH, tolerance)
    return [search(np.random.default_rng([key, index]), [slo], range_, WARMUP_S, window_s,
                   BUDGET_S, step_confidence=step_confidence) for index in range(seeds)]


def share(outcomes: Sequence[SearchOutcome], status: SearchStatus) -> float:
    return sum(o.status is status for o in outcomes) / len(outcomes)


def row(slo: PercentileSlo, window_s: float, tolerance: float,
        outcomes: Sequence[SearchOutcome]) -> str:
    true = truth(slo)
    covered = sum(o.covers(true) for o in outcomes)
    low, high = clopper_pearson_interval(covered, len(outcomes), 0.95)
    widths = [o.width for o in outcomes]
    ends = collections.Counter(o.status for o in outcomes)
    other = len(outcomes) - sum(ends[s] for s in (SearchStatus.BRACKETED,
                                                  SearchStatus.UNDECIDED,
                                                  SearchStatus.BUDGET_SPENT))
    return (f"| `{slo.text}` ({true:.2f}) | {window_s:.0f} s | {tolerance:.0%} | "
            f"{covered / len(outcomes):.1%} [{low:.1%}, {high:.1%}] | "
            f"{np.median(widths):.1%} | {np.median([o.steps for o in outcomes]):.0f} | "
            f"{np.median([o.minutes for o in outcomes]):.1f} | "
            f"{share(outcomes, SearchStatus.BRACKETED):.0%} / "
            f"{share(outcomes, SearchStatus.UNDECIDED):.0%} / "
            f"{share(outcomes, SearchStatus.BUDGET_SPENT):.0%} / {other / len(outcomes):.0%} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="200 seeds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-confidence", type=float, default=DEFAULT_STEP_CONFIDENCE,
                        help="each step's verdicts (capacity.step_confidence)")
    parser.add_argument("--crossings", action="store_true",
                        help="recompute the true crossings at 20 M requests and stop")
    args = parser.parse_args(argv)
    if args.crossings:
        for slo in SLOS:
            began = time.perf_counter()
            value = true_crossing(slo.percentile, slo.threshold_s, slo.metric)
            print(f"{slo.text}: {value:.4f} req/s (cached {truth(slo):.4f}; "
                  f"{time.perf_counter() - began:.0f} s)")
        return 0
    seeds = 200 if args.quick else args.seeds
    began = time.perf_counter()
    print(f"range [{LOW:g}, {HIGH:g}] req/s, warm-up {WARMUP_S:g} s, lengthen 1, budget "
          f"{BUDGET_S / 60:g} min, {seeds} searches a row; stand-in M/D/8, 0.68 s service; "
          f"step verdicts at {args.step_confidence:g}\n")
    print("| SLO (true crossing, req/s) | window | tolerance | coverage [95% CI] | median "
          "width | median steps | median minutes | bracketed / undecided / budget / other |")
    print("|---|---|---|---|---|---|---|---|")
    for slo in SLOS:
        for window_s in WINDOWS_S:
            for tolerance in TOLERANCES:
                outcomes = run_config(slo, window_s, tolerance, seeds, args.seed,
                                      args.step_confidence)
                print(row(slo, window_s, tolerance, outcomes), flush=True)
    print(f"\n{time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
