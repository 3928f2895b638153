"""How long a report takes for a big run, and how big report.html gets.

Synthesizes a run folder of N requests (default 100,000) with 64 content chunks each
(realistic: autocorrelated load, log-normal TTFT/ITL, a few multi-token chunks, 0.5% failures,
a 30 s warm-up, send lag, a server_metrics.jsonl every 2 s), writes the samples the way a run
does (Arrow IPC stream under samples/, then `consolidate` -> samples.parquet), then times
`render_run` end to end (load, metrics and statistics on every row, verdicts, summary.json,
report.html, junit.xml, summary.md) and prints the seconds and report.html's size.

Targets (issue 5): < 30 s and < 15 MB for 100,000 requests. Plots downsample or aggregate;
statistics never do; the page inlines plotly.js's basic partial bundle (1.2 MB), so it is
~1.6 MB. Bigger runs (1 M requests x 250 chunks) and the sample writer:
benchmarks/analysis_scale.py.

    python benchmarks/report_render.py                 # 100,000 requests x 64 chunks
    python benchmarks/report_render.py --requests 20000 --keep runs/bench-report
    python benchmarks/report_render.py --profile       # cProfile's top functions too

The synthetic run folder comes from tests/support/synthetic.py (the report tests use it too).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.synthetic import build_big_run


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--chunks", type=int, default=64)
    parser.add_argument("--keep", type=Path, help="build the run folder here and keep it")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries")
    options = parser.parse_args(argv)

    from vllm_slo.reports.run_report import render_run

    with tempfile.TemporaryDirectory() as scratch:
        run_dir = options.keep or Path(scratch) / "20270115T120000Z-synthetic"
        started = time.perf_counter()
        build_big_run(run_dir, options.requests, options.chunks)
        print(f"synthesized {options.requests:,} requests x {options.chunks} chunks in "
              f"{time.perf_counter() - started:.1f} s: {run_dir}")
        if options.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            started = time.perf_counter()
            profiler.runcall(render_run, run_dir)
            elapsed = time.perf_counter() - started
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        else:
            started, cpu_started = time.perf_counter(), time.process_time()
            rendered = render_run(run_dir)
            elapsed = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
            print(rendered.text)
            print(f"render_run CPU time: {cpu:.1f} s (wall exceeds it when the machine is busy)")
        size_mb = (run_dir / "report.html").stat().st_size / 1e6
        print(f"render_run: {elapsed:.1f} s (target < 30 s) · report.html {size_mb:.1f} MB "
              f"(target < 15 MB)")
        return 0 if elapsed < 30 and size_mb < 15 else 1


if __name__ == "__main__":
    sys.exit(main())
