"""`vllm-slo tune` end to end on real vLLM (CPU build): the shipped tune-cpu scenario with its
grid cut to max-num-seqs 2 / 8 (the scenario's 2 x 2 grid, 5 vLLM starts with the resume, cost
CI ~4 min; the grid's expansion is unit-tested), one short trial per candidate, each on a
fresh server. The tune is interrupted (SIGINT) while its second trial runs, then resumed from
its folder: the finished trial is kept, the cut one runs again, and the tune ends with a
ranking, the candidates as an experiment, and a recommended command line and config file."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.integration.conftest import (
    REPO,
    only_run_dir,
    requires_vllm,
    run_cli,
    running_cli,
    signal_and_wait,
    wait_for,
)

pytestmark = [pytest.mark.integration, requires_vllm]

SHORT = ["tune.trials=1", "tune.search=[]", "tune.grid={max-num-seqs: [2, 8]}",
         "traffic.duration=4s", "traffic.warmup=1s", "traffic.chat.turns=1",
         "traffic.chat.output_tokens=16"]


def second_trial_started(runs: Path) -> bool:
    run_dir = only_run_dir(runs)
    return run_dir is not None and any((run_dir / "trials").glob("002-*/server.log"))


@pytest.fixture(scope="module")
def tune(tmp_path_factory: pytest.TempPathFactory):
    runs = tmp_path_factory.mktemp("tune") / "runs"
    runs.mkdir()
    with running_cli(["tune", "scenario=tune-cpu", *SHORT], runs) as cli:
        wait_for(lambda: second_trial_started(runs) or cli.poll() is not None, 600,
                 "the tune's second trial to start")
        interrupted_output = signal_and_wait(cli, signal.SIGINT, timeout_s=120)
        interrupted_code = cli.returncode
    run_dir = only_run_dir(runs)
    first = run_dir / "trials" / sorted(p.name for p in (run_dir / "trials").iterdir())[0]
    first_pid = json.loads((first / "provenance.json").read_text())["server_pid"]
    resumed = run_cli(["tune", "--resume", str(run_dir)], runs, timeout_s=1500)
    return interrupted_output, interrupted_code, first_pid, resumed, run_dir


def test_an_interrupted_tune_says_how_to_resume(tune) -> None:
    output, code, _, _, run_dir = tune
    assert code == 4, output
    assert f"vllm-slo tune --resume {run_dir}" in output


def test_the_resumed_tune_keeps_finished_trials_and_runs_the_rest(tune) -> None:
    _, _, first_pid, resumed, run_dir = tune
    assert resumed.returncode in (0, 1, 3), resumed.output
    assert "trial 1: c01 #1 (max-num-seqs=2): done before, kept" in resumed.output
    assert "1 trial(s) run, 1 kept from before" in resumed.output
    folders = sorted((run_dir / "trials").iterdir())
    assert [f.name for f in folders] == ["001-c01-1", "002-c02-1"]
    pids = [json.loads((f / "provenance.json").read_text())["server_pid"] for f in folders]
    assert pids[0] == first_pid  # kept, not run again
    assert len(set(pids)) == 2  # every trial on its own server
    for folder in folders:
        assert "interrupted" not in json.loads((folder / "summary.json").read_text())[
            "invalid_reasons"]


def test_the_tune_ranks_and_recommends(tune) -> None:
    _, _, _, resumed, run_dir = tune
    document = json.loads((run_dir / "tune.json").read_text())
    jsonschema.validate(document, json.loads(
        (REPO / "reports" / "schema" / "tune.schema.json").read_text()))
    assert document["exit_code"] == resumed.returncode
    candidates = {c["name"]: c for c in document["candidates"]}
    assert [c["changed"] for c in candidates.values()] == [{"max-num-seqs": 2},
                                                           {"max-num-seqs": 8}]
    for candidate in candidates.values():  # real goodput from real trials
        # (0 is real too: on a loaded 2-core box every request of 2 sequences without prefix
        # caching once missed the 2 s TTFT; its ratio to the best is then undefined, null)
        assert len(candidate["objective_values"]) == 1 and candidate["median"] >= 0
        assert candidate["preemptions"] is not None  # vLLM's counter was scraped
    assert max(c["median"] for c in candidates.values()) > 0
    assert sorted(r["name"] for r in document["ranking"]) == sorted(candidates)
    # one trial each can never be significant: every other candidate is a tie with the best
    recommended = document["recommended"]
    assert recommended is not None, resumed.output
    assert len(recommended["tied_with"]) == 1
    # the recommendation is the top of the ranking, which orders the medians. Which candidate
    # tops it is the measurement's to say, not this test's: on 2 cores vLLM's CPU engine is
    # compute-bound, and 2 or 8 sequences serve the same load alike (measured with these
    # settings: 5.0 vs 5.3 req/s, TTFT p50 1.09 s vs 0.83 s), so one trial each is a tie
    ranking = document["ranking"]
    assert all(r["eligible"] for r in ranking), ranking  # every candidate met the SLOs
    assert [r["median"] for r in ranking] == sorted((r["median"] for r in ranking),
                                                    reverse=True)
    assert recommended["candidate"] == ranking[0]["name"], ranking
    best = candidates[ranking[0]["name"]]
    assert recommended["args"]["max-num-seqs"] == best["changed"]["max-num-seqs"]
    assert sorted(recommended["tied_with"]) == sorted(r["name"] for r in ranking[1:])
    command = (run_dir / "recommended-command.txt").read_text()
    assert command.startswith("vllm serve ")
    assert f"--max-num-seqs {best['changed']['max-num-seqs']}" in command
    assert yaml.safe_load((run_dir / "recommended.yaml").read_text()) == recommended["args"]
    assert "recommended:" in resumed.output and "vllm serve" in resumed.output


def test_the_candidates_render_as_an_experiment(tune) -> None:
    _, _, _, _, run_dir = tune
    summary = json.loads((run_dir / "summary.json").read_text())
    assert sorted(summary["variants"]) == ["c01", "c02"]
    assert summary["variants"]["c02"]["server_args"]["max-num-seqs"] == 8
    assert (run_dir / "report.html").is_file()
    page = (run_dir / "tune.html").read_text()
    assert 'id="ranking-table"' in page and 'href="report.html"' in page


def test_report_rerenders_the_tune_from_its_folder(tune) -> None:
    _, _, _, resumed, run_dir = tune
    before = json.loads((run_dir / "tune.json").read_text())
    (run_dir / "tune.json").unlink()
    (run_dir / "tune.html").unlink()
    again = run_cli(["report", str(run_dir)], run_dir.parent, timeout_s=300)
    assert again.returncode == resumed.returncode, again.output
    assert json.loads((run_dir / "tune.json").read_text()) == before
    assert (run_dir / "tune.html").is_file() and "tune report:" in again.output


@pytest.mark.vllm_no_traffic
def test_a_misspelt_grid_flag_is_refused_before_anything_starts(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    result = run_cli(["tune", "scenario=tune-cpu", "tune.grid={max-num-sqs: [2, 8]}"], runs,
                     timeout_s=300)
    assert result.returncode == 2, result.output
    assert "max-num-sqs" in result.output and "max-num-seqs" in result.output  # close match
    assert not runs.exists() or not any(runs.iterdir())  # no tune folder was made
