"""A damaged run folder is read as far as its data allow (issue 25): the run report
(`render_run`, what `vllm-slo report` renders) reads the intact samples/*.arrows when
samples.parquet is truncated or corrupt and says so; a damaged provenance.json is left out
with a warning; a damaged run_status.json makes the run invalid (exit 4: it may have said
"interrupted"); a damaged scenario.yaml is refused with exit 2 naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support import synthetic as synthesis
from vllm_slo.reports.run_report import render_run
from vllm_slo.reports.samples import read_samples
from vllm_slo.scenarios.errors import ExitCode, ScenarioError

SLOS = {"ttft": ["p50 < 1h"], "error_rate": "< 50%"}


def make_run(tmp_path: Path, n: int = 400) -> Path:
    table = synthesis.synthetic_table(n, chunks=8, warmup_s=5.0, duration_s=30.0,
                                      failure_fraction=0.0, seed=3)
    scenario = synthesis.scenario_document("damaged", duration_s=30.0, warmup_s=5.0, slo=SLOS)
    return synthesis.write_run_folder(tmp_path / "20270115T120000Z-damaged", table, scenario,
                                      via_writer=False)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return make_run(tmp_path)


def _truncate(path: Path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_samples_parquet_is_read_from_the_streams_and_said(run_dir: Path,
                                                                     damage: str) -> None:
    parquet = run_dir / "samples.parquet"
    intact = render_run(run_dir).summary
    rows = pq.read_table(parquet).num_rows
    if damage == "truncated":
        _truncate(parquet, 0.6)
    elif damage == "garbage":
        parquet.write_bytes(b"PAR1" + bytes(range(256)) * 40 + b"PAR1")
    else:
        parquet.write_bytes(b"")
    damaged_bytes = parquet.read_bytes()
    rendered = render_run(run_dir)
    assert rendered.summary["exit_code"] == intact["exit_code"] == ExitCode.PASS
    assert rendered.summary["requests"] == intact["requests"]
    note = next(w for w in rendered.summary["warnings"] if w.startswith("samples.parquet is"))
    assert note.startswith("samples.parquet is damaged (")
    assert note.endswith(f"the {rows} rows of samples/*.arrows (1 file(s)) were read instead")
    assert note in rendered.text  # on the terminal too
    assert parquet.read_bytes() == damaged_bytes  # the damaged file is evidence: left as it is


def test_a_damaged_samples_parquet_without_streams_is_named(run_dir: Path) -> None:
    for stream in (run_dir / "samples").glob("*.arrows"):
        stream.unlink()
    _truncate(run_dir / "samples.parquet", 0.5)
    with pytest.raises(ScenarioError) as caught:
        read_samples(run_dir)
    assert caught.value.exit_code == ExitCode.USAGE_ERROR
    assert str(caught.value).startswith(f"{run_dir / 'samples.parquet'} is damaged (")
    assert str(caught.value).endswith("and there is no samples/*.arrows to read the rows from")


@pytest.mark.parametrize(("text", "expect"), [
    ("name: [unclosed\n", "scenario.yaml: not valid YAML"),
    ("- a\n- b\n", "scenario.yaml: damaged: expected the scenario's mapping, got list"),
    ("name: x\ntraffic: {duration: soon}\n",
     "scenario.yaml: invalid scenario (1 problem(s))\n  traffic.duration = 'soon'"),
    (b"\xff\xfe\x00garbage", "scenario.yaml: not a text file (byte 0xff at offset 0"),
    ("", "scenario.yaml: damaged: expected the scenario's mapping, got NoneType"),
], ids=["yaml", "list", "invalid", "binary", "empty"])
def test_a_damaged_scenario_yaml_is_exit_2_naming_it(run_dir: Path, text: str | bytes,
                                                     expect: str) -> None:
    path = run_dir / "scenario.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(ScenarioError) as caught:
        render_run(run_dir)
    assert caught.value.exit_code == ExitCode.USAGE_ERROR
    assert f"{run_dir}/{expect}" in str(caught.value), str(caught.value)


@pytest.mark.parametrize("text", ['{"interrupted": tru', '{"interrupted": "maybe"}',
                                  "\udcff"], ids=["torn", "wrong-type", "not-utf8"])
def test_a_damaged_run_status_makes_the_run_invalid_not_a_pass(run_dir: Path,
                                                               text: str) -> None:
    path = run_dir / "run_status.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    rendered = render_run(run_dir)
    assert rendered.summary["exit_code"] == ExitCode.INVALID_MEASUREMENT
    reason = next(r for r in rendered.summary["invalid_reasons"]
                  if r.startswith("run_status.json is damaged ("))
    assert reason.endswith("how the run ended is unknown")
    assert rendered.summary["requests"]["measured"] > 0  # the rows are still reported


@pytest.mark.parametrize("text", ['{"seed": 7, "host": ', '{"seed": "seven"}', "[]"],
                         ids=["torn", "wrong-type", "not-an-object"])
def test_a_damaged_provenance_is_left_out_with_a_warning(run_dir: Path, text: str) -> None:
    (run_dir / "provenance.json").write_text(text)
    rendered = render_run(run_dir)
    assert rendered.summary["exit_code"] == ExitCode.PASS
    assert any(w.startswith("provenance.json is damaged (") and w.endswith("provenance left out")
               for w in rendered.summary["warnings"]), rendered.summary["warnings"]
    assert json.loads((run_dir / "summary.json").read_text())["provenance"] == {}


def test_vllm_slo_report_falls_back_and_says_so(run_dir: Path) -> None:
    import signal

    from vllm_slo.cli import main

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _truncate(run_dir / "samples.parquet", 0.5)
    said: list[str] = []
    complained: list[str] = []
    try:
        code = main(["report", str(run_dir)], said.append, complained.append)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    assert (code, complained) == (ExitCode.PASS, [])
    assert "warning: samples.parquet is damaged (" in said[0]
    assert "the 400 rows of samples/*.arrows (1 file(s)) were read instead" in said[0]
