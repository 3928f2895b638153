"""A killed server is named as such, not also as a client limit (issue 25): while the server
is unreachable the closed-loop users back off, so they are busy a small share of the window;
that is the server's absence (its own invalid reason), and the client-limited reason's remedy,
more Locust workers, would be wrong. The loop-lag criterion, the client's own, still holds."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from tests.support import synthetic as synthesis
from tests.unit.test_client_health import records_over
from vllm_slo.analysis.client_health import client_health
from vllm_slo.reports.run_report import render_run
from vllm_slo.run_folder.samples_format import SAMPLES_DIR

T0 = 1_800_000_000.0
USERS = 4


def killed_server_rows(served_cycles: int = 20, refused_cycles: int = 8) -> pa.Table:
    """4 closed-loop users on 1 s cycles (0.8 s request, 0.2 s think, 2 ms re-send gap), then
    the server gone: each request refused at once (no HTTP status) and the user backing off
    2 s before the next."""
    rows = []
    send = {user: T0 + 0.01 * user for user in range(USERS)}
    for k in range(served_cycles + refused_cycles):
        served = k < served_cycles
        for user in range(USERS):
            rows.append({
                "request_id": f"{user}-{k}", "process_id": 7, "user_id": user,
                "phase": "warmup" if k < 2 else "measure", "endpoint": "chat",
                "intended_send_unix_s": send[user], "send_unix_s": send[user],
                "send_lag_s": 0.0, "ttft_s": 0.1 if served else None,
                "e2e_s": 0.8 if served else 0.001,
                "chunk_offsets_s": [0.1, 0.4, 0.8] if served else [],
                "output_tokens": 3 if served else None, "status_code": 200 if served else 0,
                "ok": served, "error": None if served else "transport error: connection refused"})
            send[user] += 1.002 if served else 2.001
    columns = {name: [row[name] for row in rows] for name in rows[0]}
    return synthesis.complete_columns(
        {name: pa.array(values, type=synthesis.SAMPLE_SCHEMA.field(name).type)
         for name, values in columns.items()}, len(rows))


QUIET = [1e-4] * 199 + [0.002]


def test_a_killed_server_is_not_a_client_limit() -> None:
    table = killed_server_rows()
    records = records_over(table, QUIET)
    judged = {gone: client_health(table, records, closed_loop=True, target_users=USERS,
                                  think_time_s=0.2, max_loop_lag_p99_s=0.02,
                                  min_held_concurrency=0.98, server_gone=gone)
              for gone in (False, True)}
    # the users' back-off makes a low busy share: without knowing the server went, the
    # criterion would blame the client and say "use more traffic.workers"
    share = judged[False].concurrency.busy_share
    assert share is not None and share < 0.9
    assert judged[False].reasons and "traffic.workers" in judged[False].reasons[0]
    assert judged[True].reasons == () and judged[True].concurrency.busy_share == share
    # the client's own criterion still holds when the server went
    lagging = records_over(table, [1e-4] * 190 + [0.05] * 10)
    lagged = client_health(table, lagging, closed_loop=True, target_users=USERS,
                           think_time_s=0.2, max_loop_lag_p99_s=0.02,
                           min_held_concurrency=0.98, server_gone=True)
    assert len(lagged.reasons) == 1 and "event-loop lag p99" in lagged.reasons[0]


def test_the_run_report_names_the_outage_and_no_client_limit(tmp_path: Path) -> None:
    table = killed_server_rows()
    scenario = synthesis.scenario_document("killed", duration_s=40.0, warmup_s=2.0,
                                           slo={"error_rate": "< 50%"})
    scenario["traffic"]["arrival"] = {"kind": "closed", "users": USERS, "spawn_rate": 4.0,
                                      "think_time": 0.2}
    run_dir = synthesis.write_run_folder(tmp_path / "run", table, scenario, via_writer=False)
    (run_dir / SAMPLES_DIR / "client-synthetic-7.jsonl").write_text(
        "".join(json.dumps(record) + "\n" for record in records_over(table, QUIET)))
    summary = render_run(run_dir).summary
    assert summary["exit_code"] == 4
    reasons = summary["invalid_reasons"]
    assert any(reason.startswith("server unreachable from ") for reason in reasons), reasons
    assert not any("client-limited" in reason for reason in reasons), reasons
    assert summary["client_health"]["healthy"] is True
