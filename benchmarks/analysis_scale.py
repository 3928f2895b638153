"""Analysis at scale: statistics and report for 1,000,000 requests (~250 M chunk timestamps).

Three measurements, printed as tables:

1. **Sample writer** (the Locust hot path): one `flush()` of 200 rows × 256 chunk offsets,
   before (schema 1: `pa.RecordBatch.from_pylist` on the row dicts, float64 offsets) and after
   (`SampleWriter`: column buffers, one flat float32 array), median of repeated flushes, side by
   side; also the cost of appending those 200 rows. Target: ≤ 2 ms a flush.
2. **1 M requests** (default; `--requests`, `--chunks`): a synthetic run folder (open loop,
   autocorrelated load, log-normal TTFT and ITL, 0.5% failures, a warm-up; samples.parquet
   written in row groups, float32 offsets) is rendered by `render_run` in a **child process**;
   the wall time of every stage of the real pipeline (reading samples, metric series,
   statistics, verdicts, figures + HTML, the other outputs) and the child's peak RSS
   (`ru_maxrss` of the child: Arrow and numpy buffers included) are printed. Targets: < 60 s
   and < 8 GiB. `--exact-too` renders the same folder first with the exact effective sizes
   (series above `effective_size.BATCHED_ABOVE` samples get Geyer's estimate from their
   autocorrelation, as before batch means) and prints both side by side.
3. **Report size** for 300 and 100,000 requests (64 chunks each). Targets: < 1.5 MB, < 15 MB.

    python benchmarks/analysis_scale.py                    # all three (1 M rows: ~10 GB of
                                                           # scratch memory while generating)
    python benchmarks/analysis_scale.py --only writer      # writer | scale | size
    python benchmarks/analysis_scale.py --only scale --requests 200000
    python benchmarks/analysis_scale.py --only scale --keep DIR --reuse --exact-too
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.stats_simulation import ar1_standard  # noqa: E402
from tests.support.synthetic import (  # noqa: E402
    T0_UNIX_S,
    build_big_run,
    complete_columns,
    scenario_document,
    synthetic_provenance,
    synthetic_server_records,
)
from vllm_slo.run_folder.run_files import (  # noqa: E402
    PROVENANCE_FILE,
    SCENARIO_FILE,
    SERVER_METRICS_FILE,
    STATUS_FILE,
)
from vllm_slo.run_folder.samples_format import (  # noqa: E402
    OFFSETS_COLUMN,
    SAMPLE_SCHEMA,
    SAMPLES_FILE,
    SampleWriter,
)

GIB = 1024 ** 3

# ------------------------------------------------------------------------------------------
# 1. the sample writer


def _writer_rows(n_rows: int, n_offsets: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_rows):
        offsets = (0.05 + np.cumsum(rng.exponential(0.02, n_offsets))).tolist()
        rows.append({
            "request_id": f"r{i}", "process_id": 1, "user_id": i % 64, "plan_index": i,
            "conversation_id": i // 3, "turn": i % 3, "phase": "measure", "endpoint": "chat",
            "intended_send_unix_s": T0_UNIX_S + i, "send_unix_s": T0_UNIX_S + i + 1e-4,
            "send_lag_s": 1e-4, "queued_for_slot": False, "ttft_s": offsets[0],
            "e2e_s": offsets[-1], OFFSETS_COLUMN: offsets, "output_tokens": n_offsets,
            "prompt_tokens": 50, "prompt_tokens_planned": 45, "max_tokens": n_offsets,
            "status_code": 200, "ok": True, "error": None, "finish_reason": "length"})
    return rows


def _schema_1() -> pa.Schema:
    index = SAMPLE_SCHEMA.get_field_index(OFFSETS_COLUMN)
    return SAMPLE_SCHEMA.set(index, pa.field(OFFSETS_COLUMN, pa.list_(pa.float64())))


class _RowDictWriter:
    """The writer before schema 2, for comparison: row dicts kept, one from_pylist a flush."""

    def __init__(self, path: Path, schema: pa.Schema):
        self.schema = schema
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, schema)
        self._rows: list[dict[str, Any]] = []

    def append(self, row: dict[str, Any]) -> None:
        self._rows.append(row)

    def flush(self) -> None:
        rows, self._rows = self._rows, []
        self._writer.write_batch(pa.RecordBatch.from_pylist(rows, schema=self.schema))
        self._sink.flush()

    def close(self) -> None:
        self._writer.close()
        self._sink.close()


def _time_writer(writer: Any, rows: list[dict[str, Any]], repeats: int
                 ) -> tuple[float, float]:
    """Median seconds of appending `rows` and of the flush that follows."""
    appends, flushes = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        for row in rows:
            writer.append(row)
        middle = time.perf_counter()
        writer.flush()
        flushes.append(time.perf_counter() - middle)
        appends.append(middle - started)
    writer.close()
    return statistics.median(appends), statistics.median(flushes)


def writer_benchmark(n_rows: int = 200, n_offsets: int = 256, repeats: int = 60) -> bool:
    rows = _writer_rows(n_rows, n_offsets)
    with tempfile.TemporaryDirectory() as scratch:
        before = _time_writer(_RowDictWriter(Path(scratch) / "v1.arrows", _schema_1()), rows,
                              repeats)
        after = _time_writer(SampleWriter(Path(scratch) / "v2.arrows"), rows, repeats)
        size_before = (Path(scratch) / "v1.arrows").stat().st_size / repeats
        size_after = (Path(scratch) / "v2.arrows").stat().st_size / repeats
    print(f"\nSample writer: flush of {n_rows} rows x {n_offsets} chunk offsets "
          f"(median of {repeats})")
    print(f"  {'':34} {'before (from_pylist, f64)':>26} {'after (SampleWriter, f32)':>26}")
    print(f"  {'flush':34} {before[1] * 1e3:>23.2f} ms {after[1] * 1e3:>23.2f} ms")
    print(f"  {'append of the 200 rows (total)':34} {before[0] * 1e3:>23.2f} ms "
          f"{after[0] * 1e3:>23.2f} ms")
    print(f"  {'bytes written a flush':34} {size_before / 1e3:>23.0f} kB "
          f"{size_after / 1e3:>23.0f} kB")
    ok = after[1] <= 0.002
    print(f"  target: flush <= 2 ms: {'met' if ok else 'NOT met'}")
    return ok


# ------------------------------------------------------------------------------------------
# 2. one million requests


def write_scale_run(run_dir: Path, n_requests: int, chunks: int, seed: int = 0,
                    batch: int = 50_000) -> int:
    """A run folder of `n_requests` rows with `chunks` content chunks each (successful
    requests), written batch by batch straight into samples.parquet (row groups), so the
    generator never holds the whole table. Returns the number of chunk offsets."""
    rng = np.random.default_rng(seed)
    warmup_s, duration_s = 30.0, max(60.0, n_requests / 160.0)
    total_s = warmup_s + duration_s
    intended = T0_UNIX_S + np.sort(rng.uniform(0.0, total_s, n_requests))
    intended[0] = T0_UNIX_S
    load = ar1_standard(np.array([0.9]), n_requests, rng)[0]
    run_dir.mkdir(parents=True, exist_ok=True)
    scenario = scenario_document("synthetic", duration_s=duration_s, warmup_s=warmup_s)
    (run_dir / SCENARIO_FILE).write_text(yaml.safe_dump(scenario, sort_keys=False))
    (run_dir / PROVENANCE_FILE).write_text(json.dumps(synthetic_provenance(), indent=2))
    (run_dir / STATUS_FILE).write_text(json.dumps({
        "server_failure": None, "load_generator_failure": None, "interrupted": False,
        "warnings": []}))
    (run_dir / SERVER_METRICS_FILE).write_text("".join(
        json.dumps(r) + "\n" for r in synthetic_server_records(total_s)))
    errors = ("SSE error event: {'message': 'server is overloaded', 'code': 503}",
              "HTTP 503: Service Unavailable")
    n_offsets = 0
    with pq.ParquetWriter(run_dir / SAMPLES_FILE, SAMPLE_SCHEMA) as parquet:
        for start in range(0, n_requests, batch):
            index = np.arange(start, min(start + batch, n_requests))
            n = index.size
            level = load[index]
            ttft = (0.08 * np.exp(0.45 * level + 0.25 * rng.standard_normal(n)))
            gaps = (0.015 * np.exp(0.25 * level))[:, None].astype(np.float32) * rng.lognormal(
                0.0, 0.35, (n, chunks - 1)).astype(np.float32)
            offsets = np.empty((n, chunks), dtype=np.float32)
            offsets[:, 0] = ttft
            offsets[:, 1:] = ttft[:, None] + np.cumsum(gaps, axis=1, dtype=np.float64)
            ok = rng.random(n) >= 0.005
            lengths = np.where(ok, chunks, 0).astype(np.int32)
            list_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            flat = offsets[ok].ravel()
            n_offsets += flat.size
            lag = rng.exponential(0.0004, n)
            sent = intended[index]
            failed = np.flatnonzero(~ok)
            error = np.full(n, None, dtype=object)
            error[failed] = [errors[k % 2] for k in range(failed.size)]
            columns = {
                "request_id": pa.array([f"r{i}" for i in index]),
                "process_id": pa.array(np.ones(n, dtype=np.int32)),
                "user_id": pa.array((index % 256).astype(np.int32)),
                "plan_index": pa.array(index.astype(np.int64)),
                "phase": pa.array(np.where(sent - T0_UNIX_S < warmup_s, "warmup",
                                           "measure").tolist()),
                "endpoint": pa.array(["completions"] * n),
                "intended_send_unix_s": pa.array(sent),
                "send_unix_s": pa.array(sent + lag), "send_lag_s": pa.array(lag),
                "queued_for_slot": pa.array(np.zeros(n, dtype=bool)),
                "ttft_s": pa.array(ttft.astype(np.float64), mask=~ok),
                "e2e_s": pa.array(np.where(ok, offsets[:, -1].astype(np.float64) + 0.001,
                                           0.05)),
                OFFSETS_COLUMN: pa.ListArray.from_arrays(pa.array(list_offsets),
                                                         pa.array(flat)),
                "output_tokens": pa.array(
                    (chunks + rng.binomial(chunks, 0.05, n)).astype(np.int32), mask=~ok),
                "prompt_tokens": pa.array(np.full(n, 512, dtype=np.int32)),
                "max_tokens": pa.array(np.full(n, chunks, dtype=np.int32)),
                "status_code": pa.array(np.where(ok, 200, 503).astype(np.int32)),
                "ok": pa.array(ok),
                "error": pa.array(error.tolist(), type=pa.string()),
                "finish_reason": pa.array(np.where(ok, "length", None).tolist(),
                                          type=pa.string()),
            }
            parquet.write_table(complete_columns(columns, n))
    return n_offsets


_STAGES = {  # module attribute -> stage name, in pipeline order
    "vllm_slo.reports.run_folder_read.read_samples": "read samples.parquet",
    "vllm_slo.analysis.run_analysis.run_series": "metric series (ITL gaps in arrival order)",
    "vllm_slo.analysis.run_analysis.summarize": "statistics (percentile CIs, means)",
    "vllm_slo.analysis.run_analysis.evaluate_slos": "SLO verdicts",
    "vllm_slo.analysis.run_analysis.goodput": "goodput",
    "vllm_slo.reports.run_report.build_view": "figures (report view)",
    "vllm_slo.reports.run_report.render_html": "HTML",
}


def _child(run_dir: str, exact: bool) -> None:
    """In the child process: render_run with every stage timed; JSON on the last line."""
    import importlib

    if exact:  # every series gets the exact estimate (blocked autocovariances when long)
        from vllm_slo.stats import effective_size
        effective_size.BATCHED_ABOVE = sys.maxsize
    times: dict[str, float] = {}
    peaks: dict[str, int] = {}

    def timed(name: str, function: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                times[name] = times.get(name, 0.0) + time.perf_counter() - started
                peaks[name] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return wrapper

    for dotted, name in _STAGES.items():
        module_name, attribute = dotted.rsplit(".", 1)
        module = importlib.import_module(module_name)
        setattr(module, attribute, timed(name, getattr(module, attribute)))
    from vllm_slo.reports.run_report import render_run
    started = time.perf_counter()
    rendered = render_run(Path(run_dir))
    total = time.perf_counter() - started
    summary = rendered.summary
    itl = summary["metrics"]["itl"]
    print(json.dumps({"times": times, "peaks_kib": peaks, "total": total,
                      "itl_count": itl["count"], "itl_p99": itl["percentiles"]["p99"],
                      "itl_n_effective": {"mean": itl["mean"]["n_effective"], **{
                          name: value["n_effective"]
                          for name, value in itl["percentiles"].items()}},
                      "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))


def run_child(run_dir: Path, exact: bool = False) -> tuple[dict[str, Any], float, int]:
    """render_run in a fresh interpreter: its JSON, wall seconds, and peak RSS in bytes (the
    child's own ``ru_maxrss``, so that several children can run in turn)."""
    started = time.perf_counter()
    result = subprocess.run([sys.executable, __file__, "--child", str(run_dir),
                             *(["--child-exact"] if exact else [])],
                            capture_output=True, text=True, env={**os.environ,
                                                                 "PYTHONHASHSEED": "0"})
    wall = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"child failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    output = json.loads(result.stdout.strip().splitlines()[-1])
    return output, wall, output["maxrss_kib"] * 1024  # KiB on Linux


def _print_runs(runs: dict[str, tuple[dict[str, Any], float, int]]) -> None:
    """The stage table, one seconds / peak-RSS column pair per rendering."""
    header = "".join(f" {label + ': seconds':>20} {'peak RSS so far':>16}" for label in runs)
    print(f"  {'stage (render_run in a child process)':44}{header}")
    for name in _STAGES.values():
        cells = "".join(f" {r['times'].get(name, 0.0):>20.1f} "
                        f"{r['peaks_kib'].get(name, 0) * 1024 / GIB:>12.2f} GiB"
                        for r, _, _ in runs.values())
        print(f"  {name:44}{cells}")
    rest = "".join(f" {r['total'] - sum(r['times'].values()):>20.1f} {'':>16}"
                   for r, _, _ in runs.values())
    print(f"  {'other outputs (summary.json, junit, md)':44}{rest}")
    total = "".join(f" {r['total']:>20.1f} {peak / GIB:>12.2f} GiB"
                    for r, _, peak in runs.values())
    print(f"  {'render_run total; peak RSS':44}{total}")
    for label, (result, wall, peak) in runs.items():
        p99 = result["itl_p99"]
        n_eff = ", ".join(f"{name} {value:,.0f}"
                          for name, value in result["itl_n_effective"].items())
        print(f"  {label}: child wall time (with interpreter start-up) {wall:.1f} s, peak RSS "
              f"{peak / GIB:.2f} GiB; ITL {result['itl_count']:,} gaps, p99 "
              f"{p99['value'] * 1e3:.3f} ms [{p99['ci_low'] * 1e3:.3f}, "
              f"{p99['ci_high'] * 1e3:.3f}]; n_eff {n_eff}")


def scale_benchmark(n_requests: int, chunks: int, keep: Path | None, reuse: bool = False,
                    exact_too: bool = False) -> bool:
    with tempfile.TemporaryDirectory() as scratch:
        run_dir = keep or Path(scratch) / "20270115T120000Z-scale"
        if reuse and (run_dir / SAMPLES_FILE).exists():
            metadata = pq.read_metadata(run_dir / SAMPLES_FILE)
            print(f"\n{run_dir} reused: {metadata.num_rows:,} requests, samples.parquet "
                  f"{(run_dir / SAMPLES_FILE).stat().st_size / 1e9:.2f} GB")
        else:
            started = time.perf_counter()
            n_offsets = write_scale_run(run_dir, n_requests, chunks)
            size = (run_dir / SAMPLES_FILE).stat().st_size
            print(f"\n{n_requests:,} requests x {chunks} chunks: {n_offsets:,} chunk offsets, "
                  f"samples.parquet {size / 1e9:.2f} GB, generated in "
                  f"{time.perf_counter() - started:.0f} s")
        runs = {}
        if exact_too:
            runs["exact"] = run_child(run_dir, exact=True)
        runs["report"] = run_child(run_dir)
        _print_runs(runs)
        result, _, peak = runs["report"]
        ok = result["total"] < 60 and peak < 8 * GIB
        print(f"  targets (< 60 s, < 8 GiB): {'met' if ok else 'NOT met'}")
        return ok


# ------------------------------------------------------------------------------------------
# 3. report size


def size_benchmark(counts: Sequence[int] = (300, 100_000), chunks: int = 64) -> bool:
    from vllm_slo.reports.run_report import render_run
    limits = {300: 1.5e6, 100_000: 15e6}
    ok = True
    print(f"\nreport.html size ({chunks} chunks a request)")
    for n in counts:
        with tempfile.TemporaryDirectory() as scratch:
            run_dir = build_big_run(Path(scratch) / "20270115T120000Z-size", n, chunks)
            started = time.perf_counter()
            render_run(run_dir)
            seconds = time.perf_counter() - started
            size = (run_dir / "report.html").stat().st_size
        limit = limits.get(n)
        met = "met" if limit is not None and size < limit else "NOT met"
        verdict = "" if limit is None else f" (target < {limit / 1e6:.1f} MB: {met})"
        ok &= limit is None or size < limit
        print(f"  {n:>9,} requests: {size / 1e6:6.2f} MB, render_run {seconds:5.1f} s{verdict}")
    return ok


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("writer", "scale", "size"))
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--chunks", type=int, default=250)
    parser.add_argument("--keep", type=Path, help="write the big run folder here and keep it")
    parser.add_argument("--reuse", action="store_true",
                        help="with --keep: render the folder's samples.parquet again if it "
                             "exists (no new data; --requests and --chunks are ignored)")
    parser.add_argument("--exact-too", action="store_true",
                        help="also render with the exact effective sizes (before batch means) "
                             "and print both side by side")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-exact", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        _child(options.child, options.child_exact)
        return 0
    if options.reuse and options.keep is None:
        parser.error("--reuse needs --keep DIR")
    print(f"(machine: {os.cpu_count()} CPUs; timings are wall clock)")
    ok = True
    if options.only in (None, "writer"):
        ok &= writer_benchmark()
    if options.only in (None, "scale"):
        ok &= scale_benchmark(options.requests, options.chunks, options.keep, options.reuse,
                              options.exact_too)
    if options.only in (None, "size"):
        ok &= size_benchmark()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
