"""Where vLLM's CPU build and Locust run on a small host (vllm_slo/servers/core_split.py): disjoint
cores by default on at most 4 cores, said in the launch plan; nothing pinned elsewhere."""

from __future__ import annotations

import os

import pytest

from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.servers.core_split import (
    SPLIT_MAX_CORES,
    plan_core_split,
    usable_cores,
)
from vllm_slo.servers.vllm_server import plan_launch
from vllm_slo.transport.processes import pin


def test_a_small_host_gives_server_and_load_generator_disjoint_cores() -> None:
    two = plan_core_split((0, 1), "cpu", True, None)
    assert (two.server_cores, two.client_cores) == ((0,), (1,))
    assert "2-core host" in two.reason
    four = plan_core_split((3, 0, 2, 1), "cpu", True, None)
    assert (four.server_cores, four.client_cores) == ((0, 1), (2, 3))
    three = plan_core_split((0, 1, 2), "cpu", True, None)
    assert (three.server_cores, three.client_cores) == ((0,), (1, 2))


@pytest.mark.parametrize(("cores", "platform", "launched", "mode", "ranks", "why"), [
    (tuple(range(SPLIT_MAX_CORES + 1)), "cpu", True, "auto", 1, "usable cores"),
    ((0,), "cpu", True, "auto", 1, "one usable core"),
    ((0, 1), "gpu", True, "auto", 1, "GPU server"),
    ((0, 1), "cpu", False, "auto", 1, "attached server"),
    ((0, 1), "cpu", True, "off", 1, "core_split is off"),
    ((0, 1, 2, 3), "cpu", True, "auto", 2, "2 parallel ranks"),
])
def test_nothing_is_pinned_where_the_split_does_not_apply(cores, platform, launched, mode,
                                                          ranks, why) -> None:
    split = plan_core_split(cores, platform, launched, None, mode, ranks)
    assert (split.server_cores, split.client_cores) == (None, None)
    assert why in split.reason


def test_explicit_devices_place_the_server_and_leave_the_client_free() -> None:
    split = plan_core_split((0, 1), "cpu", True, (1,))
    assert (split.server_cores, split.client_cores) == ((1,), None)


def test_the_launch_plan_binds_vllm_to_the_server_cores_and_records_the_split() -> None:
    plan = plan_launch(ServerSpec(), "cpu", "/m", 8000, host_cores=(0, 1))
    assert plan.env_overrides["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert plan.to_dict()["core_split"] == {
        "server_cores": [0], "client_cores": [1], "reason": plan.core_split.reason}
    off = plan_launch(ServerSpec(core_split="off"), "cpu", "/m", 8000, host_cores=(0, 1))
    assert "VLLM_CPU_OMP_THREADS_BIND" not in off.env_overrides
    assert off.core_split.server_cores is None
    own = plan_launch(ServerSpec(env={"VLLM_CPU_OMP_THREADS_BIND": "1"}), "cpu", "/m", 8000,
                      host_cores=(0, 1))
    assert own.env_overrides["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    assert own.core_split.server_cores is None and "server.env sets" in own.core_split.reason
    gpu = plan_launch(ServerSpec(), "gpu", "/m", 8000, host_cores=(0, 1))
    assert gpu.core_split.server_cores is None and "CUDA_VISIBLE_DEVICES" not in \
        gpu.env_overrides


def test_devices_outside_the_usable_cores_are_refused() -> None:
    with pytest.raises(ScenarioError, match=r"server.devices = \[5\]: .*usable cores are"):
        plan_launch(ServerSpec(devices=(5,)), "cpu", "/m", 8000, host_cores=(0, 1))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity API")
def test_pin_confines_a_process_and_none_leaves_it() -> None:
    before = os.sched_getaffinity(0)
    core = usable_cores()[-1]
    try:
        pin(os.getpid(), None)
        assert os.sched_getaffinity(0) == before
        pin(os.getpid(), (core,))
        assert os.sched_getaffinity(0) == {core}
    finally:
        os.sched_setaffinity(0, before)


def test_core_split_reads_yaml_off_as_off() -> None:
    from vllm_slo.scenarios.loader import load_scenario

    scenario, _ = load_scenario("chat", ["server.core_split=off"])  # YAML: off is false
    assert scenario.server.core_split == "off"
    assert ServerSpec(core_split=True).core_split == "auto"
    with pytest.raises(ValueError, match="core_split"):
        ServerSpec(core_split="sometimes")
