"""Rows are sacred, end to end (issue 40, items 1 and 5): the stand-in spoils one value of one
reply in five (`--fault bad_value --fault-rate 0.2`: `finish_reason: 7`,
`completion_tokens: "16"`, `2^40`, `NaN`, `-5`, a per-chunk count that falls,
`"usage": [1, 2]`, `"delta": "hello"`, in turn). Every request the stand-in served is one row
on disk (rows = served), each spoiled one a `bad_response` row naming the field, every other
one `ok`; no traceback in locust.log, and the verdict is the error-rate SLO's, not "no
successful request"."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import HEALTH_BOUNDS_OFF, run_cli, standin_server
from vllm_slo.servers.standin.cli import read_record_log
from vllm_slo.servers.standin.faults import BAD_VALUES

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_one_reply_in_five_malformed_loses_no_row(tmp_path: Path, endpoint: str) -> None:
    record = tmp_path / "served.jsonl"
    with standin_server("--ttft", "0.01", "--itl", "0.002", "--default-max-tokens", "8",
                        "--fault", "bad_value", "--fault-rate", "0.2", "--seed", "5",
                        "--record", str(record)) as url:
        result = run_cli(["run", "scenario=chat", f"server.url={url}",
                          f"traffic.endpoint={endpoint}",
                          "traffic.chat.output_tokens=8", "traffic.chat.turns=1",
                          "traffic.prefix_cache=keep", "traffic.chat.system_prompt_tokens=20",
                          "traffic.duration=4s", "traffic.warmup=0s",
                          "traffic.arrival={kind: closed, users: 6, spawn_rate: 6, "
                          "think_time: 0s}", "slo={error_rate: \"< 1%\"}", *HEALTH_BOUNDS_OFF],
                         tmp_path)
    assert result.returncode == 1, result.output  # the error-rate SLO fails; nothing else
    table = pq.read_table(result.run_dir / "samples.parquet").to_pydict()
    rows = dict(zip(table["request_id"], zip(table["status"], table["error"], strict=True),
                    strict=True))
    assert len(rows) == len(table["request_id"])  # one row per request id
    served = {rid: entry["fault"] for rid, entry in read_record_log(record).items()}
    ours = {rid: fault for rid, fault in served.items() if rid in rows}
    assert len(ours) == len(rows) > 100  # every row was served, once
    assert len(served) - len(ours) <= 2  # the readiness check's own completion(s)
    spoiled = [rid for rid, fault in ours.items() if fault == "bad_value"]
    assert len(spoiled) >= 2 * len(BAD_VALUES), Counter(ours.values())  # every spoil, twice
    wrong = Counter((fault, rows[rid][0]) for rid, fault in ours.items()
                    if rows[rid][0] != ("bad_response" if fault else "ok")
                    and rows[rid][0] != "cancelled")
    assert not wrong, wrong
    errors = {rows[rid][1] for rid in spoiled if rows[rid][0] == "bad_response"}
    assert any('completion_tokens is "8", not an integer' in e for e in errors), errors
    assert any("completion_tokens fell from 4 to 0" in e for e in errors), errors
    assert any("usage is [1, 2], not an object" in e for e in errors), errors
    summary = json.loads((result.run_dir / "summary.json").read_text())
    measured = {rid for rid, phase in zip(table["request_id"], table["phase"], strict=True)
                if phase == "measure"}  # the summary counts the measure phase's rows only
    assert summary["requests"]["errors_by_kind"].get("bad_response", 0) == sum(
        1 for rid in spoiled if rows[rid][0] == "bad_response" and rid in measured)
    log = (result.run_dir / "locust.log").read_text()
    assert "Traceback" not in log and "samples writer" not in log
