"""`abort_on`: when a run stops early, and the errors a malformed setting gets."""

from __future__ import annotations

import pytest

from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario


def abort_spec(*overrides: str):
    scenario, _ = load_scenario("chat", list(overrides))
    return scenario.abort_on


def test_fires_only_above_the_rate_and_after_the_minimum_sample() -> None:
    spec = abort_spec('abort_on={error_rate: "> 50%", min_requests: 10}')
    assert spec.reason(9, 9) is None  # too few finished yet
    assert spec.reason(20, 10) is None  # exactly 50% is not above it
    reason = spec.reason(20, 11)
    assert reason is not None and "55% (11 of 20 requests failed)" in reason
    inclusive = abort_spec('abort_on={error_rate: ">= 0.5", min_requests: 10}')
    assert inclusive.reason(20, 10) is not None


def test_off_by_default() -> None:
    assert abort_spec().error_rate is None and abort_spec().reason(1000, 1000) is None


@pytest.mark.parametrize(("override", "message"), [
    ("abort_on.error_rate=< 5%", "expected '> 50%'"),
    ('abort_on.error_rate="> 100%"', "between 0% and 100%"),
    ('abort_on.error_rate="> lots"', "expected '> 50%'"),
    ("abort_on.min_requests=0", "greater than or equal to 1"),
    ("abort_on.latency=> 1s", "abort_on.latency"),
])
def test_bad_settings_name_the_key(override: str, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        abort_spec(override)
