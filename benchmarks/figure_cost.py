"""What a run report's figures cost: each figure of `render_run`'s page built from a synthetic
run's series, timed as the report builds it (plain dicts, `reports/render/plot_spec.py`) and,
side by side in the same process, the same figure passed through plotly's Python objects
(`go.Figure(spec).to_json()`: the property validation the dict route skips).

    python benchmarks/figure_cost.py                   # 2,000 requests x 16 chunks, 20 rounds
    python benchmarks/figure_cost.py --requests 20000 --rounds 5

Prints milliseconds per figure for both routes and their total; every trial of an experiment
or a capacity search renders these five figures once.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.synthetic import build_big_run


def _best_ms(build: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        build()
        best = min(best, time.perf_counter() - started)
    return best * 1e3


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=20)
    options = parser.parse_args(argv)

    import plotly.graph_objects as go

    from vllm_slo.analysis.server_metrics import build_server_series
    from vllm_slo.reports.render import figures
    from vllm_slo.reports.run_report import load_run

    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / "20270115T120000Z-synthetic"
        build_big_run(run_dir, options.requests, options.chunks)
        loaded = load_run(run_dir)
    timeline = {"run": figures.build_timeline(loaded.table)}
    health = {"run": figures.build_health(loaded.table, loaded.series)}
    server_series = build_server_series(loaded.server_records or [],
                                        timeline["run"].phases.start_unix_s)
    server = {"run": server_series} if server_series is not None else {}
    builds: dict[str, Callable[[], str | None]] = {
        "latency ECDF": lambda: figures.latency_ecdf_figure({"run": loaded.series}),
        "timeline": lambda: figures.timeline_figure(timeline),
        "throughput": lambda: figures.throughput_figure(timeline),
        "server metrics": lambda: figures.server_metrics_figure(
            server, timeline["run"].phases),
        "health": lambda: figures.health_figure(health),
    }
    print(f"{options.requests:,} requests x {options.chunks} chunks; best of "
          f"{options.rounds} rounds, ms a figure")
    print(f"{'figure':<16} {'dicts':>8} {'plotly objects':>15}")
    totals = [0.0, 0.0]
    for name, build in builds.items():
        text = build()
        if text is None:
            print(f"{name:<16} {'(no data)':>8}")
            continue
        spec = json.loads(text)
        ms = (_best_ms(build, options.rounds),
              _best_ms(lambda spec=spec: go.Figure(spec).to_json(), options.rounds))
        totals = [totals[0] + ms[0], totals[1] + ms[1]]
        print(f"{name:<16} {ms[0]:8.1f} {ms[1]:15.1f}")
    print(f"{'total':<16} {totals[0]:8.1f} {totals[1]:15.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
