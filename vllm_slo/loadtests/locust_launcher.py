"""Run Locust as a subprocess (`--headless`), exactly as a Locust user would, and watch it.

The suite never imports locust itself (Locust monkey-patches the standard library on import);
this module only builds the command line, starts it, reports progress from the rows Locust
writes, and stops it early when the server dies.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vllm_slo.loadtests.arrivals import SCHEDULE_LEAD_S
from vllm_slo.loadtests.arrow_memory import locust_environment
from vllm_slo.loadtests.remote_rows import TOKEN_ENV
from vllm_slo.resources import user_folder
from vllm_slo.run_folder.run_files import LOCUST_LOG_FILE
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.traffic_spec import TrafficSpec
from vllm_slo.transport.processes import free_loopback_port, start_guarded, stop_process_group

# absolute paths of the installed locustfiles: nothing depends on the working directory
LOCUSTFILE = user_folder("loadtests") / "locustfile.py"
STAGES_LOCUSTFILE = user_folder("loadtests") / "locustfile_stages.py"
STARTUP_ALLOWANCE_S = 120.0


@dataclass(frozen=True, slots=True)
class LocustResult:
    returncode: int | None
    log_path: Path
    stopped_early: str | None  # why the suite stopped Locust, if it did
    aborted: str | None = None  # the scenario's abort_on fired: why

    @property
    def failure(self) -> str | None:
        if self.aborted:
            return None  # stopped on purpose: the run's status says why (abort_on)
        if self.stopped_early:
            return self.stopped_early
        if self.returncode not in (0, None):
            return f"locust exited with code {self.returncode}; see {self.log_path}"
        return None


# cores a vLLM server keeps busy beside its GPU work (API server + EngineCore), also assumed
# for a server attached on loopback; on the CPU platform vLLM's worker takes every core but one
GPU_SERVER_CORES = 2
MAX_AUTO_WORKERS = 32
# streams one worker is given by `auto`: on a 16-core host one worker holds 256 streams at 43%
# of a core within 2 ms (TTFT p50) of the truth, 64 at 17% (benchmarks/client_capacity.py,
# docs/gpu.md); more processes than needed compete with the server's own CPU (an H200 run with
# 14 workers for 256 streams saw the server emit 20% fewer tokens than under vllm bench)
STREAMS_PER_AUTO_WORKER = 64


def resolve_workers(traffic: TrafficSpec, cpu_count: int, server_share: str) -> int:
    """Locust worker processes for a run: `traffic.workers`, or for `auto` the host's cores
    minus what the server needs (`server_share`: "gpu" launched on a GPU, "cpu" launched on
    this CPU, "local" attached on loopback, "remote" attached elsewhere), one per
    STREAMS_PER_AUTO_WORKER users (open loop: in-flight slots), at most MAX_AUTO_WORKERS."""
    if traffic.workers != "auto":
        return traffic.workers
    keeps = {"gpu": GPU_SERVER_CORES, "cpu": cpu_count - 1, "local": GPU_SERVER_CORES,
             "remote": 0}[server_share]
    arrival = traffic.arrival
    users = arrival.max_in_flight if arrival.open_loop else max(
        [arrival.users or 1, *(stage.users or 0 for stage in arrival.stages)])
    wanted = -(-users // STREAMS_PER_AUTO_WORKER)  # ceil
    return max(1, min(cpu_count - keeps, wanted, MAX_AUTO_WORKERS))


def locust_argv(run_dir: Path, base_url: str, traffic: TrafficSpec, workers: int = 1,
                local_master_port: int = 5557, start_at_unix_s: float | None = None
                ) -> list[str]:
    """The Locust command line for a traffic spec (users, spawn rate, run time, user class).
    With local worker processes (`--processes`) the master listens on loopback only, on
    `local_master_port` (a free port per run, so runs side by side do not meet; Locust's own
    default is every interface, port 5557). `start_at_unix_s`: Locust, once started up,
    waits until that wall-clock instant before its traffic starts (side-by-side rounds)."""
    arrival = traffic.arrival
    closed_stages = arrival.kind == "stages" and not arrival.open_loop
    argv = [sys.executable, "-m", "locust", "-f",
            str(STAGES_LOCUSTFILE if closed_stages else LOCUSTFILE), "--headless",
            "--host", base_url]
    if arrival.open_loop:
        slots = arrival.max_in_flight
        argv += ["--users", str(slots), "--spawn-rate", str(max(100, 4 * slots)),
                 "--run-time", f"{math.ceil(traffic.total_s + SCHEDULE_LEAD_S)}s"]
    elif not closed_stages:
        argv += ["--users", str(arrival.users), "--spawn-rate", f"{arrival.spawn_rate:g}",
                 "--run-time", f"{math.ceil(traffic.total_s)}s"]
    if traffic.remote_workers:
        argv += ["--master", "--expect-workers", str(traffic.remote_workers),
                 "--expect-workers-max-wait", f"{math.ceil(traffic.remote_workers_wait_s)}",
                 "--master-bind-host", traffic.master_bind,
                 "--master-bind-port", str(traffic.master_port)]
    argv += ["--stop-timeout", f"{math.ceil(traffic.stop_timeout_s)}",
             "--only-summary", "--loglevel", "WARNING", "--exit-code-on-error", "0",
             "--vllm-slo-run-dir", str(run_dir.resolve())]
    if start_at_unix_s is not None:
        argv += ["--vllm-slo-start-at", f"{start_at_unix_s:.6f}"]
    if workers > 1 and not traffic.remote_workers:
        argv += ["--processes", str(workers), "--master-bind-host", "127.0.0.1",
                 "--master-bind-port", str(local_master_port),
                 "--master-port", str(local_master_port)]
    argv.append("OpenLoopUser" if arrival.open_loop else "ClosedLoopUser")
    return argv


def worker_argv(traffic: TrafficSpec, master_host: str, token: str) -> list[str]:
    """What to run on each host that lends a worker to a `remote_workers` run: one worker
    process that needs only the suite installed and the master's address (`--processes K` on
    it would count as K of the expected workers). `--token=T` as one word: a token that
    begins with `-` is still the option's value."""
    return ["vllm-slo", "worker", "--master", f"{_bracketed(master_host)}:{traffic.master_port}",
            f"--token={token}"]


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


_ADDRESS = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]]+)):(?P<port>\d{1,5})$")


def parse_master_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (`[::1]:5557` for IPv6) as (host, port); a ScenarioError says what is
    wrong (exit 2)."""
    match = _ADDRESS.match(text.strip())
    port = int(match.group("port")) if match else 0
    if match is None or not 1 <= port <= 65535:
        raise ScenarioError(f"--master {text!r}: expected HOST:PORT (e.g. 10.0.0.5:5557, "
                            f"[::1]:5557), the port 1-65535")
    return match.group("v6") or match.group("host"), port


def worker_locust_argv(master_host: str, master_port: int) -> list[str]:
    """The `locust --worker` command `vllm-slo worker` runs: the suite's locustfile, no run
    folder (the master sends the config and plan; the token is in its environment)."""
    return [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--worker",
            "--master-host", master_host, "--master-port", str(master_port),
            "--loglevel", "WARNING"]


def exec_worker(master: str, token: str) -> None:
    """Become the Locust worker (exec: signals such as a pod's SIGTERM reach Locust itself,
    and its exit status is the command's): 3 when the master refused it."""
    if not token:
        raise ScenarioError(f"vllm-slo worker: the run token is required (--token, or "
                            f"{TOKEN_ENV}); the master's terminal prints it")
    host, port = parse_master_address(master)
    argv = worker_locust_argv(host, port)
    env = {**locust_environment(os.environ), TOKEN_ENV: token}
    sys.stdout.flush()
    os.execve(argv[0], argv, env)


def run_locust(
    run_dir: Path,
    base_url: str,
    traffic: TrafficSpec,
    workers: int,
    server_failure: Callable[[], str | None],
    progress: Callable[[float, float], None] = lambda elapsed_s, planned_s: None,
    progress_interval_s: float = 5.0,
    abort: Callable[[], str | None] = lambda: None,
    abort_interval_s: float = 2.0,
    start_at_unix_s: float | None = None,
    cores: tuple[int, ...] | None = None,
    run_token: str | None = None,
) -> LocustResult:
    """Run Locust to its end (or until the server dies, the hard deadline passes or `abort`
    says why to stop); `cores`: the cores its processes are confined to (None: anywhere);
    `run_token`: a remote-worker run's token (in the master's environment only)."""
    run_dir = run_dir.resolve()  # Locust runs in the run folder: every path it gets is absolute
    log_path = run_dir / LOCUST_LOG_FILE
    planned_s = traffic.total_s
    gate_wait_s = max(0.0, start_at_unix_s - time.time()) if start_at_unix_s else 0.0
    hard_deadline_s = planned_s + traffic.stop_timeout_s + STARTUP_ALLOWANCE_S + gate_wait_s + (
        traffic.remote_workers_wait_s if traffic.remote_workers else 0.0)
    with open(log_path, "ab") as log:  # behind a lifeline: Locust ends with the suite, however
        # it ends; its cores set before it forks its --processes workers (they inherit them)
        process = start_guarded(
            locust_argv(run_dir, base_url, traffic, workers, free_loopback_port(),
                        start_at_unix_s), cores,
            stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, cwd=run_dir, env={
                **locust_environment(os.environ),
                **({TOKEN_ENV: run_token} if run_token else {})})
    started = time.monotonic()
    next_progress = started + progress_interval_s
    next_abort_check = started + abort_interval_s
    stopped_early = aborted = None
    try:
        while process.poll() is None:
            time.sleep(0.5)
            now = time.monotonic()
            died = server_failure()
            if died is not None:
                stopped_early = f"server died during the run: {died.splitlines()[0]}"
                break
            if now - started > hard_deadline_s:
                stopped_early = f"locust still running after {hard_deadline_s:.0f}s; stopped"
                break
            if now >= next_abort_check:
                aborted = abort()
                if aborted is not None:
                    break
                next_abort_check = now + abort_interval_s
            if now >= next_progress:
                progress(now - started, planned_s)
                next_progress = now + progress_interval_s
    finally:  # the master and its --processes workers (rows get flushed), and the lifeline
        stop_process_group(process, grace_s=15.0)
    return LocustResult(process.returncode, log_path, stopped_early, aborted)
