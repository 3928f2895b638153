"""`traffic.profile: trace` end to end against the known-timing stand-in, with its send log
(`--record`): a Mooncake-format trace written here, replayed at speedup 2, arrives at the
stand-in at the trace's times; requests whose hash ids agree on their leading blocks carry
byte-identical prompt text for exactly those blocks and differ right after; the stand-in counts
the trace's input lengths and sends its output lengths; the report sets the trace next to what
was sent (the stand-in has no prefix cache: the reuse check is unverified, and says so)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import HEALTH_BOUNDS_OFF, run_cli, standin_server
from vllm_slo.analysis.trace_fidelity import UNVERIFIED_NAME
from vllm_slo.servers.standin.cli import read_record_log

# `timing`: the client's intended times are the trace's (exactly) and its sends on time
# (median send lag < 10 ms); the stand-in's receipts follow them, late by the send lag the
# client recorded plus at most SEND_TOLERANCE_S for 90% of requests (tox -e ci runs these
# serially). Measured on the 2-core box shared with other test runs: all but one within 7 ms
# (the run's first request 40 ms: its slot opens its connection after the send time is
# taken); in a busier run, 90% within 16 ms and one at 150 ms
pytestmark = [pytest.mark.integration, pytest.mark.timing]

BLOCK = 32  # tokens per hash id: small prompts, same structure as Mooncake's 512
SPEEDUP = 2.0
SEND_TOLERANCE_S = 0.05


def write_trace(path: Path) -> list[dict]:
    """40 records over ~14 s of trace time (7 s replayed): bursts of equal timestamps, three
    shared 'system prompts' (one block), two shared documents (two blocks), own blocks, and
    partial last blocks."""
    rng = np.random.default_rng(42)
    rows, t_ms, next_id = [], 0.0, 100
    systems, documents = [1, 2, 3], [[10, 11], [20, 21]]
    for i in range(40):
        t_ms += 0.0 if i % 7 == 3 else float(rng.exponential(400.0))
        shared = [systems[i % 3]] + (documents[i % 2] if i % 4 == 0 else [])
        own = int(rng.integers(5, 70))
        own_blocks = list(range(next_id, next_id + -(-own // BLOCK)))
        next_id += len(own_blocks)
        rows.append({"timestamp": round(t_ms), "input_length": len(shared) * BLOCK + own,
                     "output_length": int(rng.integers(2, 9)), "hash_ids": shared + own_blocks})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return rows


def test_trace_times_and_shared_blocks_reach_the_server(tmp_path: Path) -> None:
    rows = write_trace(tmp_path / "trace.jsonl")
    record = tmp_path / "served.jsonl"
    with standin_server("--ttft", "0.01", "--itl", "0.002", "--record", str(record)) as url:
        result = run_cli(["run", "scenario=trace-replay", f"server.url={url}",
                          f"traffic.trace.path={tmp_path / 'trace.jsonl'}",
                          f"traffic.trace.block_tokens={BLOCK}",
                          f"traffic.trace.speedup={SPEEDUP:g}", "traffic.warmup=1s",
                          "traffic.duration=6s", "traffic.prefix_cache=keep",
                          "slo={e2e: [\"p50 < 10s\"]}", *HEALTH_BOUNDS_OFF], tmp_path)
    assert result.returncode == 0, result.output
    plan = pq.read_table(result.run_dir / "requests.parquet").to_pydict()
    table = pq.read_table(result.run_dir / "samples.parquet").to_pydict()
    assert len(plan["index"]) == len(rows) == len(table["request_id"])
    offsets = [(row["timestamp"] - rows[0]["timestamp"]) / 1000.0 / SPEEDUP for row in rows]
    assert plan["arrival_s"] == pytest.approx(offsets)

    # the server saw each request at its trace time (its own monotonic clock), late by no
    # more than the send lag the client recorded for it
    served = read_record_log(record)
    unexplained = []
    for request_id, index, lag in zip(table["request_id"], table["plan_index"],
                                      table["send_lag_s"], strict=True):
        entry = served[request_id]
        unexplained.append(entry["receipt_s"] - offsets[index] - lag)
        content = plan["messages"][index][0]["content"]
        assert entry["prompt_tokens"] == rows[index]["input_length"] == len(content.split())
        assert entry["completion_tokens"] == rows[index]["output_length"]
    spread = np.abs(np.asarray(unexplained) - np.median(unexplained))  # clocks' origins differ
    assert np.median(spread) < 0.01 and np.percentile(spread, 90) < SEND_TOLERANCE_S, spread
    lags = np.asarray(table["send_lag_s"])
    assert np.median(lags) < 0.01, lags
    intended = {index: at for index, at in zip(table["plan_index"],
                                                table["intended_send_unix_s"], strict=True)}
    assert [intended[i] - intended[0] for i in range(len(rows))] == pytest.approx(
        offsets, abs=1e-6)

    # shared leading hash ids: byte-identical text for exactly those blocks, then different
    pieces = [re.findall(r" [^ ]+", plan["messages"][i][0]["content"]) for i in range(len(rows))]
    assert all("".join(p) == plan["messages"][i][0]["content"] for i, p in enumerate(pieces))
    pairs = 0
    for i in range(len(rows)):
        for j in range(i):
            a, b = rows[i]["hash_ids"], rows[j]["hash_ids"]
            k = next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
                     min(len(a), len(b)))
            shared = min(k * BLOCK, len(pieces[i]), len(pieces[j]))
            assert "".join(pieces[i][:shared]).encode() == "".join(pieces[j][:shared]).encode()
            if k < min(len(a), len(b)):  # the next block differs (within its first 8 words)
                assert pieces[i][shared:shared + 8] != pieces[j][shared:shared + 8]
                pairs += 1
    assert pairs > 500

    summary = result.json("summary.json")
    fidelity = summary["traffic"]["trace"]
    assert fidelity["format"] == "mooncake" and fidelity["speedup"] == SPEEDUP
    assert fidelity["verdict"] == "unverified"  # the stand-in counts no prefix-cache query
    assert any(w.startswith(UNVERIFIED_NAME) for w in summary["warnings"])
    assert not any(w.startswith("trace:") for w in summary["warnings"])  # replay fills it
    by_name = {row["statistic"]: row for row in fidelity["rows"]}
    measured = sum(1 for phase in table["phase"] if phase == "measure")
    assert by_name["requests"]["trace"] == by_name["requests"]["sent"] == measured
    assert by_name["inter-arrival mean (s)"]["sent"] == pytest.approx(
        by_name["inter-arrival mean (s)"]["trace"], abs=0.02)
    assert by_name["input tokens mean"]["sent"] == pytest.approx(
        by_name["input tokens mean"]["trace"])
    implied = summary["provenance"]["plan"]["trace"]["measured_window"]["implied_hit_rate"]
    assert 0.2 < implied < 0.9 and fidelity["implied_hit_rate"] == implied
    assert "trace: mooncake replay" in result.output
    assert "trace vs sent: inter-arrival mean (s)" in (result.run_dir / "report.html").read_text()
