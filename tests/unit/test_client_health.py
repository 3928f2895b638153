"""The load generator's self-judgement (vllm_slo/analysis/client_health.py) and the monitor's
pure parts (vllm_slo/loadtests/client_monitor.py): time-weighted concurrency from known intervals,
re-send gaps, pooled loop lag, and the criterion firing exactly when it should; a monitored run
folder renders the numbers into summary.json (valid against its schema), the text, Markdown
and the HTML health panel, which turns red with the reason when the criterion fires."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pyarrow as pa
import pytest

from tests.support import synthetic as synthesis
from vllm_slo.analysis import client_health as health_module
from vllm_slo.analysis.client_health import (
    achieved_concurrency,
    client_health,
    lag_bucket_upper_s,
    pooled_loop_lag,
    time_weighted_count,
)
from vllm_slo.loadtests.client_monitor import (
    LAG_BUCKET_FLOOR_S,
    LAG_BUCKETS_PER_OCTAVE,
    GcPauses,
    InFlightGauge,
    lag_bucket,
    lag_summary,
)
from vllm_slo.reports.run_report import render_run
from vllm_slo.run_folder.samples_format import SAMPLES_DIR

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "reports" / "schema" /
                     "summary.schema.json").read_text())
T0 = 1_800_000_000.0


def test_time_weighted_count_of_known_intervals() -> None:
    # window [0, 10]: [0,10] + [2,4] + [3,8] -> counts 1 (0-2), 2 (2-3), 3 (3-4), 2 (4-8), 1
    # (8-10); [-5, 1] adds 1 over 0-1 (clipped), [11, 12] lies outside, [5, 5] is empty
    starts = np.array([0.0, 2.0, 3.0, -5.0, 11.0, 5.0])
    ends = np.array([10.0, 4.0, 8.0, 1.0, 12.0, 5.0])
    counted = time_weighted_count(starts, ends, 0.0, 10.0)
    assert counted is not None
    assert counted.mean == pytest.approx((10 + 2 + 5 + 1) / 10)
    assert (counted.min, counted.max) == (1, 3)
    # a gap in the middle: nothing in flight over [4, 6]
    gap = time_weighted_count(np.array([0.0, 6.0]), np.array([4.0, 10.0]), 0.0, 10.0)
    assert gap is not None and gap.mean == pytest.approx(0.8) and (gap.min, gap.max) == (0, 1)
    assert time_weighted_count(starts, ends, 3.0, 3.0) is None  # empty window


def closed_loop_rows(*, users: int, cycles: int, e2e_s: float, think_s: float, gap_s: float,
                     warmup_cycles: int = 2, failed_every: int = 0) -> pa.Table:
    """Closed-loop rows with exactly known timing: every user sends at the same instants, each
    request takes e2e_s, then the user thinks think_s and re-sends gap_s late."""
    cycle = e2e_s + think_s + gap_s
    rows = []
    for k in range(cycles):
        send = T0 + k * cycle
        for user in range(users):
            ok = not (failed_every and (k * users + user) % failed_every == 0)
            rows.append({
                "request_id": f"{user}-{k}", "process_id": 7, "user_id": user,
                "phase": "warmup" if k < warmup_cycles else "measure", "endpoint": "chat",
                "intended_send_unix_s": send, "send_unix_s": send, "send_lag_s": 0.0,
                "ttft_s": 0.1 if ok else None, "e2e_s": e2e_s,
                "chunk_offsets_s": [0.1, 0.2, 0.3] if ok else [],
                "output_tokens": 3 if ok else None, "status_code": 200 if ok else 503,
                "ok": ok, "error": None if ok else "HTTP 503: busy"})
    columns = {name: [row.get(name) for row in rows] for name in rows[0]}
    return synthesis.complete_columns(
        {name: pa.array(values, type=synthesis.SAMPLE_SCHEMA.field(name).type)
         for name, values in columns.items()}, len(rows))


def test_achieved_concurrency_and_resend_gaps_of_known_rows() -> None:
    e2e, think, gap = 0.77, 0.2, 0.03  # one cycle a second
    table = closed_loop_rows(users=4, cycles=12, e2e_s=e2e, think_s=think, gap_s=gap,
                             failed_every=5)  # failed requests hold their slot too
    result = achieved_concurrency(table, 4, think, closed_loop=True)
    assert result is not None
    # measured sends at cycles 2..11; the run's last second (the stop's) is not judged
    assert result.window_start_unix_s == pytest.approx(T0 + 2.0)
    assert result.window_s == pytest.approx(8.0)
    assert result.in_flight.mean == pytest.approx(4 * e2e)
    assert (result.in_flight.min, result.in_flight.max) == (0, 4)
    assert result.busy is not None
    assert result.busy_share == pytest.approx(e2e + think)
    assert (result.busy.min, result.busy.max) == (0, 4)
    assert result.resend_gaps == 4 * 9  # each send of cycles 2..10 follows one
    assert result.resend_gap_p50_s == pytest.approx(gap, abs=1e-6)
    assert result.resend_gap_p99_s == pytest.approx(gap, abs=1e-6)
    # open loop: no users target, no busy time, no gaps
    open_loop = achieved_concurrency(table, None, 0.0, closed_loop=False)
    assert open_loop is not None and open_loop.busy is None and open_loop.busy_share is None
    assert open_loop.in_flight.mean == pytest.approx(result.in_flight.mean)


def test_a_honoured_retry_after_is_deliberate_idleness() -> None:
    """Every 5th request is answered 503 with Retry-After: 0.5 s and its user re-sends 0.5 s
    later: honoured, those waits are chosen (busy share 1, re-send gaps 0); ignored by the
    users' policy, the same rows show idle users (busy share < 1)."""
    e2e, think, wait = 0.3, 0.2, 0.5
    table = closed_loop_rows(users=4, cycles=40, e2e_s=e2e, think_s=think, gap_s=0.0,
                             failed_every=5)
    failed = ~np.asarray(table.column("ok"))
    sends = np.asarray(table.column("send_unix_s")).copy()
    users = np.asarray(table.column("user_id"))
    for user in range(4):  # after each failed request, the user's later sends move by 0.5 s
        mine = np.flatnonzero(users == user)
        shifts = np.cumsum(np.r_[0, failed[mine][:-1]]) * wait
        sends[mine] += shifts
    asked = np.where(failed, wait, np.nan)
    shifted = (table.set_column(table.schema.get_field_index("send_unix_s"), "send_unix_s",
                                pa.array(sends))
               .set_column(table.schema.get_field_index("intended_send_unix_s"),
                           "intended_send_unix_s", pa.array(sends))
               .set_column(table.schema.get_field_index("retry_after_s"), "retry_after_s",
                           pa.array(asked, from_pandas=True)))
    honoured = achieved_concurrency(shifted, 4, think, closed_loop=True, retry_after_max_s=60)
    ignored = achieved_concurrency(shifted, 4, think, closed_loop=True)
    assert honoured is not None and ignored is not None
    assert honoured.busy_share == pytest.approx(1.0)
    assert honoured.resend_gap_p99_s == pytest.approx(0.0, abs=1e-6)
    assert ignored.busy_share < 0.95
    assert ignored.resend_gap_p99_s == pytest.approx(wait, abs=1e-6)
    capped = achieved_concurrency(shifted, 4, think, closed_loop=True, retry_after_max_s=0.1)
    assert capped is not None and capped.resend_gap_p99_s == pytest.approx(wait - 0.1, abs=1e-6)


def test_a_ramp_into_the_measured_window_is_not_judged() -> None:
    """Warm-up shorter than the ramp: user 3 starts 2 s into the measured window. Judged from
    its first send on, the users are busy all the time (no gaps); judged from the window's
    start they would not be (3 of 4 users for 2 s)."""
    e2e, think = 0.5, 0.2
    table = closed_loop_rows(users=4, cycles=20, e2e_s=e2e, think_s=think, gap_s=0.0)
    late_user = np.asarray(table.column("user_id")) == 3
    sends = np.asarray(table.column("send_unix_s"))
    first_measured = sends[np.asarray(table.column("phase")) == "measure"].min()
    keep = ~late_user | (sends >= first_measured + 2.0)
    ramped = table.filter(pa.array(keep))
    result = achieved_concurrency(ramped, 4, think, closed_loop=True)
    assert result is not None
    late_start = sends[late_user & keep].min()
    assert result.window_start_unix_s == pytest.approx(late_start)
    assert result.ramp_in_window_s == pytest.approx(late_start - first_measured)
    assert result.busy_share == pytest.approx(1.0)
    verdict = client_health(ramped, records_over(ramped, [1e-4] * 200), closed_loop=True,
                            target_users=4, think_time_s=think, max_loop_lag_p99_s=0.02,
                            min_held_concurrency=0.98)
    assert verdict.healthy


def lag_record(unix_s: float, lags_s: list[float], cpu: float = 0.3) -> dict:
    return {"unix_s": unix_s, "process_id": 7, "interval_s": 1.0, "cpu_fraction": cpu,
            **lag_summary(lags_s), "socket_reads": 100, "sse_events": 103,
            "in_flight_mean": 3.0, "in_flight_min": 0, "in_flight_max": 4,
            "gc_pauses": 2, "gc_pause_total_s": 0.003, "gc_pause_max_s": 0.002}


def test_gc_pauses_are_timed_from_the_collectors_callbacks() -> None:
    """Each start/stop pair is one pause (fake clock: 1.5 ms and 4 ms); the period's fields
    reset on take; a real collection reaches the callback."""
    import gc

    ticks = iter([10.0, 10.0015, 20.0, 20.004])
    pauses = GcPauses(clock=lambda: next(ticks))
    for _ in range(2):
        pauses.callback("start", {"generation": 2})
        pauses.callback("stop", {"generation": 2})
    assert pauses.take() == {"gc_pauses": 2, "gc_pause_total_s": pytest.approx(0.0055),
                             "gc_pause_max_s": pytest.approx(0.004)}
    assert pauses.take() == {"gc_pauses": 0, "gc_pause_total_s": 0.0, "gc_pause_max_s": 0.0}
    real = GcPauses()
    gc.callbacks.append(real.callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(real.callback)
    fields = real.take()
    assert fields["gc_pauses"] >= 1 and fields["gc_pause_max_s"] > 0


def test_the_monitor_writes_the_buckets_the_analysis_reads() -> None:
    assert (LAG_BUCKETS_PER_OCTAVE, LAG_BUCKET_FLOOR_S) == (
        health_module.LAG_BUCKETS_PER_OCTAVE, health_module.LAG_BUCKET_FLOOR_S)
    for lag in (2e-6, 1.5e-4, 0.003, 0.0199, 0.25):
        upper = lag_bucket_upper_s(lag_bucket(lag))
        assert lag < upper <= lag * 2 ** (1 / LAG_BUCKETS_PER_OCTAVE) * (1 + 1e-9)


def test_pooled_loop_lag_percentiles_from_histograms() -> None:
    # 2 seconds of 200 samples: 396 at 0.1 ms, 4 at 30 ms -> p50 ~0.1 ms, p99 ~0.1 ms;
    # with 8 at 30 ms of 400 (2%) the p99 is 30 ms (within the bucket's upper edge)
    quiet = [1e-4] * 198 + [0.03] * 2
    pooled = pooled_loop_lag([lag_record(T0 + 1, quiet), lag_record(T0 + 2, quiet)])
    assert pooled is not None and pooled.samples == 400
    assert 1e-4 < pooled.p50_s < 1.2e-4 and 1e-4 < pooled.p99_s < 1.2e-4
    assert pooled.max_s == pytest.approx(0.03)
    noisy = [1e-4] * 196 + [0.03] * 4
    pooled = pooled_loop_lag([lag_record(T0 + 1, noisy), lag_record(T0 + 2, noisy)])
    assert pooled is not None and 0.03 < pooled.p99_s < 0.036
    assert pooled_loop_lag([{"unix_s": T0, "cpu_fraction": 0.2}]) is None  # before the monitor


def test_in_flight_gauge_integrates_over_time() -> None:
    now = [0.0]
    gauge = InFlightGauge(clock=lambda: now[0])
    gauge.enter()            # 1 from 0.0
    now[0] = 0.25
    gauge.enter()            # 2 from 0.25
    now[0] = 0.5
    gauge.leave()
    gauge.leave()            # 0 from 0.5
    now[0] = 1.0
    mean, low, high = gauge.take()
    assert mean == pytest.approx((0.25 * 1 + 0.25 * 2) / 1.0)
    assert (low, high) == (0, 2)
    now[0] = 2.0
    assert gauge.take() == (0.0, 0, 0)


def judged(table: pa.Table, records: list[dict], **bounds) -> health_module.ClientHealth:
    return client_health(table, records, closed_loop=True, target_users=4, think_time_s=0.2,
                         max_loop_lag_p99_s=bounds.get("lag", 0.02),
                         min_held_concurrency=bounds.get("held", 0.98))


def records_over(table: pa.Table, lags_s: list[float]) -> list[dict]:
    sends = np.asarray(table.column("send_unix_s"))
    return [lag_record(t, lags_s) for t in np.arange(sends.min() + 1, sends.max() + 1, 1.0)]


def test_the_criterion_fires_on_real_resend_gaps_and_not_below_them() -> None:
    quiet = [1e-4] * 199 + [0.002]
    # 30 ms re-send gaps on 1 s cycles: users busy 97.0% of the time -> limited
    slow = closed_loop_rows(users=4, cycles=40, e2e_s=0.77, think_s=0.2, gap_s=0.03)
    verdict = judged(slow, records_over(slow, quiet))
    assert verdict.monitored and not verdict.healthy and len(verdict.reasons) == 1
    reason = verdict.reasons[0]
    assert "97.0%" in reason and "98%" in reason and "traffic.workers" in reason
    assert "p50 30.0 ms" in reason
    # 15 ms gaps: 98.5% busy -> healthy
    fast = closed_loop_rows(users=4, cycles=40, e2e_s=0.785, think_s=0.2, gap_s=0.015)
    assert judged(fast, records_over(fast, quiet)).healthy
    # the same slow rows without monitor records (an import): reported, never judged
    unjudged = judged(slow, [])
    assert unjudged.healthy and not unjudged.monitored
    assert unjudged.concurrency is not None and unjudged.concurrency.busy_share < 0.975


def test_the_criterion_fires_on_loop_lag_above_its_bound() -> None:
    fast = closed_loop_rows(users=4, cycles=40, e2e_s=0.5, think_s=0.2, gap_s=0.002)
    lagging = [1e-4] * 190 + [0.05] * 10  # 5% of samples 50 ms late
    verdict = judged(fast, records_over(fast, lagging))
    assert len(verdict.reasons) == 1 and "event-loop lag p99" in verdict.reasons[0]
    assert "traffic.max_loop_lag_p99 20.0 ms" in verdict.reasons[0]
    # its process used 30% of a core: it was descheduled, not busy with its own work
    assert "descheduled" in verdict.reasons[0]
    busy_records = [{**r, "cpu_fraction": 0.95} for r in records_over(fast, lagging)]
    saturated = judged(fast, busy_records).reasons[0]
    assert "was the bottleneck; use more traffic.workers" in saturated
    assert judged(fast, records_over(fast, lagging), lag=0.1).healthy
    # records outside the judged window (warm-up stalls) do not count
    sends = np.asarray(fast.column("send_unix_s"))
    early = [lag_record(float(sends.min()) - 0.5, [0.5] * 200)]
    assert judged(fast, early + records_over(fast, [1e-4] * 200)).healthy


def write_monitored_run(tmp_path: Path, gap_s: float) -> Path:
    """40 one-second cycles of 4 users, re-sending gap_s late."""
    table = closed_loop_rows(users=4, cycles=40, e2e_s=0.8 - gap_s, think_s=0.2, gap_s=gap_s)
    scenario = synthesis.scenario_document("monitored", duration_s=38.0, warmup_s=2.0,
                                           slo={"error_rate": "< 50%"})
    scenario["traffic"]["arrival"] = {"kind": "closed", "users": 4, "spawn_rate": 4.0,
                                      "think_time": 0.2}
    run_dir = synthesis.write_run_folder(tmp_path / f"run-{gap_s}", table, scenario)
    records = records_over(table, [1e-4] * 199 + [0.002])
    (run_dir / SAMPLES_DIR / "client-synthetic-7.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records) + '{"unix_s": 1, "cpu_fr')  # torn line
    return run_dir


def test_a_monitored_run_renders_its_health_and_turns_red_when_limited(tmp_path: Path) -> None:
    healthy = render_run(write_monitored_run(tmp_path, gap_s=0.002))
    jsonschema.Draft202012Validator(SCHEMA).validate(healthy.summary)
    section = healthy.summary["client_health"]
    assert section["healthy"] and section["criterion"]["monitored"]
    assert section["workers"][0]["process_id"] == 7 and section["loop_lag"]["samples"] > 0
    assert section["concurrency"]["busy_share"] == pytest.approx(0.998)
    assert healthy.summary["exit_code"] == 0
    assert "client: busy 99.8% of 4 users" in healthy.text
    page = healthy.report_path.read_text()
    assert '<section id="health" class="healthy">' in page and '<dl id="client">' in page
    worker_gc = section["workers"][0]["gc"]
    seconds = section["workers"][0]["seconds"]
    assert worker_gc == {"pauses": 2 * seconds, "total_s": pytest.approx(0.003 * seconds),
                         "max_s": 0.002}
    assert "GC pause max 2.0ms" in healthy.text
    assert f"GC pauses {2 * seconds}, longest 2.0ms" in page

    limited = render_run(write_monitored_run(tmp_path, gap_s=0.03))
    jsonschema.Draft202012Validator(SCHEMA).validate(limited.summary)
    assert limited.summary["exit_code"] == 4
    reasons = limited.summary["client_health"]["reasons"]
    assert reasons and reasons[0] in limited.summary["invalid_reasons"]
    assert "client (LIMITED): busy 97.0%" in limited.text
    assert "INVALID      client-limited: users were busy" in limited.text
    assert "measurement invalid:** client-limited" in limited.markdown_path.read_text()
    page = limited.report_path.read_text()
    assert '<section id="health" class="client-limited">' in page
    assert '<p class="limited-reason">client-limited: users were busy' in page
    broken = json.loads(json.dumps(limited.summary))
    broken["client_health"]["concurrency"]["busy_share"] = "low"
    assert not jsonschema.Draft202012Validator(SCHEMA).is_valid(broken)
