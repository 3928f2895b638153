"""Open-loop schedules: rates, burstiness and determinism against known distributions."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_slo.loadtests.arrivals import arrival_offsets_s, users_at
from vllm_slo.scenarios.traffic_spec import ArrivalSpec


def spec(**fields) -> ArrivalSpec:
    return ArrivalSpec.model_validate(fields)


@pytest.mark.parametrize("kind", ["poisson", "gamma", "constant"])
def test_rate_is_kept(kind: str) -> None:
    offsets = arrival_offsets_s(spec(kind=kind, rate=20.0, burstiness=0.5), 500.0, seed=1)
    # 10,000 expected arrivals: Poisson count sd 100 (1%); gamma(0.5) doubles the variance
    assert abs(offsets.size - 10_000) < 400
    assert np.all(np.diff(offsets) >= 0) and offsets[0] >= 0 and offsets[-1] < 500.0


def test_burstiness_sets_the_gap_cv() -> None:
    for burstiness in (0.25, 1.0, 4.0):
        gaps = np.diff(arrival_offsets_s(spec(kind="gamma", rate=50.0, burstiness=burstiness),
                                         400.0, seed=2))
        cv = gaps.std() / gaps.mean()
        assert cv == pytest.approx(1.0 / np.sqrt(burstiness), rel=0.05)
        assert gaps.mean() == pytest.approx(1 / 50.0, rel=0.03)


def test_constant_is_exact() -> None:
    offsets = arrival_offsets_s(spec(kind="constant", rate=4.0), 10.0, seed=0)
    assert list(offsets) == pytest.approx([i / 4 for i in range(40)])


def test_same_seed_same_schedule_and_prefix_property() -> None:
    a = arrival_offsets_s(spec(kind="poisson", rate=5.0), 60.0, seed=7)
    b = arrival_offsets_s(spec(kind="poisson", rate=5.0), 60.0, seed=7)
    c = arrival_offsets_s(spec(kind="poisson", rate=5.0), 60.0, seed=8)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[:10], c[:10])


def test_open_loop_stages() -> None:
    arrival = spec(kind="stages", stages=[{"duration": "100s", "rate": 2},
                                          {"duration": "100s", "rate": 10}])
    offsets = arrival_offsets_s(arrival, 250.0, seed=3)
    first = np.count_nonzero(offsets < 100)
    second = np.count_nonzero(offsets >= 100)  # the last stage runs to the end (150 s)
    assert abs(first - 200) < 60 and abs(second - 1500) < 150


def test_closed_loop_stage_users_and_errors() -> None:
    arrival = spec(kind="stages", stages=[{"duration": "10s", "users": 2},
                                          {"duration": "10s", "users": 6}])
    assert [users_at(arrival, t) for t in (0, 9.9, 10, 19, 500)] == [2, 2, 6, 6, 6]
    with pytest.raises(ValueError, match="closed loop"):
        arrival_offsets_s(arrival, 10.0, seed=0)
