"""Stalls: a server that keeps its connections open but sends nothing (SIGSTOP, a hung engine)
makes the run invalid, named with its time, whatever the request timeout; an idle gap and a
slow but progressing server are not stalls. Tables are simulated closed loops."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa

from tests.support.synthetic import complete_columns, scenario_document, write_run_folder
from vllm_slo.analysis.outages import (
    MIN_STALL_S,
    find_stalls,
    stall_threshold_s,
    table_spans,
    table_stalls,
)
from vllm_slo.analysis.run_metrics import run_series
from vllm_slo.reports.run_report import load_run

RUN_START_S = 1_800_000_000.0


def _advance(clock_s: float, step_s: float, freeze: tuple[float, float] | None) -> float:
    """The server's work of `step_s` begun at `clock_s`, with its clock stopped in `freeze`."""
    if freeze is None:
        return clock_s + step_s
    f0, f1 = freeze
    if clock_s + step_s <= f0:
        return clock_s + step_s
    if clock_s < f0:
        return f1 + (clock_s + step_s - f0)
    if clock_s < f1:
        return f1 + step_s
    return clock_s + step_s


def closed_loop(users: int, run_s: float, *, ttft_s: float = 0.05, itl_s: float = 0.01,
                chunks: int = 16, think_s: float = 0.0, freeze: tuple[float, float] | None = None,
                timeout_s: float = math.inf, idle: tuple[float, float] | None = None,
                seed: int = 0) -> pa.Table:
    """Rows of `users` closed-loop users sending for `run_s` (seconds after RUN_START_S);
    in `freeze` (offsets; end inf: never resumed) the server makes no progress; a request
    past `timeout_s` is cut (`timeout`), one still open at the stop is `cancelled` there;
    in `idle` nobody sends."""
    rng = np.random.default_rng(seed)
    stop_s = RUN_START_S + run_s
    frozen = None if freeze is None else (RUN_START_S + freeze[0], RUN_START_S + freeze[1])
    columns: dict[str, list] = {name: [] for name in (
        "request_id", "process_id", "phase", "endpoint", "intended_send_unix_s", "send_unix_s",
        "send_lag_s", "ttft_s", "e2e_s", "chunk_offsets_s", "status_code", "ok", "status",
        "error", "output_tokens")}
    for user in range(users):
        clock = RUN_START_S + rng.uniform(0, 0.05)
        while clock < stop_s:
            if idle is not None and RUN_START_S + idle[0] <= clock < RUN_START_S + idle[1]:
                clock = RUN_START_S + idle[1]
                continue
            send = clock
            times = [_advance(send, ttft_s * rng.uniform(0.8, 1.2), frozen)]
            for _ in range(chunks - 1):
                times.append(_advance(times[-1], itl_s * rng.uniform(0.5, 1.5), frozen))
            limit = min(send + timeout_s, stop_s)
            seen = [t for t in times if t <= limit]
            if len(seen) == len(times):
                end, status, code = times[-1], "ok", 200
            else:
                end = limit
                status = "timeout" if limit < stop_s else "cancelled"
                code = 200 if seen else 0
            columns["request_id"].append(f"u{user}-{len(columns['request_id'])}")
            columns["process_id"].append(1)
            columns["phase"].append("measure")
            columns["endpoint"].append("chat")
            columns["intended_send_unix_s"].append(send)
            columns["send_unix_s"].append(send)
            columns["send_lag_s"].append(0.0)
            columns["ttft_s"].append(seen[0] - send if seen else None)
            columns["e2e_s"].append(end - send)
            columns["chunk_offsets_s"].append([t - send for t in seen])
            columns["status_code"].append(code)
            columns["ok"].append(status == "ok")
            columns["status"].append(status)
            columns["error"].append(None if status == "ok" else f"{status}: cut")
            columns["output_tokens"].append(len(seen))
            clock = end + think_s
            if status == "cancelled":
                break
    return complete_columns(columns, len(columns["request_id"]))


def _offsets(stall, run_start_s: float = RUN_START_S) -> tuple[float, float]:
    return stall.start_unix_s - run_start_s, stall.end_unix_s - run_start_s


def test_a_healthy_closed_loop_has_no_stall() -> None:
    assert table_stalls(closed_loop(64, 20.0)) == ()


def test_a_freeze_that_resumes_is_a_stall_with_its_time_and_streams() -> None:
    (stall,) = table_stalls(closed_loop(64, 20.0, freeze=(8.0, 15.0)))
    start, end = _offsets(stall)
    assert 7.8 < start <= 8.0 and 15.0 <= end < 15.1  # the last chunk before, the first after
    assert stall.streams == 64 and stall.cut == 0
    reason = stall.reason(RUN_START_S)
    assert "no chunk arrived on any of 64 streams" in reason
    assert f"from {start:.1f} s to {end:.1f} s" in reason


def test_a_freeze_to_the_end_runs_to_the_stop_and_counts_the_cancelled() -> None:
    table = closed_loop(64, 20.0, freeze=(12.3, math.inf))
    (stall,) = table_stalls(table)
    start, end = _offsets(stall)
    assert 12.1 < start <= 12.3 and end == 20.0
    assert stall.streams == 64 and stall.cut == 64
    assert "64 of them were cut by the client" in stall.reason(RUN_START_S)


def test_a_short_request_timeout_does_not_hide_the_stall() -> None:
    """Timed-out requests end, users send again into the frozen server: no progress all along."""
    (stall,) = table_stalls(closed_loop(16, 20.0, freeze=(6.0, math.inf), timeout_s=2.0))
    start, end = _offsets(stall)
    assert 5.8 < start <= 6.0 and end == 20.0
    assert stall.streams >= 16 * 6  # every request sent after the freeze, each cut at 2 s
    assert stall.cut == stall.streams


def test_an_idle_gap_with_nothing_in_flight_is_not_a_stall() -> None:
    assert table_stalls(closed_loop(8, 30.0, idle=(5.0, 25.0))) == ()


def test_a_slow_server_is_judged_against_its_own_pace() -> None:
    """One user, 8 s to the first token each time: 8 s silences are this server's pace."""
    slow = closed_loop(1, 60.0, ttft_s=8.0, itl_s=0.2, chunks=4)
    spans = table_spans(slow)
    assert stall_threshold_s(spans) > 8.0 * 1.2
    assert table_stalls(slow) == ()
    # ... but a silence well past its pace is one
    assert find_stalls(spans, threshold_s=MIN_STALL_S)  # the pace is what keeps it out
    (stall,) = table_stalls(closed_loop(1, 120.0, ttft_s=8.0, itl_s=0.2, chunks=4,
                                        freeze=(50.0, 100.0)))
    assert stall.duration_s > 45.0


def test_a_busy_slow_server_that_progresses_is_not_a_stall() -> None:
    assert table_stalls(closed_loop(64, 30.0, ttft_s=3.0, itl_s=1.5, chunks=8)) == ()


def test_cancelled_rows_are_failures_of_their_window() -> None:
    table = closed_loop(32, 20.0, freeze=(12.0, math.inf))
    series = run_series(table, 20.0)
    cancelled = table.column("status").to_pylist().count("cancelled")
    assert cancelled == 32
    assert series.failed == cancelled and series.requests == table.num_rows


def test_a_stalled_run_folder_is_invalid_and_names_the_stall(tmp_path: Path) -> None:
    table = closed_loop(32, 20.0, freeze=(12.0, math.inf))
    scenario = scenario_document("stall", duration_s=20.0, warmup_s=0.0,
                                 slo={"error_rate": "< 50%"})
    run_dir = write_run_folder(tmp_path / "run", table, scenario)
    document = load_run(run_dir).document
    assert document.exit_code == 4
    assert any("server stalled: no chunk arrived on any of 32 streams" in reason
               for reason in document.invalid_reasons), document.invalid_reasons
    healthy = write_run_folder(tmp_path / "healthy", closed_loop(32, 20.0), scenario)
    assert not any("stalled" in r for r in load_run(healthy).document.invalid_reasons)
