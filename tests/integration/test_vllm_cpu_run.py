"""The main job's path, end to end, against real vLLM (CPU build) and real Locust: the run
folder, the samples, the summary and the report agree with each other and with the server."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import (
    processes_in_group,
    requires_vllm,
    run_cli,
)
from vllm_slo.transport.processes import process_group_alive

pytestmark = [pytest.mark.integration, requires_vllm]

MAX_TOKENS = 16
RUN_ARGS = ["run", "scenario=chat", "traffic.duration=15s", "traffic.warmup=3s",
            "traffic.arrival.users=4", f"traffic.chat.output_tokens={MAX_TOKENS}",
            "traffic.chat.turns=2", "slo.ttft=[\"p50 < 30s\"]", "slo.e2e=[\"p50 < 1ms\"]"]


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory: pytest.TempPathFactory):
    runs = tmp_path_factory.mktemp("runs")
    return run_cli(RUN_ARGS, runs)


def test_run_folder_is_complete(chat_run) -> None:
    run_dir = chat_run.run_dir
    assert run_dir is not None, chat_run.output
    assert run_dir.name.endswith("-chat")
    for name in ("scenario.yaml", "provenance.json", "server.log", "locust.log",
                 "samples.parquet", "summary.json", "report.html", "server_metrics.jsonl"):
        assert (run_dir / name).is_file(), f"{name} missing; output:\n{chat_run.output}"
    assert list((run_dir / "samples").glob("samples-*.arrows"))
    assert "Application startup complete" in (run_dir / "server.log").read_text()


def test_exit_code_is_the_failed_slo(chat_run) -> None:
    # e2e p50 < 1 ms cannot hold for a real server: a decided FAIL -> exit code 1
    summary = chat_run.json("summary.json")
    verdicts = {s["metric"]: s["verdict"] for s in summary["slos"]}
    assert verdicts["e2e"] == "FAIL", summary["slos"]
    assert verdicts["ttft"] == "PASS", summary["slos"]
    assert chat_run.returncode == 1, chat_run.output
    assert "report: " in chat_run.output and "FAIL" in chat_run.output


def test_samples_are_real_streamed_requests(chat_run) -> None:
    table = pq.read_table(chat_run.run_dir / "samples.parquet").to_pydict()
    n = len(table["request_id"])
    assert n > 20
    assert all(table["ok"]), {e for e in table["error"] if e}
    assert set(table["phase"]) <= {"warmup", "measure", "cooldown"}
    assert "warmup" in table["phase"] and "measure" in table["phase"]
    assert set(table["output_tokens"]) == {MAX_TOKENS}  # ignore_eos: exact lengths, from usage
    assert all(p > 100 for p in table["prompt_tokens"])  # the shared system prompt
    for ttft, e2e, offsets in zip(table["ttft_s"], table["e2e_s"], table["chunk_offsets_s"],
                                  strict=True):
        assert 0 < ttft <= e2e
        assert offsets[0] == float(np.float32(ttft))  # offsets are stored as float32
        assert offsets == sorted(offsets)
        assert 1 <= len(offsets) <= MAX_TOKENS
    sends = np.asarray(table["intended_send_unix_s"])
    assert np.all(np.diff(sends) >= 0), "consolidated samples are time-ordered"


def test_summary_matches_samples(chat_run) -> None:
    summary = chat_run.json("summary.json")
    table = pq.read_table(chat_run.run_dir / "samples.parquet").to_pydict()
    measured = [i for i, p in enumerate(table["phase"]) if p == "measure"]
    assert summary["requests"]["measured"] == len(measured)
    assert summary["requests"]["failed"] == 0
    ttft = summary["metrics"]["ttft"]
    assert ttft["count"] == len(measured)
    expected_p50 = float(np.quantile([table["ttft_s"][i] for i in measured], 0.5))
    assert ttft["percentiles"]["p50"]["value"] == pytest.approx(expected_p50)
    gaps = sum(len(table["chunk_offsets_s"][i]) - 1 for i in measured)
    assert summary["metrics"]["itl"]["count"] == gaps
    assert summary["throughput"]["output_tokens_per_s"]["value"] > 0
    assert summary["schema_version"] == 1
    assert summary["scenario"]["traffic"]["duration"] == 15.0


def test_provenance_names_the_real_server(chat_run) -> None:
    provenance = chat_run.json("provenance.json")
    assert provenance["vllm_version"].startswith("0.")
    assert provenance["platform"] == "cpu"
    assert provenance["model_id"] == "tiny"
    launch = provenance["launch"]
    assert "--enforce-eager" in launch["argv"]
    assert launch["platform_defaults"]["kv-cache-memory-bytes"] == "1G"
    assert provenance["server_instance"]["kind"] == "launched"
    assert provenance["server_instance"]["pid"] == provenance["server_pid"]
    # the hit rate comes from the /metrics counters recorded in server_metrics.jsonl; the chat
    # profile's conversations share one system prompt, so the cache must have hit
    hit_rate = chat_run.json("summary.json")["traffic"]["prefix_cache_hit_rate"]
    assert hit_rate is not None and 0.0 < hit_rate <= 1.0


def test_no_server_process_survives(chat_run) -> None:
    pgid = chat_run.json("provenance.json")["server_pid"]
    deadline = time.monotonic() + 10
    while process_group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not process_group_alive(pgid), processes_in_group(pgid)


def test_report_rerenders_from_the_folder_alone(chat_run, tmp_path: Path) -> None:
    summary_before = chat_run.json("summary.json")
    (chat_run.run_dir / "report.html").unlink()
    rerun = run_cli(["report", str(chat_run.run_dir)], tmp_path)
    assert rerun.returncode == 1, rerun.output
    assert (chat_run.run_dir / "report.html").stat().st_size > 100_000
    assert chat_run.json("summary.json")["metrics"] == summary_before["metrics"]


def test_server_facts_are_the_servers_own(chat_run) -> None:
    """server_facts.json: what vLLM said of itself at start-up (log) and in /metrics
    (cache_config_info), consistent with the scenario's args and with each other."""
    facts = chat_run.json("server_facts.json")
    assert facts["block_size"] == 128  # scenarios/chat.yaml
    assert facts["max_seq_len"] == 2048
    assert facts["enable_chunked_prefill"] is True and facts["enforce_eager"] is True
    assert facts["kv_cache_device"] == "CPU" and facts["kv_cache_tokens"] > 0
    assert facts["kv_cache_blocks"] * facts["block_size"] == facts["kv_cache_tokens"]
    # 1 GiB of KV cache (the CPU default the suite adds) over 2,048-token requests
    assert facts["max_concurrency"] == pytest.approx(facts["kv_cache_tokens"] / 2048)
    assert facts["non_default_args"]["max_num_batched_tokens"] == 2048
    assert facts["max_num_batched_tokens"] == 2048  # the step budget the server runs with
    assert "server facts: CPU KV cache" in chat_run.output


def test_vllms_own_latency_agrees_with_the_clients(chat_run) -> None:
    """The /metrics histograms' increments over the run are the requests the client sent (the
    recorder scrapes before the first and after the last), and vLLM's TTFT / per-token ITL
    means agree with the rows' within the cross-check's bounds (no flag)."""
    check = chat_run.json("summary.json")["server_crosscheck"]
    assert check is not None, "vLLM CPU exports the TTFT histogram"
    ttfts = pq.read_table(chat_run.run_dir / "samples.parquet", columns=["ttft_s"])
    started = ttfts.num_rows - ttfts.column("ttft_s").null_count
    assert check["client_requests"] == started
    assert abs(check["server_requests"] - started) <= 2  # in flight at a boundary scrape
    assert check["compared"] and check["flags"] == [], check
    # the client's TTFT includes the HTTP path around vLLM's own: never below it
    assert check["ttft_excess_s"] > -0.005
    assert check["itl_ratio"] == pytest.approx(1.0, abs=0.10)
    assert "vLLM's own latency" in (chat_run.run_dir / "report.html").read_text()
