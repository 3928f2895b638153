"""`traffic.workers`: the Locust worker count a run gets (explicit, or `auto` from the host's
cores, the server's share and the streams asked for), and its command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_slo.loadtests.locust_launcher import locust_argv, resolve_workers
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario


def traffic(*overrides: str):
    scenario, _ = load_scenario("chat", list(overrides))
    return scenario.traffic


@pytest.mark.parametrize(("users", "cores", "share", "expected"), [
    (8, 2, "cpu", 1),  # the CPU build keeps all but one core: one worker on this kind of box
    (8, 16, "gpu", 1),  # a few streams never need a second process
    (64, 16, "gpu", 1),
    (65, 16, "gpu", 2),
    (256, 16, "gpu", 4),
    (1024, 16, "gpu", 14),  # capped by the cores the server leaves
    (1024, 16, "remote", 16),
    (100_000, 128, "remote", 32),  # and by MAX_AUTO_WORKERS
    (300, 2, "local", 1),  # never fewer than one
])
def test_auto_workers(users: int, cores: int, share: str, expected: int) -> None:
    spec = traffic(f"traffic.arrival.users={users}")
    assert spec.workers == "auto"
    assert resolve_workers(spec, cores, share) == expected


def test_open_loop_auto_counts_in_flight_slots_and_explicit_wins() -> None:
    spec = traffic("traffic.arrival={kind: poisson, rate: 50, max_in_flight: 200}")
    assert resolve_workers(spec, 16, "gpu") == 4
    assert resolve_workers(traffic("traffic.workers=3"), 2, "cpu") == 3


def test_processes_is_read_as_workers_and_both_must_agree() -> None:
    assert traffic("traffic.processes=2").workers == 2
    with pytest.raises(ScenarioError, match="workers"):
        traffic("traffic.processes=2", "traffic.workers=3")
    with pytest.raises(ScenarioError, match="whole number of processes from 1 to 256"):
        traffic("traffic.workers=0")
    with pytest.raises(ScenarioError, match="'auto' or a whole number"):
        traffic("traffic.workers=many")


def test_more_than_one_worker_becomes_locust_processes() -> None:
    spec = traffic()
    assert "--processes" not in locust_argv(Path("/run"), "http://127.0.0.1:1", spec, 1)
    argv = locust_argv(Path("/run"), "http://127.0.0.1:1", spec, 4, local_master_port=41234)
    assert argv[argv.index("--processes") + 1] == "4"
    # the local master listens on loopback (Locust's default: every interface) on the run's
    # own port, and its forked workers connect there: runs side by side never meet
    assert argv[argv.index("--master-bind-host") + 1] == "127.0.0.1"
    assert argv[argv.index("--master-bind-port") + 1] == "41234"
    assert argv[argv.index("--master-port") + 1] == "41234"


def test_a_start_gate_reaches_locust_only_when_given() -> None:
    spec = traffic()
    assert "--vllm-slo-start-at" not in locust_argv(Path("/run"), "http://127.0.0.1:1", spec)
    argv = locust_argv(Path("/run"), "http://127.0.0.1:1", spec, start_at_unix_s=1764633600.25)
    assert argv[argv.index("--vllm-slo-start-at") + 1] == "1764633600.250000"
