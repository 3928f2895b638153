"""Calibration of the sequential trial decision (``vllm_slo.stats.sequential``): prints the
markdown tables quoted in docs/statistics.md ("Sequential trials"). The simulations (instance
models, the rule as ``decide_cells`` applies it) are ``tests/support/trial_simulation.py``,
which ``tests/unit/test_sequential.py`` asserts on too.

Run: ``python benchmarks/sequential_calibration.py`` (``--reps N``, ``--seed S``; ``--quick`` for
a test-sized run). Every configuration draws its own stream from ``(seed, configuration)``.
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support, vllm_slo

from tests.support.trial_simulation import (
    Scenario,
    SequentialOutcome,
    proportion_interval,
    simulate,
)
from vllm_slo.stats.sequential import SequentialDesign, SpendingFunction, TrialTest

ALPHA = 0.05
EFFECT = 0.10  # compare.effect's default: the equivalence margin
CELLS = 2  # the shipped A/B scenarios compare two cells
SEQUENTIAL = (3, 10)
FIXED = ((4, 4), (10, 10))
A_A_MODELS = (Scenario("lognormal", 0.10), Scenario("lognormal", 0.20),
              Scenario("lognormal", 0.40), Scenario("t3", 0.20), Scenario("contaminated", 0.20))
RATIOS = (1.10, 1.50, 3.0)
POWER_CVS = (0.10, 0.15, 0.20, 0.40)
STARTS_CV = 0.15
TIGHT_CV = 0.03  # a stand-in-like A/A: equivalence within the margin is reachable
MARGIN_CVS = (0.03, 0.05, 0.10)


def _design(trials: tuple[int, int], test: TrialTest, cells: int = CELLS,
            spending: SpendingFunction = "obrien-fleming") -> SequentialDesign:
    return SequentialDesign(trials[0], trials[1], ALPHA, EFFECT, cells, test, spending)


def _name(design: SequentialDesign) -> str:
    counts = (f"{design.min_trials}-{design.max_trials}" if design.sequential
              else f"{design.max_trials}+{design.max_trials}")
    spending = " pocock" if design.spending == "pocock" else ""
    kind = "seq" if design.sequential else "fixed"
    return f"{design.test} {kind} {counts}{spending}"


def _run(design: SequentialDesign, scenario: Scenario, reps: int, seed: int) -> SequentialOutcome:
    key = f"{seed}|{design}|{scenario}".encode()
    return simulate(design, scenario, reps, zlib.crc32(key))


def _rate(p: float, reps: int) -> str:
    low, high = proportion_interval(p, reps)
    return f"{p:.1%} [{low:.1%}, {high:.1%}]"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def false_positive_table(reps: int, seed: int) -> str:
    designs = [_design(SEQUENTIAL, "welch-log"), _design(SEQUENTIAL, "mann-whitney"),
               _design(SEQUENTIAL, "welch-log", spending="pocock"),
               _design(SEQUENTIAL, "welch-log", cells=1),
               _design(SEQUENTIAL, "mann-whitney", cells=1),
               *(_design(trials, test) for trials in FIXED
                 for test in ("welch-log", "mann-whitney"))]
    rows = []
    for design in designs:
        row = [_name(design), str(design.cells)]
        row += [_rate(_run(design, scenario, reps, seed).any_changed, reps)
                for scenario in A_A_MODELS]
        rows.append(row)
    return _table(["design", "cells", *(s.label for s in A_A_MODELS)], rows)


def margin_table(reps: int, seed: int) -> str:
    scenarios = [Scenario("lognormal", cv, 1.0 + EFFECT) for cv in MARGIN_CVS]
    scenarios.append(Scenario("t3", 0.05, 1.0 + EFFECT))
    scenarios.append(Scenario("lognormal", 0.05, 1.0 / (1.0 + EFFECT)))
    designs = [_design(SEQUENTIAL, "welch-log"), _design(SEQUENTIAL, "mann-whitney"),
               _design(SEQUENTIAL, "welch-log", cells=1),
               _design(FIXED[1], "welch-log"), _design(FIXED[1], "mann-whitney")]
    rows = []
    for design in designs:
        row = [_name(design), str(design.cells)]
        row += [_rate(_run(design, scenario, reps, seed).any_equivalent, reps)
                for scenario in scenarios]
        rows.append(row)
    labels = [f"{s.label}, ratio {s.ratio:.3g}" for s in scenarios]
    return _table(["design", "cells", *labels], rows)


def power_table(reps: int, seed: int) -> str:
    designs = [_design(SEQUENTIAL, "welch-log"), _design(SEQUENTIAL, "mann-whitney"),
               *(_design(trials, test) for trials in FIXED
                 for test in ("welch-log", "mann-whitney"))]
    rows = []
    for cv in POWER_CVS:
        for ratio in RATIOS:
            row = [f"{cv:.0%}", f"×{ratio:g}"]
            row += [f"{_run(d, Scenario('lognormal', cv, ratio), reps, seed).changed:.1%}"
                    for d in designs]
            rows.append(row)
    return _table(["CV", "true ratio", *(_name(d) for d in designs)], rows)


def starts_table(reps: int, seed: int) -> str:
    designs = [_design(SEQUENTIAL, "welch-log"),
               _design(SEQUENTIAL, "welch-log", spending="pocock"),
               _design(SEQUENTIAL, "mann-whitney"),
               *(_design(trials, test) for trials in FIXED
                 for test in ("welch-log", "mann-whitney"))]
    rows = []
    for design in designs:
        row = [_name(design)]
        tight = _run(design, Scenario("lognormal", TIGHT_CV), reps, seed)
        row.append(f"{tight.mean_server_starts:.1f} ({tight.all_decided:.0%})")
        for ratio in (1.0, *RATIOS):
            outcome = _run(design, Scenario("lognormal", STARTS_CV, ratio), reps, seed)
            decided = outcome.changed if ratio != 1.0 else outcome.all_decided
            row.append(f"{outcome.mean_server_starts:.1f} ({decided:.0%})")
        rows.append(row)
    header = ["design", f"A/A at CV {TIGHT_CV:.0%}: starts (all decided)",
              "A/A: starts (all decided)",
              *(f"×{r:g}: starts (changed)" for r in RATIOS)]
    return _table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=40_000, help="replications per configuration")
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--quick", action="store_true", help="1,000 replications")
    args = parser.parse_args(argv)
    reps = 1_000 if args.quick else args.reps
    if reps < 1:
        parser.error("--reps must be >= 1")
    started = time.perf_counter()
    print(f"Sequential calibration: {reps:,} replications per configuration, seed {args.seed}, "
          f"alpha {ALPHA:g}, effect (equivalence margin) ±{EFFECT:.0%}, sequential "
          f"{SEQUENTIAL[0]}-{SEQUENTIAL[1]} trials per arm, cells {CELLS} unless said\n")
    print("### A/A: \"changed\" on any cell (false-positive rate, 95% CI)\n")
    print(false_positive_table(reps, args.seed), "\n")
    print(f"### True ratio at the margin: \"equivalent\" on any cell (must be <= {ALPHA:.0%})\n")
    print(margin_table(reps, args.seed), "\n")
    print("### Power: share of cells decided \"changed\" (every cell at the true ratio)\n")
    print(power_table(reps, args.seed), "\n")
    print(f"### Mean server starts (2 x trials per arm at the stop), CV {STARTS_CV:.0%} (and an "
          f"A/A at CV {TIGHT_CV:.0%}); in brackets how often the aim was reached\n")
    print(starts_table(reps, args.seed), "\n")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
