"""The run's human-readable pages leave out the latency rows that cannot apply to it (issue 51
item 6): `ttft_answer` and `reasoning_time` for a model that does not reason, `itl_token`
without per-chunk usage; summary.json keeps every key; a reasoning run keeps them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.support import synthetic as synthesis
from vllm_slo.reports.render.applicable import inapplicable_metrics, shown_latency_metrics
from vllm_slo.reports.run_report import RenderedRun, load_run, render_run
from vllm_slo.run_folder.samples_format import TOKENS_TYPE
from vllm_slo.scenarios.metrics import LATENCY_METRICS, METRICS

LEFT_OUT = ("itl_token", "ttft_answer", "reasoning_time")
SLOS = {"ttft": ["p95 < 500ms"], "error_rate": "< 5%"}


def reasoning_rows(table: pa.Table) -> pa.Table:
    """`table` as a reasoning model with per-chunk usage streams it: every other request
    reasons for 3 chunks (its answer 200 ms after its first chunk), every chunk 1 token."""
    n = table.num_rows
    reasons = np.arange(n) % 2 == 0
    ttft = table.column("ttft_s").to_numpy(zero_copy_only=False)
    failed = np.isnan(ttft)
    offsets = table.column("chunk_offsets_s").combine_chunks()
    lengths = np.diff(offsets.offsets.to_numpy())
    tokens = pa.ListArray.from_arrays(offsets.offsets,
                                      pa.array(np.ones(lengths.sum(), dtype=np.int16),
                                               TOKENS_TYPE))
    columns: dict[str, Any] = {
        "chunk_tokens": tokens,
        "ttft_answer_s": pa.array(ttft + np.where(reasons, 0.2, 0.0), mask=failed),
        "reasoning_chunks": pa.array(np.where(reasons, 3, 0).astype(np.int32)),
        "reasoning_tokens": pa.array(np.where(reasons, 3, 0).astype(np.int32)),
    }
    for name, column in columns.items():
        index = table.schema.get_field_index(name)
        table = table.set_column(index, table.schema.field(index), column)
    return table


def run(tmp_path: Path, name: str, *, reasoning: bool,
        slo: dict[str, Any] | None = None) -> Path:
    table = synthesis.synthetic_table(160, chunks=8, warmup_s=2.0, duration_s=20.0, seed=3)
    if reasoning:
        table = reasoning_rows(table)
    scenario = synthesis.scenario_document(name, duration_s=20.0, warmup_s=2.0,
                                           slo=SLOS if slo is None else slo)
    return synthesis.write_run_folder(tmp_path / name, table, scenario, via_writer=False)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> RenderedRun:
    return render_run(run(tmp_path_factory.mktemp("plain"), "plain", reasoning=False))


@pytest.fixture(scope="module")
def reasoning(tmp_path_factory: pytest.TempPathFactory) -> RenderedRun:
    return render_run(run(tmp_path_factory.mktemp("reasoning"), "reasoning", reasoning=True))


def text_rows(rendered: RenderedRun) -> set[str]:
    """The metric names the terminal table has a row of."""
    return {line.split()[0] for line in rendered.text.splitlines()
            if line.split() and line.split()[0] in LATENCY_METRICS}


def markdown_rows(rendered: RenderedRun) -> set[str]:
    return {name for name in LATENCY_METRICS
            if f"| {name} |" in rendered.markdown_path.read_text()}


def html_titles(rendered: RenderedRun) -> set[str]:
    """The metric rows and ECDF panels of report.html, by their titles."""
    html = rendered.report_path.read_text()
    return {name for name in LATENCY_METRICS if f"<td>{METRICS[name].title}</td>" in html
            or json.dumps(METRICS[name].title) in html}


def test_a_model_that_does_not_reason_shows_no_reasoning_rows(plain: RenderedRun) -> None:
    kept = set(LATENCY_METRICS) - set(LEFT_OUT)
    assert text_rows(plain) == markdown_rows(plain) == html_titles(plain) == kept
    # the samples the rows would have shown: a copy of ttft, and nothing
    metrics = plain.summary["metrics"]
    assert metrics["ttft_answer"]["percentiles"] == metrics["ttft"]["percentiles"]
    assert metrics["reasoning_time"]["count"] == metrics["itl_token"]["count"] == 0
    # summary.json keeps every key for machine readers
    assert list(metrics) == list(LATENCY_METRICS)


def test_a_reasoning_run_keeps_its_rows(reasoning: RenderedRun) -> None:
    everything = set(LATENCY_METRICS)
    assert text_rows(reasoning) == markdown_rows(reasoning) == html_titles(reasoning) \
        == everything
    metrics = reasoning.summary["metrics"]
    assert metrics["reasoning_time"]["count"] > 0 and metrics["itl_token"]["count"] > 0
    line = next(x for x in reasoning.text.splitlines() if x.startswith("reasoning_time"))
    assert "200.0ms" in line  # every reasoning request answered 200 ms after its first chunk


def test_a_row_an_slo_names_is_shown_whatever_the_run(tmp_path: Path) -> None:
    rendered = render_run(run(tmp_path, "asked", reasoning=False,
                              slo={"reasoning_time": ["p90 < 2s"]}))
    assert text_rows(rendered) == markdown_rows(rendered) == html_titles(rendered) \
        == set(LATENCY_METRICS) - {"itl_token", "ttft_answer"}  # only the row it names


@pytest.mark.parametrize("reasons", [False, True], ids=["plain", "reasoning"])
def test_without_stream_facts_the_samples_decide(tmp_path: Path, reasons: bool) -> None:
    """A document without stream facts (summary.json before them): a row applies when it
    has samples."""
    document = load_run(run(tmp_path, "facts", reasoning=reasons)).document
    without = dataclasses.replace(document, stream=None)
    assert inapplicable_metrics(without) == inapplicable_metrics(document) \
        == (frozenset() if reasons else frozenset(LEFT_OUT))
    assert shown_latency_metrics(without) == tuple(
        name for name in LATENCY_METRICS if reasons or name not in LEFT_OUT)
