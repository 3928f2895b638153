"""Placement (issue 10, item 4): device slots that rotate among variants, the environment a
placed server gets, and one side-by-side round run with a stand-in trial runner (threads,
the start barrier, a failed start, Ctrl-C)."""

from __future__ import annotations

import _thread
import threading
import time
from pathlib import Path

import pytest

from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario, resolve_variants
from vllm_slo.scenarios.model import Scenario
from vllm_slo.servers.vllm_server import device_env, plan_launch, world_size
from vllm_slo.side_by_side import TRAFFIC_START_LEAD_S, PlacedTrial, place, run_round

SIDE_BY_SIDE = ["variants={a: {}, b: {server: {args: {max-num-seqs: 2}}}}",
                "side_by_side={devices: [[0], [1]]}", "trials=4"]


def test_slots_rotate_so_every_variant_meets_every_device() -> None:
    scenario, _ = load_scenario("chat", SIDE_BY_SIDE)
    spec = scenario.side_by_side
    assert spec is not None
    by_round = [(spec.slot_of(0, r), spec.slot_of(1, r)) for r in range(4)]
    assert by_round == [((0,), (1,)), ((1,), (0,)), ((0,), (1,)), ((1,), (0,))]
    three = Scenario.model_validate({"name": "x", "variants": {"a": {}, "b": {}, "c": {}},
                                     "side_by_side": {"devices": [[0, 1], [2, 3], [4, 5]]}})
    assert three.side_by_side is not None
    assert [three.side_by_side.slot_of(2, r) for r in range(3)] == [(4, 5), (0, 1), (2, 3)]


def test_side_by_side_stays_out_of_the_arms_and_tune() -> None:
    scenario, _ = load_scenario("chat", SIDE_BY_SIDE)
    assert scenario.to_yaml_dict()["side_by_side"] == {"devices": [[0], [1]]}
    arms = resolve_variants(scenario)
    assert all(arm.side_by_side is None and arm.server.devices is None for arm in arms.values())
    assert "devices" not in arms["a"].to_yaml_dict()["server"]
    placed = place(arms["b"], (1,))
    assert placed.server.devices == (1,) and placed.server.args == arms["b"].server.args
    assert placed.server.args["max-num-seqs"] == 2
    with pytest.raises(ScenarioError, match="side_by_side and tune do not mix"):
        load_scenario("tune-cpu", ["side_by_side={devices: [[0], [1]]}"])


def test_devices_become_the_platforms_placement_variable() -> None:
    assert device_env((2, 3), "gpu", 1) == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert device_env((0, 1, 2, 3), "gpu", 2) == {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    assert device_env((1,), "cpu", 1) == {"VLLM_CPU_OMP_THREADS_BIND": "1"}
    assert device_env((0, 1, 2, 3), "cpu", 2) == {"VLLM_CPU_OMP_THREADS_BIND": "0,1|2,3"}
    assert world_size({"tensor-parallel-size": 2, "pipeline-parallel-size": 2}) == 4
    with pytest.raises(ScenarioError, match=r"2 parallel rank\(s\).*at least 2 GPUs"):
        device_env((0,), "gpu", 2)
    with pytest.raises(ScenarioError, match="a multiple of 2 cores"):
        device_env((0, 1, 2), "cpu", 2)
    scenario, _ = load_scenario("chat", ["server.devices=[1]"])
    plan = plan_launch(scenario.server, "cpu", "/models/tiny", 8123)
    assert plan.env_overrides["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    gpu = plan_launch(scenario.server, "gpu", "/models/tiny", 8123)
    assert gpu.env_overrides["CUDA_VISIBLE_DEVICES"] == "1"
    assert "CUDA_VISIBLE_DEVICES" not in plan_launch(
        load_scenario("chat")[0].server, "gpu", "/models/tiny", 8123).env_overrides


def _trials(tmp_path: Path, labels: list[str]) -> list[PlacedTrial]:
    scenario, _ = load_scenario("chat")
    return [PlacedTrial(label, scenario, tmp_path / label) for label in labels]


def test_a_round_starts_its_traffic_together(tmp_path: Path) -> None:
    """The trials reach `before_traffic` at different times, leave it together, and are
    given one traffic start, TRAFFIC_START_LEAD_S after the last of them arrived (their
    Locust processes start up before it)."""
    released: dict[str, float] = {}
    start_at: dict[str, float | None] = {}

    def fake_trial(scenario, run_dir, say, before_traffic):
        time.sleep(0.3 if run_dir.name == "slow" else 0.0)  # one server starts later
        arrived = time.time()
        start_at[run_dir.name] = before_traffic()
        released[run_dir.name] = time.monotonic()
        say("traffic")
        return run_dir.name, arrived

    lines: list[str] = []
    results, stopped = run_round(_trials(tmp_path, ["fast", "slow"]), lines.append, fake_trial)
    assert not stopped and [r[0] for r in results] == ["fast", "slow"]
    assert abs(released["fast"] - released["slow"]) < 0.05
    assert sorted(lines) == ["[fast] traffic", "[slow] traffic"]
    assert start_at["fast"] == start_at["slow"]  # one instant for the round
    last_arrival = max(arrived for _, arrived in results)
    assert 0 <= start_at["slow"] - last_arrival - TRAFFIC_START_LEAD_S < 0.05


def test_a_failed_start_lets_the_others_go_on_and_is_raised_after(tmp_path: Path) -> None:
    finished: list[str] = []

    def fake_trial(scenario, run_dir, say, before_traffic):
        if run_dir.name == "broken":
            raise RuntimeError("vLLM did not start")
        # would wait forever for the broken one without the barrier's abort; starts at once
        assert before_traffic() is None
        finished.append(run_dir.name)
        return run_dir.name, None

    with pytest.raises(RuntimeError, match="did not start"):
        run_round(_trials(tmp_path, ["broken", "fine"]), lambda line: None, fake_trial)
    assert finished == ["fine"]


def test_ctrl_c_reaches_every_trial_once(tmp_path: Path) -> None:
    """SIGINT in the main thread: each trial's thread gets one KeyboardInterrupt, handles it
    (as run_trial does: stop, keep the rows, render), and the round says it stopped."""
    handled: list[str] = []
    started = threading.Barrier(3)

    def fake_trial(scenario, run_dir, say, before_traffic):
        started.wait()
        try:
            while True:
                time.sleep(0.01)
        except KeyboardInterrupt:
            handled.append(run_dir.name)
            time.sleep(0.1)  # cleanup time: no second interrupt arrives
            return run_dir.name, None

    def interrupt_main() -> None:
        started.wait()
        time.sleep(0.1)
        _thread.interrupt_main()

    threading.Thread(target=interrupt_main).start()
    results, stopped = run_round(_trials(tmp_path, ["a", "b"]), lambda line: None, fake_trial)
    assert stopped
    assert sorted(handled) == ["a", "b"] and len(results) == 2


def test_the_summary_names_the_confound_and_an_uneven_rotation() -> None:
    from vllm_slo.analysis.wording import side_by_side_warnings

    even, _ = load_scenario("chat", SIDE_BY_SIDE)
    (confound,) = side_by_side_warnings(even)
    assert "a on [0], [1], [0], [1]; b on [1], [0], [1], [0]" in confound
    assert "shared this host's CPUs" in confound
    uneven, _ = load_scenario("chat", [*SIDE_BY_SIDE[:2], "trials=3"])
    assert "3 round(s) do not rotate evenly over 2 device slots" in \
        side_by_side_warnings(uneven)[1]
    assert side_by_side_warnings(load_scenario("chat")[0]) == []
