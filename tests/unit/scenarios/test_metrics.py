"""The metric registry (vllm_slo/scenarios/metrics.py): one definition per metric that every
consumer reads, and one spelling per cell."""

from __future__ import annotations

import numpy as np
import pytest

from vllm_slo.analysis.run_metrics import RunSeries, summarize
from vllm_slo.analysis.sessions import SessionSeries
from vllm_slo.analysis.trials import cell_value
from vllm_slo.analysis.verdicts import observed_for
from vllm_slo.analysis.wording import format_cell_value
from vllm_slo.scenarios.experiment_spec import CompareSpec
from vllm_slo.scenarios.metrics import (
    BUILT_IN_METRICS,
    LATENCY_METRICS,
    METRICS,
    PER_REQUEST_LATENCY_METRICS,
    RATE_METRICS,
    MetricKind,
    lower_is_better,
    parse_cell,
)
from vllm_slo.scenarios.slo import parse_rule
from vllm_slo.scenarios.slo_spec import SloRules

EXAMPLE_RULES = {"ttft": "p95 < 2s", "itl": "mean <= 50ms", "tpot": "p50 < 20ms",
                 "e2e": "p99.9 < 1h", "itl_token": "p99 < 40ms", "ttft_answer": "p90 < 2s",
                 "reasoning_time": "mean < 1s", "error_rate": "< 1%",
                 "output_throughput": "> 100 tok/s", "request_throughput": ">= 2 req/s",
                 "session_e2e": "p90 < 60s"}


def test_the_slo_block_takes_the_registered_metrics() -> None:
    """The `slo:` keys are the registry's (no field list to hold equal to it): every metric
    takes its rules by its kind's grammar, and the block writes back as it was written."""
    assert list(SloRules.registered_keys()) == list(METRICS)
    assert set(EXAMPLE_RULES) == set(METRICS)
    written = {metric: [text] if METRICS[metric].kind is MetricKind.LATENCY else text
               for metric, text in EXAMPLE_RULES.items()}
    rules = SloRules.model_validate(written)
    assert [rule.metric for rule in rules.own_rules()] == list(METRICS)
    assert rules.model_dump() == written
    assert SloRules().model_dump() == {  # every built-in written back, a registered one if set
        metric: [] if METRICS[metric].kind is MetricKind.LATENCY else None
        for metric in BUILT_IN_METRICS}


def test_kinds_partition_the_registry() -> None:
    assert LATENCY_METRICS == ("ttft", "itl", "tpot", "e2e", "itl_token", "ttft_answer",
                               "reasoning_time")
    assert RATE_METRICS == ("output_throughput", "request_throughput")
    # itl is per chunk gap, itl_token per token
    assert PER_REQUEST_LATENCY_METRICS == ("ttft", "tpot", "e2e", "ttft_answer",
                                           "reasoning_time")
    fractions = [name for name, m in METRICS.items() if m.kind is MetricKind.FRACTION]
    assert fractions == ["error_rate"]


@pytest.mark.parametrize("metric", list(METRICS))
def test_a_rules_own_cell_is_a_cell_compare_accepts(metric: str) -> None:
    """One spelling per cell: `error_rate.mean` (a rule's cell) was refused by compare.cells,
    which took only `error_rate.rate`."""
    rule = parse_rule(metric, EXAMPLE_RULES[metric])
    assert CompareSpec(cells=[rule.cell]).cells == [rule.cell]
    assert parse_cell(rule.cell).metric.name == metric


@pytest.mark.parametrize(("cell", "message"), [
    ("error_rate.mean", "error_rate takes rate, got 'mean' (e.g. error_rate.rate)"),
    ("output_throughput.p50", "output_throughput takes mean, got 'p50'"),
    ("ttft.p100", "strictly between 0 and 100, got 'p100'"),
    ("ttft.median", "ttft takes pNN (0 < NN < 100) or mean, got 'median'"),
    ("goodput.mean", "expected metric.statistic: ttft with pNN (0 < NN < 100) or mean;"),
    ("ttft", "expected metric.statistic"),
])
def test_a_bad_cell_says_the_grammar(cell: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_cell(cell)
    assert message in str(raised.value)


def test_cells_of_a_part_and_their_percentile() -> None:
    cell = parse_cell("chat:itl.p99.9")
    assert (cell.part, cell.metric.name, cell.statistic, cell.percentile) == (
        "chat", "itl", "p99.9", 99.9)
    assert cell.text == "chat:itl.p99.9" and cell.base == "itl.p99.9"
    assert parse_cell("e2e.mean").percentile is None


def test_direction_and_formatting_come_from_the_entry() -> None:
    assert lower_is_better("ttft.p50") and lower_is_better("chat:error_rate.rate")
    assert not lower_is_better("output_throughput.mean")
    assert format_cell_value("ttft.p50", 0.0123) == "12.3ms"
    assert format_cell_value("error_rate.rate", 0.004) == "0.40%"
    assert format_cell_value("output_throughput.mean", 1234.56) == "1,234.6 tok/s"
    assert format_cell_value("chat:request_throughput.mean", 2.25) == "2.2 req/s"


def _series() -> RunSeries:
    latencies = np.linspace(0.1, 1.0, 10)
    return RunSeries(
        ttft_s=latencies, itl_s=latencies / 10, tpot_s=latencies / 10, e2e_s=latencies * 2,
        send_lag_s=np.zeros(10), window_start_unix_s=0.0, window_s=5.0, requests=12,
        failed=2, output_tokens_per_bin=np.array([100.0, 120.0, 110.0, 90.0, 80.0]),
        completions_per_bin=np.array([2.0, 2.0, 3.0, 2.0, 1.0]), itl_token_s=latencies / 20,
        ttft_answer_s=latencies * 1.5, reasoning_time_s=latencies / 2,
        sessions=SessionSeries(latencies * 30, np.full(10, 4), np.arange(10.0), 10, 0, 0))


@pytest.mark.parametrize("metric", list(METRICS))
def test_every_metric_has_a_trial_value_and_an_observed_estimate(metric: str) -> None:
    """The entry's series and summary fields exist: a trial's cell value and an SLO's observed
    estimate are read through them, for every registered metric."""
    series = _series()
    summary = summarize(series)
    rule = parse_rule(metric, EXAMPLE_RULES[metric])
    value = cell_value(series, rule.cell)
    observed = observed_for(rule, series, summary)
    assert value is not None and observed.value is not None
    expected = {"output_throughput": 100.0, "request_throughput": 2.0,
                "error_rate": 2 / 12}.get(metric)
    if expected is not None:  # a rate's mean over the bins, the failed share
        assert value == pytest.approx(expected) and observed.value == pytest.approx(expected)
