"""`capacity.load: traffic.trace.speedup`: the capacity of a replayed trace in multiples of its
own speed — the spec and its unit, which traffic it may vary, each step's scenario, the speedup a
step achieved, and a trace too short for a step (refused before the search, or the step
INVALID)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from vllm_slo.analysis.capacity import (
    TRACE_SHORT_NAME,
    Stability,
    capacity_step,
    trace_shortfall,
    trace_step,
)
from vllm_slo.analysis.summary import RunSummaryDocument
from vllm_slo.analysis.trace_fidelity import FidelityRow, TraceFidelity
from vllm_slo.capacity_runner import _step_name, check_lowest_step, check_trace_span, step_scenario
from vllm_slo.scenarios.capacity_spec import SPEEDUP_KEY, SPEEDUP_UNIT, CapacitySpec
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.loader import load_scenario, resolve_variants
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.profile_specs.trace import TraceSpec
from vllm_slo.stats.capacity_search import NextStep

SEARCH = f"capacity={{load: {SPEEDUP_KEY}, low: 1, high: 4}}"


def write_trace(path: Path, seconds: float, every_s: float = 0.5) -> Path:
    """A Mooncake-format trace: one record every `every_s` over `seconds` of trace time."""
    rows = [{"timestamp": round(i * every_s * 1000), "input_length": 40, "output_length": 4,
             "hash_ids": [1]} for i in range(int(seconds / every_s))]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def trace_scenario(path: Path, *overrides: str) -> Scenario:
    scenario, _ = load_scenario("trace-replay", [
        SEARCH, f"traffic.trace.path={path}", "traffic.warmup=2s", "traffic.duration=10s",
        *overrides])
    return scenario


@pytest.mark.parametrize("require", [">= 2x", ">=2 x", ">= 2×", ">= 2 × trace", ">= 2x trace",
                                     ">= 2"])
def test_the_speedup_is_counted_in_times_the_trace(require: str) -> None:
    spec = CapacitySpec(load=SPEEDUP_KEY, low=0.5, high=8, require=require)
    assert spec.unit == SPEEDUP_UNIT == "× trace"
    assert not spec.whole_steps  # 1.5× is a speed like any other
    assert spec.required == 2.0


def test_a_speedup_requirement_in_another_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="counted in × trace, not req/s"):
        CapacitySpec(load=SPEEDUP_KEY, low=1, high=8, require=">= 2 req/s")
    with pytest.raises(ValueError, match="counted in req/s, not x"):
        CapacitySpec(low=1, high=8, require=">= 2x")


@pytest.mark.parametrize("name, overrides, message", [
    ("capacity-cpu", [f"capacity.load={SPEEDUP_KEY}"],
     r"a trace replay's speedup, but traffic\.profile is 'chat' \(use profile: trace"),
    ("trace-replay", ["capacity={load: traffic.arrival.rate, low: 1, high: 4}"],
     r"no rate or users to vary \(use capacity\.load: traffic\.trace\.speedup"),
    ("trace-replay", ["capacity={load: traffic.arrival.users, low: 1, high: 4}"],
     r"no rate or users to vary \(use capacity\.load: traffic\.trace\.speedup"),
])
def test_the_speedup_goes_with_a_trace_and_only_it(name: str, overrides: list[str],
                                                   message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load_scenario(name, overrides)


def test_a_step_sets_the_speedup_and_lengthens_the_window(tmp_path: Path) -> None:
    scenario = trace_scenario(write_trace(tmp_path / "t.jsonl", 60))
    assert scenario.capacity is not None
    arm = resolve_variants(scenario)[""]
    step = step_scenario(arm, scenario.capacity, NextStep(2.5, 1))
    assert step.traffic.settings(TraceSpec).speedup == 2.5
    assert step.traffic.duration_s == 20.0 and step.traffic.warmup_s == 2.0
    assert step.traffic.settings(TraceSpec).path == str(tmp_path / "t.jsonl")  # the rest kept
    assert _step_name(3, NextStep(2.5, 1), scenario.capacity) == "step-03-2.5x-x2"


def _fidelity(scheduled: float | None, sent: float | None) -> TraceFidelity:
    return TraceFidelity(
        format="mooncake", file="t.jsonl", speedup=2.0, rate_scale=1.0, implied_hit_rate=None,
        achieved_hit_rate=None, tolerance=0.05, hits_tokens=None, queries_tokens=None,
        verdict="unverified", reason="", rows=(FidelityRow("requests", scheduled, sent),))


def _plan(span_s: float, stopped: str) -> dict[str, object]:
    return {"trace": {"stopped_at": stopped, "trace": {"requests": 100, "span_s": span_s}}}


def test_the_achieved_speedup_is_the_share_of_the_schedule_sent() -> None:
    covered = _plan(200.0, "the run's traffic time (27 s)")
    achieved, short = trace_step(2.0, _fidelity(40, 38), covered, 5.0, 20.0)
    assert achieved == pytest.approx(2.0 * 38 / 40) and short is None
    assert trace_step(2.0, _fidelity(40, 40), covered, 5.0, 20.0)[0] == pytest.approx(2.0)
    # nothing scheduled, or no fidelity rows: not known, never 0
    assert trace_step(2.0, _fidelity(0, 0), covered, 5.0, 20.0)[0] is None
    assert trace_step(2.0, None, None, 5.0, 20.0) == (None, None)


def test_a_trace_that_ends_inside_the_window_makes_the_step_invalid() -> None:
    # at 4x, the 25 s to the window's end need 100 s of trace; 60 s last 15 s of the run
    achieved, short = trace_step(4.0, _fidelity(30, 30), _plan(60.0, "end of file"), 5.0, 20.0)
    assert achieved == pytest.approx(4.0)  # all it scheduled was sent: the rows can't tell
    assert short is not None and short.startswith(f"{TRACE_SHORT_NAME}: at 4× trace")
    assert "replays 100 s of trace, and the trace's window holds 60 s" in short
    assert "reading stopped at end of file" in short and "last 10.0 s send nothing" in short
    assert "at most about 2.4×" in short
    # a trace whose last record falls within max(1 s, 5% of the window) of its end is enough
    assert trace_shortfall(96.5, "end of file", 4.0, 25.0, 20.0) is None
    assert trace_shortfall(10.0, "the run's traffic time (27 s)", 4.0, 25.0, 20.0) is None


def test_a_highest_step_past_the_traces_end_is_refused_before_any_server(
        tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.jsonl", 60)
    check_trace_span(trace_scenario(path, "capacity.high=4"))  # 4 x 12 s = 48 s of 60: fine
    with pytest.raises(ScenarioError, match=r"capacity\.high = 8× trace: trace_too_short: at "
                                            r"8× trace .* replays 96 s of trace") as caught:
        check_trace_span(trace_scenario(path, "capacity.high=8"))
    assert "reading stopped at end of file" in str(caught.value)
    # the trace's own window ends it as well as the file's end does
    with pytest.raises(ScenarioError, match=r"the window's end \(30 s of the trace\)"):
        check_trace_span(trace_scenario(path, "traffic.trace.end=30s"))
    with pytest.raises(ScenarioError, match=r"the request cap \(50\)"):
        check_trace_span(trace_scenario(path, "traffic.trace.max_requests=50"))


def test_a_lowest_speedup_with_too_few_requests_is_refused(tmp_path: Path) -> None:
    # 2 records a trace second; at 1x a 10 s window lengthened once holds 40, p90 needs 51
    path = write_trace(tmp_path / "t.jsonl", 60)
    with pytest.raises(ScenarioError, match=r"capacity\.low = 1 × trace: its window holds about "
                                            r"40 requests .* only from 51 or more"):
        check_lowest_step(trace_scenario(path, 'slo.ttft=["p90 < 1s"]'))
    check_lowest_step(trace_scenario(path, 'slo.ttft=["p90 < 1s"]', "capacity.low=2"))  # 80


def _document(plan: dict[str, object], fidelity: TraceFidelity) -> RunSummaryDocument:
    """The parts of a step's summary document `capacity_step` reads (no SLO entries)."""
    interval = SimpleNamespace(value=1.0, ci_low=0.9, ci_high=1.1)
    document = SimpleNamespace(
        slos=(), scenario={"name": "t", "traffic": {"warmup": 5.0}}, window_s=20.0,
        traffic=SimpleNamespace(sent_per_s=8.0, trace=fidelity, plan=plan),
        metrics={"ttft": SimpleNamespace(percentiles={}), "e2e": SimpleNamespace(percentiles={})},
        goodput=interval, output_tokens_per_s=interval, exit_code=0, invalid_reasons=())
    return cast(RunSummaryDocument, document)


def test_a_step_that_ran_out_of_trace_is_recorded_invalid() -> None:
    stable = Stability(stable=True, ttft_quarter_medians_s=None, waiting_quarter_means=None,
                       reason=None)
    short = capacity_step(_document(_plan(60.0, "end of file"), _fidelity(30, 29)), stable, [],
                          trial=1, load=4.0, attempt=1, load_key=SPEEDUP_KEY, run_dir="s")
    assert short.outcome == "invalid" and short.achieved == pytest.approx(4.0 * 29 / 30)
    assert len(short.invalid_reasons) == 1
    assert short.invalid_reasons[0].startswith(TRACE_SHORT_NAME)
    assert short.reading().invalid_reason == short.invalid_reasons[0]
    whole = capacity_step(_document(_plan(200.0, "the run's traffic time (27 s)"),
                                    _fidelity(30, 30)), stable, [], trial=1, load=4.0,
                          attempt=1, load_key=SPEEDUP_KEY, run_dir="s")
    assert whole.outcome == "under" and whole.invalid_reasons == ()
