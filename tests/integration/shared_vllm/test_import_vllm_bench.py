"""`vllm-slo import vllm-bench` end to end: vLLM's own `vllm bench serve` (the CPU build's)
against one real vLLM CPU server with the tiny model (shared with the profile tests:
shared_vllm/conftest.py), twice (two trials; closed loop, 4 in
flight: a setting whose latencies do not trend on a busy two-core box, so SLO verdicts are
decidable), imported through the CLI in a subprocess; then `report`, `compare` (the two live
trials against the two committed real files of tests/unit/data/vllm_bench), `gate` and `plan`
on the imported folders. (Open loop with a slot cap is covered by a committed real file in
tests/unit/test_import_vllm_bench.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import REPO, cli_env, requires_vllm, run_cli
from vllm_slo.reports.trial_folders import collect_trials
from vllm_slo.run_folder.folder_kind import FolderKind, folder_kind
from vllm_slo.servers.tiny_model import ensure_tiny_model
from vllm_slo.servers.vllm_server import VllmServer
from vllm_slo.transport.processes import pin

pytestmark = [pytest.mark.integration, requires_vllm]

COMMITTED = REPO / "tests" / "unit" / "data" / "vllm_bench"
NUM_PROMPTS = 40
BENCH_FLAGS = ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
               "--model", "tiny", "--dataset-name", "random", "--random-input-len", "64",
               "--random-output-len", "16", "--num-prompts", str(NUM_PROMPTS),
               "--max-concurrency", "4", "--ignore-eos", "--seed", "0",
               "--disable-tqdm", "--save-result", "--save-detailed"]
GENEROUS = """\
name: generous
slo:
  ttft: ["p50 < 60s"]
  e2e: ["p50 < 120s"]
  error_rate: "< 50%"
compare: {cells: [ttft.p50, e2e.p50, itl.p50, output_throughput.mean]}
"""
IMPOSSIBLE = """\
name: impossible
slo:
  e2e: ["p50 < 1ms"]
  output_throughput: "> 1000000 tok/s"
"""


def bench_serve(base_url: str, out: Path, client_cores: tuple[int, ...] | None) -> Path:
    """vLLM's own `vllm bench serve` (through the suite's CLI shim for the CPU wheel)."""
    command = [sys.executable, "-m", "vllm_slo.servers.vllm_cli", "bench", "serve",
               "--base-url", base_url, "--tokenizer", str(ensure_tiny_model()), *BENCH_FLAGS,
               "--result-dir", str(out.parent), "--result-filename", out.name]
    env = {**cli_env(), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env) as bench:
        pin(bench.pid, client_cores)  # off the server's cores, as the suite's own Locust runs
        stdout, stderr = bench.communicate(timeout=420)
    assert bench.returncode == 0, stdout[-3000:] + stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def live_files(shared_vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory
               ) -> list[Path]:
    """Two result files from two runs of `vllm bench serve` against one real server."""
    scratch = tmp_path_factory.mktemp("bench")
    client_cores = shared_vllm.plan.core_split.client_cores
    return [bench_serve(shared_vllm.base_url, scratch / f"live-{k}.json", client_cores)
            for k in (1, 2)]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("import")
    (folder / "generous.yaml").write_text(GENEROUS)
    (folder / "impossible.yaml").write_text(IMPOSSIBLE)
    return folder


@pytest.fixture(scope="module")
def live_import(live_files: list[Path], workspace: Path):
    return run_cli(["import", "vllm-bench", *map(str, live_files), "--label", "on-instance-1",
                    "--out", "runs/live", "--slo-from", "generous.yaml"],
                   workspace / "runs", cwd=workspace)


@pytest.fixture(scope="module")
def committed_import(workspace: Path):
    files = [COMMITTED / "chat-rate8-trial1.json", COMMITTED / "chat-rate8-trial2.json"]
    return run_cli(["import", "vllm-bench", *map(str, files), "--out", "runs/committed",
                    "--slo-from", "generous.yaml"], workspace / "runs", cwd=workspace)


def test_the_files_are_vllm_bench_detailed_results(live_files: list[Path]) -> None:
    for path in live_files:
        data = json.loads(path.read_text())
        assert data["backend"] == "openai-chat" and data["max_concurrency"] == 4
        assert len(data["ttfts"]) == len(data["itls"]) == len(data["start_times"]) == NUM_PROMPTS
        assert data["completed"] == NUM_PROMPTS, {e for e in data["errors"] if e}


def test_import_builds_an_experiment_of_two_trials(live_import, live_files: list[Path],
                                                   workspace: Path) -> None:
    assert live_import.returncode == 0, live_import.output  # every generous SLO passes
    run_dir = workspace / "runs" / "live"
    assert folder_kind(run_dir) is FolderKind.EXPERIMENT
    trials = collect_trials(run_dir)
    assert [(t.variant, t.position) for t in trials] == [("on-instance-1", 1),
                                                         ("on-instance-1", 2)]
    assert [t.run_dir.name for t in trials] == ["001-on-instance-1-1", "002-on-instance-1-2"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert list(summary["variants"]) == ["on-instance-1"]
    assert summary["variants"]["on-instance-1"]["valid_trials"] == 2
    for trial, source in zip(trials, live_files, strict=True):
        provenance = trial.provenance
        assert provenance["source"] == "vllm-bench"
        assert provenance["server_instance"]["label"] == "on-instance-1"
        assert provenance["vllm_bench"]["file"] == str(source.resolve())
        assert trial.scenario.server.instance == "on-instance-1"
        assert trial.scenario.traffic.arrival.kind == "closed"
        assert trial.scenario.traffic.arrival.users == 4


def test_rows_carry_the_files_numbers(live_import, live_files: list[Path],
                                      workspace: Path) -> None:
    assert live_import.returncode == 0, live_import.output
    trial_dirs = sorted((workspace / "runs" / "live" / "trials").iterdir())
    for trial_dir, source in zip(trial_dirs, live_files, strict=True):
        data = json.loads(source.read_text())
        rows = pq.read_table(trial_dir / "samples.parquet").to_pydict()
        assert len(rows["request_id"]) == NUM_PROMPTS and all(rows["ok"])
        order = np.argsort(rows["plan_index"])

        def pick(key: str, rows=rows, order=order) -> np.ndarray:
            return np.asarray([rows[key][i] for i in order])

        # closed loop: latencies count from the send, so they are the file's own numbers
        assert np.all(pick("send_lag_s") == 0) and not pick("queued_for_slot").any()
        assert np.allclose(pick("ttft_s"), data["ttfts"])
        assert np.allclose(pick("e2e_s"), data["latencies"])
        for i, offsets in zip(order, rows["chunk_offsets_s"], strict=True):
            assert len(offsets) == len(data["itls"][i]) + 1
            assert np.allclose(np.diff(offsets), data["itls"][i], atol=1e-5)  # float32
        sends = pick("send_unix_s")
        starts = np.asarray(data["start_times"])
        assert np.allclose(sends - sends.min(), starts - starts.min(), atol=1e-6)
        assert list(pick("output_tokens")) == data["output_lens"]
        summary = json.loads((trial_dir / "summary.json").read_text())
        assert summary["metrics"]["ttft"]["mean"]["value"] * 1e3 == pytest.approx(
            data["mean_ttft_ms"])


def test_report_rerenders_the_import(live_import, workspace: Path) -> None:
    assert live_import.returncode == 0, live_import.output
    run_dir = workspace / "runs" / "live"
    before = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "report.html").unlink()
    result = run_cli(["report", "runs/live"], workspace / "runs", cwd=workspace)
    assert result.returncode == 0, result.output
    assert (run_dir / "report.html").is_file()
    after = json.loads((run_dir / "summary.json").read_text())
    assert after["variants"] == before["variants"]


def test_compare_two_imported_trials_with_two_others(live_import, committed_import,
                                                     workspace: Path) -> None:
    assert committed_import.returncode == 0, committed_import.output
    # the live files ran another workload (max concurrency 4): compare refuses, as gate does
    refused = run_cli(["compare", "runs/committed", "runs/live"], workspace / "runs",
                      cwd=workspace)
    assert refused.returncode == 2 and "workload differs" in refused.output, refused.output
    result = run_cli(["compare", "runs/committed", "runs/live", "--force", "--test",
                      "mann-whitney"], workspace / "runs", cwd=workspace)
    assert result.returncode == 0, result.output
    assert "warning: --force: live vs committed: workload differs" in result.output
    # with the rank test two trials per side can never be significant: every cell says so,
    # with its interval (Welch on logs, the default, can test 2+2)
    assert "not testable with 2+2 trials" in result.output, result.output
    assert "Mann-Whitney U on per-trial values" in result.output
    # both live files ran on one server (one label): within-instance, and said so
    assert "live vs committed: n=2+2 trials, 2+1 instances: within-instance" in result.output
    assert "report: " in result.output


def test_gate_refuses_a_different_workload_and_gates_with_force(live_import, committed_import,
                                                                workspace: Path) -> None:
    assert committed_import.returncode == 0, committed_import.output
    refused = run_cli(["gate", "runs/live", "--baseline", "runs/committed"],
                      workspace / "runs", cwd=workspace)
    assert refused.returncode == 2, refused.output
    assert "workload differs" in refused.output
    forced = run_cli(["gate", "runs/live", "--baseline", "runs/committed", "--force",
                      "--margin", "5%"], workspace / "runs", cwd=workspace)
    assert forced.returncode in (0, 1, 3), forced.output
    assert "ttft.p50" in forced.output and "exit code" in forced.output


def test_plan_from_the_imported_pilot(live_import, workspace: Path) -> None:
    result = run_cli(["plan", "runs/live", "--effect", "20%"], workspace / "runs",
                     cwd=workspace)
    # both files ran against the one shared server: no restart variation to plan from, so
    # no plan: exit 3 (INCONCLUSIVE), not 0
    assert result.returncode == 3, result.output
    assert "cannot estimate the restart-to-restart variation" in result.output, result.output
    assert "live: 2 valid trial(s) on 1 instance(s)" in result.output


def test_a_failing_slo_gives_exit_code_1(live_files: list[Path], workspace: Path) -> None:
    result = run_cli(["import", "vllm-bench", str(live_files[0]), "--out", "runs/single",
                      "--slo-from", "impossible.yaml"], workspace / "runs", cwd=workspace)
    assert result.returncode == 1, result.output
    run_dir = workspace / "runs" / "single"
    assert folder_kind(run_dir) is FolderKind.RUN
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "FAIL" in [s["verdict"] for s in summary["slos"]]
    assert summary["requests"]["measured"] == NUM_PROMPTS
