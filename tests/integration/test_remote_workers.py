"""Locust's distributed mode as its users run it across hosts, with no shared file system:
with `traffic.remote_workers` the suite runs the master only and prints `vllm-slo worker
--master HOST:PORT --token T`; the workers (here: on this host, as separate processes, each
in a directory of its own with a HOME of its own, as another host would be) get the config and
plan over Locust's channel and send their rows back. An audit hook (sitecustomize.py on the
workers' PYTHONPATH, which survives the wrapper's exec into Locust) records every file a
worker opens or lists under the run folder's parent: none may be."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.integration.conftest import HEALTH_BOUNDS_OFF, cli_env, standin_server
from vllm_slo.servers.standin.cli import read_record_log
from vllm_slo.transport.processes import free_loopback_port

pytestmark = pytest.mark.integration

CLOSED = "traffic.arrival={kind: closed, users: 8, spawn_rate: 8, think_time: 0s}"
OPEN = "traffic.arrival={kind: poisson, rate: 30, max_in_flight: 32}"
WORKER_ID = re.compile(r"^s\d+-")  # the request ids remote workers give (their stripe first)

AUDIT_HOOK = '''
import os, sys
_WATCHED = os.environ.get("AUDIT_WATCHED", "")
_LOG = os.environ.get("AUDIT_LOG", "")
def _hook(event, args):
    if not _WATCHED or event not in ("open", "os.listdir", "os.scandir", "os.mkdir"):
        return
    path = args[0] if args else None
    if isinstance(path, (str, bytes, os.PathLike)):
        text = os.fsdecode(path)
        if os.path.abspath(text).startswith(_WATCHED) and not text.startswith(_LOG):
            with open(_LOG, "a") as log:
                log.write(f"{event} {text}\\n")
sys.addaudithook(_hook)
if _LOG:  # proof that the hook watches this process (the wrapper, then Locust after its exec)
    with open(_LOG + ".loaded", "a") as loaded:
        loaded.write(" ".join(sys.argv[:3]) + "\\n")
'''


PLAIN_LOCUSTFILE = '''
from locust import User, constant, task


class ClosedLoopUser(User):
    wait_time = constant(1)

    @task
    def nothing(self):
        pass
'''


@dataclass
class RemoteRun:
    returncode: int
    output: str
    run_dir: Path
    workers: list[subprocess.Popen]
    worker_output: list[str]
    served: list[str]
    opened: list[str]  # what workers opened or listed under the master's folder
    watched: list[str]  # the worker processes the audit hook watched (their argv)


def _worker_env(tmp_path: Path, index: int, watched: Path) -> tuple[dict[str, str], Path]:
    home = tmp_path / f"worker-{index}" / "home"
    where = tmp_path / f"worker-{index}" / "cwd"
    home.mkdir(parents=True)
    where.mkdir(parents=True)
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "sitecustomize.py").write_text(AUDIT_HOOK)
    env = {**cli_env(), "HOME": str(home), "PYTHONPATH": str(hooks),
           "AUDIT_WATCHED": str(watched), "AUDIT_LOG": str(tmp_path / "audit.log")}
    return env, where


def remote_run(tmp_path: Path, workers: int, arrival: str, *, duration: str = "5s",
               stop_one: signal.Signals | None = None, stray_token: str | None = None,
               ahead_token: str | None = None, plain_stray: bool = False,
               extra: tuple[str, ...] = ()) -> RemoteRun:
    """A `remote_workers` run on the stand-in with `workers` workers started by hand;
    `stop_one`: send the last worker that signal once the master has its first rows;
    `stray_token`: one more worker, started first, with that token; `ahead_token`: the
    operator's token (VLLM_SLO_RUN_TOKEN on both sides), the workers started before the
    master, without --token (as a Kubernetes Deployment starts them); `plain_stray`: a plain
    `locust --worker` (not the suite's, no token) connects first."""
    master_dir = tmp_path / "master"
    master_dir.mkdir()
    record = tmp_path / "served.jsonl"
    port = free_loopback_port()
    arguments = ["run", "scenario=chat", "traffic.chat.output_tokens=8", "traffic.chat.turns=1",
                 "traffic.prefix_cache=keep", "traffic.chat.system_prompt_tokens=20",
                 f"traffic.remote_workers={workers}", "traffic.remote_workers_wait=60s",
                 f"traffic.master_port={port}", f"traffic.duration={duration}",
                 "traffic.warmup=1s", arrival, "slo={}", *HEALTH_BOUNDS_OFF, *extra]
    started: list[subprocess.Popen] = []
    logs: list[Path] = []
    output: list[str] = []
    if ahead_token is not None:
        for index in range(workers):
            env, where = _worker_env(tmp_path, index, master_dir)
            logs.append(tmp_path / f"worker-{index}.log")
            with open(logs[-1], "w") as log:
                started.append(subprocess.Popen(
                    [sys.executable, "-m", "vllm_slo.cli", "worker", "--master",
                     f"127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
                    env={**env, "VLLM_SLO_RUN_TOKEN": ahead_token}, cwd=where))
    cli_environment = cli_env() if ahead_token is None else {
        **cli_env(), "VLLM_SLO_RUN_TOKEN": ahead_token}
    with standin_server("--ttft", "0.02", "--itl", "0.005", "--record", str(record)) as url:
        cli = subprocess.Popen(
            [sys.executable, "-m", "vllm_slo.cli", "--runs-dir", "runs", *arguments,
             f"server.url={url}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=cli_environment, cwd=master_dir, start_new_session=True)
        try:
            assert cli.stdout is not None
            command = [""]
            for line in cli.stdout:
                output.append(line)
                if " worker --master " in line:
                    command = line.split()
                    break
            assert command[:2] == ["vllm-slo", "worker"], "".join(output)
            if plain_stray:
                (tmp_path / "plain").mkdir()
                (tmp_path / "plain" / "locustfile.py").write_text(PLAIN_LOCUSTFILE)
                logs.append(tmp_path / "plain.log")
                with open(logs[-1], "w") as log:
                    started.append(subprocess.Popen(
                        [sys.executable, "-m", "locust", "-f", "locustfile.py", "--worker",
                         "--master-host", "127.0.0.1", "--master-port", str(port)],
                        stdout=log, stderr=subprocess.STDOUT, env=cli_env(),
                        cwd=tmp_path / "plain"))
                time.sleep(3)  # connected (and held) before the suite's worker
            tokens = [stray_token] if stray_token is not None else []
            if ahead_token is None:
                tokens += [_token_of(command)] * workers
            for index, token in enumerate(tokens):
                env, where = _worker_env(tmp_path, index, master_dir)
                argv = [sys.executable, "-m", "vllm_slo.cli", *command[1:]]
                argv[-1] = f"--token={token}"
                logs.append(tmp_path / f"worker-{index}.log")
                with open(logs[-1], "w") as log:
                    started.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                    env=env, cwd=where))
                if stray_token is not None and index == 0:
                    started[0].wait(30)  # refused before the others join
            if stop_one is not None:
                _signal_once_delivering(started[-1], stop_one, "".join(output))
            rest, _ = cli.communicate(timeout=240)
            output.append(rest)
        finally:
            if cli.poll() is None:
                os.killpg(cli.pid, signal.SIGKILL)
                cli.wait()
            for worker in started:
                try:
                    worker.wait(30)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
    run_dir = next((master_dir / "runs").iterdir())
    audit = tmp_path / "audit.log"
    return RemoteRun(cli.returncode, "".join(output), run_dir, started,
                     [log.read_text() for log in logs], list(read_record_log(record)),
                     audit.read_text().splitlines() if audit.exists() else [],
                     (tmp_path / "audit.log.loaded").read_text().splitlines())


def _signal_once_delivering(worker: subprocess.Popen, signum: signal.Signals,
                            output: str) -> None:
    """Signal `worker` once the master's record shows rows from it (a loaded host may take
    seconds to start a worker: a fixed delay could kill it before it joined)."""
    found = re.search(r"run folder: (\S+)", output)
    assert found is not None, output
    record = Path(found.group(1)) / "remote_workers.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            workers = json.loads(record.read_text())["workers"]
        except (OSError, ValueError):
            workers = []
        if any(w["pid"] == worker.pid and w["rows"] > 0 for w in workers):
            worker.send_signal(signum)
            return
        time.sleep(0.2)
    raise AssertionError(f"worker {worker.pid} delivered no rows within 120 s")


def assert_every_row_once(run: RemoteRun, workers: int) -> None:
    table = pq.read_table(run.run_dir / "samples.parquet").to_pydict()
    row_ids = table["request_id"]
    assert len(row_ids) == len(set(row_ids)) > 20
    served = [i for i in run.served if WORKER_ID.match(i)]
    # joined by X-Request-Id: every request the stand-in served has its row, once
    assert sorted(served) == sorted(row_ids)
    assert {i.split("-")[0] for i in row_ids} == {f"s{k}" for k in range(workers)}
    summary = json.loads((run.run_dir / "summary.json").read_text())
    per_worker = summary["provenance"]["remote_workers"]
    assert len(per_worker) == workers
    assert sum(w["rows"] for w in per_worker) == len(row_ids)
    assert all(w["finished"] for w in per_worker)


def _token_of(command: list[str]) -> str:
    """The token in the printed worker command's last word, `--token=T`."""
    assert command[-1].startswith("--token="), command
    return command[-1].removeprefix("--token=")


def assert_no_trace_of_workers(run: RemoteRun, tmp_path: Path) -> None:
    # the hook watched each worker's wrapper and the Locust it became
    # (argv as a `-m` module sees it while the site hook loads: ['-m', arguments...])
    assert sum("worker --master" in argv for argv in run.watched) == len(run.workers)
    assert sum("locustfile.py" in argv for argv in run.watched) == len(run.workers), run.watched
    assert run.opened == []  # no worker opened or listed anything of the master's folder
    for index in range(len(run.workers)):  # and left nothing behind where it ran
        assert list((tmp_path / f"worker-{index}" / "cwd").iterdir()) == []
    printed = re.search(r"--token=(\S+)", run.output)
    assert printed is not None
    token = os.environ.get("VLLM_SLO_RUN_TOKEN_USED") or printed.group(1)
    for path in run.run_dir.rglob("*"):  # the token is never written to the run folder
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(("workers", "arrival"), [
    (1, CLOSED), (2, CLOSED), (4, CLOSED), (1, OPEN), (2, OPEN), (4, OPEN)],
    ids=["1-closed", "2-closed", "4-closed", "1-open", "2-open", "4-open"])
def test_remote_workers_deliver_every_row_once(tmp_path: Path, workers: int,
                                               arrival: str) -> None:
    run = remote_run(tmp_path, workers, arrival)
    assert run.returncode == 0, run.output + "\n".join(run.worker_output)
    assert_every_row_once(run, workers)
    assert_no_trace_of_workers(run, tmp_path)
    assert f"remote workers: {workers} of {workers} joined" in run.output
    status = json.loads((run.run_dir / "run_status.json").read_text())
    assert status["load_generator_failure"] is None


def test_a_killed_worker_is_named_and_the_run_invalid(tmp_path: Path) -> None:
    run = remote_run(tmp_path, 2, CLOSED, duration="10s", stop_one=signal.SIGKILL)
    assert run.returncode == 4, run.output
    killed = json.loads((run.run_dir / "remote_workers.json").read_text())["workers"]
    lost = [w for w in killed if w["lost_unix_s"] is not None]
    assert len(lost) == 1 and lost[0]["pid"] == run.workers[-1].pid
    name = lost[0]["worker_id"]
    assert re.search(rf"invalid: remote worker {re.escape(name)} \(stripe \d\) lost "
                     rf"[\d.]+s into the run: .*; {lost[0]['rows']} rows delivered", run.output)
    status = json.loads((run.run_dir / "run_status.json").read_text())
    assert name in status["load_generator_failure"]
    summary = json.loads((run.run_dir / "summary.json").read_text())
    assert summary["exit_code"] == 4
    assert any(name in reason for reason in summary["invalid_reasons"])
    # the rows it delivered before it died are kept, each once, and were served
    table = pq.read_table(run.run_dir / "samples.parquet").to_pydict()
    stripe = f"s{lost[0]['stripe']}-"
    its_rows = [i for i in table["request_id"] if i.startswith(stripe)]
    assert len(its_rows) == lost[0]["rows"] > 0
    assert set(its_rows) <= set(run.served)
    assert len(table["request_id"]) == len(set(table["request_id"]))


def test_a_worker_stopped_by_sigterm_sends_what_it_has_and_is_named(tmp_path: Path) -> None:
    run = remote_run(tmp_path, 2, CLOSED, duration="10s", stop_one=signal.SIGTERM)
    assert run.returncode == 4, run.output
    record = json.loads((run.run_dir / "remote_workers.json").read_text())["workers"]
    (stopped,) = [w for w in record if w["lost_unix_s"] is not None]
    assert stopped["pid"] == run.workers[-1].pid and not stopped["finished"]
    assert f"invalid: remote worker {stopped['worker_id']}" in run.output
    # on SIGTERM it sent every row it had, its requests cut in flight included: each request
    # of its stripe the stand-in saw has its row
    table = pq.read_table(run.run_dir / "samples.parquet").to_pydict()
    stripe = f"s{stopped['stripe']}-"
    its_rows = sorted(i for i in table["request_id"] if i.startswith(stripe))
    assert len(its_rows) == stopped["rows"] > 0
    assert sorted(i for i in run.served if i.startswith(stripe)) == its_rows


def test_a_worker_with_a_wrong_token_is_refused(tmp_path: Path) -> None:
    run = remote_run(tmp_path, 1, CLOSED, stray_token="not-the-token")
    assert run.workers[0].returncode == 3, run.worker_output[0]
    assert "refused this worker: wrong run token" in run.worker_output[0]
    assert re.search(r"remote workers: \S+ refused: wrong run token", run.output), run.output
    assert run.returncode == 0, run.output
    assert_every_row_once(run, 1)
    strays = json.loads((run.run_dir / "remote_workers.json").read_text())["strays"]
    assert [s["reason"] for s in strays] == ["refused: wrong run token"]


def test_too_few_workers_is_invalid_naming_how_many_joined(tmp_path: Path) -> None:
    master_dir = tmp_path / "runs"
    from tests.integration.conftest import run_cli

    with standin_server("--ttft", "0.02", "--itl", "0.005") as url:
        result = run_cli(["run", "scenario=chat", "traffic.chat.turns=1",
                          "traffic.remote_workers=2", "traffic.remote_workers_wait=3s",
                          f"traffic.master_port={free_loopback_port()}",
                          "traffic.duration=2s", "traffic.warmup=0s", CLOSED, "slo={}",
                          *HEALTH_BOUNDS_OFF, f"server.url={url}"], master_dir, timeout_s=180)
    assert result.returncode == 4, result.output
    assert "only 0 of 2 remote workers joined within 3s" in result.output


def test_workers_started_ahead_with_the_operators_token(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    token = "operator-token-0123456789"
    monkeypatch.setenv("VLLM_SLO_RUN_TOKEN_USED", token)
    run = remote_run(tmp_path, 2, CLOSED, ahead_token=token)
    assert run.returncode == 0, run.output + "\n".join(run.worker_output)
    assert '--token="$VLLM_SLO_RUN_TOKEN"' in run.output  # the secret itself is not printed
    assert token not in run.output
    assert_every_row_once(run, 2)
    assert_no_trace_of_workers(run, tmp_path)


def test_a_plain_locust_worker_never_counts_and_is_refused(tmp_path: Path) -> None:
    """A worker that says no token (here: plain Locust) is held back, never one of the
    expected workers and never given users, and is refused after HELLO_WAIT_S."""
    run = remote_run(tmp_path, 1, CLOSED, plain_stray=True)
    assert run.returncode == 0, run.output
    assert_every_row_once(run, 1)
    record = json.loads((run.run_dir / "remote_workers.json").read_text())
    assert [w["pid"] for w in record["workers"]] == [run.workers[1].pid]
    assert [s["reason"] for s in record["strays"]] == [
        "refused: said no run token within 10s (not a vllm-slo worker?)"]
    assert "refused: said no run token" in run.output
    # the refused worker was told to quit, and did, without sending a request
    assert "Got quit message from master" in run.worker_output[0]
    assert run.workers[0].returncode == 0
