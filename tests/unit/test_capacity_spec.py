"""The `capacity:` section and capacity comparisons: what is refused with a clear error, what a
ratio of two capacities decides, and the exit codes a search ends with."""

from __future__ import annotations

import pytest

from vllm_slo.analysis.capacity import capacity_exit_code
from vllm_slo.analysis.capacity_comparison import CapacityChange, capacity_gate, capacity_ratio
from vllm_slo.scenarios.capacity_spec import CapacitySpec
from vllm_slo.scenarios.errors import ExitCode, ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.stats.capacity_search import CapacityEstimate, SearchStatus
from vllm_slo.stats.statistics import Verdict


def test_the_shipped_capacity_scenario_loads() -> None:
    scenario, _ = load_scenario("capacity-cpu", [])
    assert scenario.capacity is not None
    assert scenario.capacity.unit == "req/s" and scenario.capacity.tolerance == 0.25
    assert "capacity" in scenario.to_yaml_dict()
    assert "capacity" not in scenario.base_without_arms()  # a step's scenario has none


@pytest.mark.parametrize("override, message", [
    ("capacity.high=0.4", "must be above capacity.low"),
    ("capacity.require='>= 3 users'", "counted in req/s"),
    ("capacity.require=lots", "expected '>= N req/s'"),
    ("capacity={load: traffic.arrival.users, low: 1.5, high: 8}", "users are whole numbers"),
    ("capacity={load: traffic.arrival.users, low: 1, high: 8}", "closed-loop users"),
    ("traffic.arrival={kind: closed, users: 4}", "an open-loop rate"),
    ("slo={}", "declares none"),
    ("capacity.tolerance=5 percent", "valid number"),
])
def test_bad_capacity_sections_are_refused(override: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load_scenario("capacity-cpu", [override])


def test_users_are_whole_and_require_parses() -> None:
    spec = CapacitySpec(load="traffic.arrival.users", low=4, high=64, require=">= 16 users")
    assert spec.whole_steps and spec.required == 16.0
    with pytest.raises(ValueError, match="whole numbers"):
        CapacitySpec(load="traffic.arrival.users", low=4.5, high=64)


def _estimate(value: float, low: float | None, high: float | None) -> CapacityEstimate:
    return CapacityEstimate(value, low, high, 0.95, "ttft p90 < 500ms")


def test_a_ratio_decides_higher_lower_equivalent_undecided() -> None:
    base = _estimate(10.0, 9.5, 10.5)
    higher = capacity_ratio(base, _estimate(30.0, 28.0, 31.0))
    assert higher.change is CapacityChange.HIGHER
    assert higher.low == pytest.approx(28.0 / 10.5) and higher.high == pytest.approx(31 / 9.5)
    assert higher.confidence == pytest.approx(0.90)  # both intervals must cover
    assert capacity_ratio(base, _estimate(5.0, 4.5, 5.5)).change is CapacityChange.LOWER
    assert capacity_ratio(base, _estimate(10.0, 9.8, 10.2)).change is CapacityChange.EQUIVALENT
    assert capacity_ratio(base, _estimate(10.0, 8.0, 13.0)).change is CapacityChange.UNDECIDED
    assert capacity_ratio(base, _estimate(20.0, 16.0, None)).change is CapacityChange.HIGHER


def test_the_capacity_gate_holds_the_candidate_to_the_margin() -> None:
    base = _estimate(10.0, 9.5, 10.5)
    assert capacity_gate(capacity_ratio(base, _estimate(10.0, 9.9, 10.4)), 0.10) is Verdict.PASS
    assert capacity_gate(capacity_ratio(base, _estimate(7.0, 6.8, 7.2)), 0.10) is Verdict.FAIL
    assert capacity_gate(capacity_ratio(base, _estimate(9.5, 8.0, 11.0)),
                         0.10) is Verdict.INCONCLUSIVE


@pytest.mark.parametrize("status, low, high, required, code", [
    (SearchStatus.BRACKETED, 9.5, 10.0, None, ExitCode.PASS),
    (SearchStatus.BRACKETED, 9.5, 10.0, 9.0, ExitCode.PASS),
    (SearchStatus.BRACKETED, 9.5, 10.0, 9.8, ExitCode.INCONCLUSIVE),  # require inside
    (SearchStatus.BELOW_REQUIREMENT, 8.0, 9.0, 12.0, ExitCode.SLO_FAILED),
    (SearchStatus.UNDECIDED, 8.0, 11.0, None, ExitCode.INCONCLUSIVE),
    (SearchStatus.ABOVE_RANGE, 16.0, None, 10.0, ExitCode.PASS),
    (SearchStatus.ABOVE_RANGE, 16.0, None, None, ExitCode.INCONCLUSIVE),
    (SearchStatus.INVALID, 8.0, 11.0, None, ExitCode.INVALID_MEASUREMENT),
])
def test_exit_codes(status: SearchStatus, low: float, high: float | None,
                    required: float | None, code: ExitCode) -> None:
    assert capacity_exit_code(status, _estimate(9.7, low, high), required) is code


def test_samples_a_percentile_needs_to_pass() -> None:
    from vllm_slo.stats.capacity_search import samples_to_pass

    assert samples_to_pass(90, 0.99) == 51 and samples_to_pass(90, 0.95) == 36
    assert samples_to_pass(99, 0.99) == 528 and samples_to_pass(99, 0.95) == 368
    # at that count, all below, the lower Clopper-Pearson bound clears the share; one fewer not
    for percentile, confidence in ((90, 0.99), (99, 0.95), (50, 0.99)):
        n = samples_to_pass(percentile, confidence)
        low = ((1 - confidence) / 2) ** (1 / n)
        assert low > percentile / 100 >= ((1 - confidence) / 2) ** (1 / (n - 1))


@pytest.mark.parametrize("overrides, fragment", [
    (["capacity.low=0.5"], "holds about 30 requests"),  # 0.5 x 30 s x 2 (lengthened)
    (["capacity.low=2", "traffic.duration=10s", "capacity.lengthen=0"], "from 51 or more"),
    (["capacity.low=4", "slo.ttft=[\"p99 < 1s\"]"], "ttft p99 < 1s can PASS"),
])
def test_a_lowest_step_too_short_to_pass_is_refused_before_any_server(
        overrides: list[str], fragment: str) -> None:
    from vllm_slo.capacity_runner import check_lowest_step

    scenario, _ = load_scenario("capacity-cpu", overrides)
    with pytest.raises(ScenarioError, match=r"raise capacity\.low or traffic\.duration") as caught:
        check_lowest_step(scenario)
    assert fragment in str(caught.value)
    check_lowest_step(load_scenario("capacity-cpu", [])[0])  # the shipped one passes
