"""benchmarks/h200_claims_table.py: the committed H200 claims decided again from their trials'
summary.json files (no raw samples are committed) must agree with what each experiment
decided from the rows on the device, part cells of a mix included."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "results" / "h200" / "runs"
CHUNKED = RUNS / "20261204T143659Z-h200-chunked-prefill-ab"  # a mix: part cells
TUNED = RUNS / "20261204T144929Z-h200-tuned-vs-defaults-ab"  # interrupted after its 1st look


def _table() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "h200_claims_table", REPO / "benchmarks" / "h200_claims_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _source(folder: Path) -> dict[str, Any]:
    return {"claim": "c", "statement": "s", "folder": str(folder.relative_to(REPO)),
            "model": "m", "model_parameters": 6738415616, "vllm_version": "0.26.0",
            "gpu_minutes": 1.0, "command": "x"}


def _device_decisions(folder: Path) -> dict[str, dict[str, Any]]:
    """What the experiment itself decided on the device, from the rows (its summary.json)."""
    document = json.loads((folder / "summary.json").read_text())
    (comparison,) = document["comparisons"]
    return {cell["cell"]: cell["decision"] for cell in comparison["cells"]}


@pytest.mark.parametrize("folder", [CHUNKED, TUNED], ids=["mix-parts", "interrupted"])
def test_decisions_from_summaries_match_the_experiment_on_the_device(folder: Path) -> None:
    table = _table()
    row = table.claim_row(_source(folder), REPO)
    device = _device_decisions(folder)
    assert [c["cell"] for c in row["cells"]] == list(device)
    for cell in row["cells"]:
        decided = device[cell["cell"]]
        assert cell["verdict"] == decided["decision"]
        assert cell["ratio"] == pytest.approx(decided["ratio"]["value"], rel=1e-9)
        assert cell["ratio_ci"] == pytest.approx(
            [decided["ratio"]["ci_low"], decided["ratio"]["ci_high"]], rel=1e-9)


def test_part_cells_come_from_the_parts_block() -> None:
    table = _table()
    document = json.loads((CHUNKED / "trials" / "001-unchunked-1" / "summary.json").read_text())
    chat = document["by_profile"]["chat"]
    assert table.summary_cell_value(document, "chat:itl.p99") == (
        chat["metrics"]["itl"]["percentiles"]["p99"]["value"])
    assert table.summary_cell_value(document, "long-doc:output_throughput.mean") == (
        document["by_profile"]["long-doc"]["output_tokens_per_s"]["value"])
    assert table.summary_cell_value(document, "itl.p99") != table.summary_cell_value(
        document, "chat:itl.p99")  # the whole run's cell is not the part's
    with pytest.raises(ValueError, match=r"no by_profile\.sharegpt"):
        table.summary_cell_value(document, "sharegpt:ttft.p50")
    with pytest.raises(ValueError, match="needs the run's samples"):
        table.summary_cell_value(document, "chat:error_rate.rate")
    with pytest.raises(ValueError, match="no by_adapter"):
        table.summary_cell_value(document, "adapter:sql:ttft.p50")


def test_an_interrupted_experiment_says_so_on_its_undecided_cells() -> None:
    table = _table()
    row = table.claim_row(_source(TUNED), REPO)
    assert row["design"]["interrupted"] is True
    assert table.claim_row(_source(CHUNKED), REPO)["design"]["interrupted"] is False
    lines = table.markdown([row]).splitlines()[2:]
    undecided = [line for line in lines if "**undecided**" in line]
    assert undecided and all("interrupted" in line for line in undecided)
    assert all("interrupted" not in line for line in lines if "**equivalent**" in line)
    # the interrupted 4th trial counts as missing, not as a value
    tuned = next(c for c in row["cells"] if c["cell"] == "output_throughput.mean")
    assert len(tuned["candidate_trials"]) == 3 and not any(
        math.isnan(v) for v in tuned["candidate_trials"])


def test_the_experiments_own_warnings_travel_with_its_row() -> None:
    row = _table().claim_row(_source(TUNED), REPO)
    assert any(w.startswith("the trials ran on 2 different sets of GPUs")
               for w in row["warnings"])
    assert "variant tuned: 1 invalid trial(s) excluded" in row["warnings"]


SEQS = RUNS / "20261203T173703Z-h200-max-num-seqs-ab"  # seqs64: 1,023 requests in every trial
PREFIX_7B = REPO / "results" / "h200-7b-startup-2026-12-03" / "prefix-caching-ab"
PREFIX_1B = RUNS / "20261202T054706Z-h200-prefix-caching-ab"  # ran under the rank test


def test_a_quantised_throughput_cell_is_decided_over_its_phase_bias() -> None:
    table = _table()
    row = table.claim_row(_source(SEQS), REPO)
    cell = next(c for c in row["cells"] if c["cell"] == "output_throughput.mean")
    assert cell["quantised"] and "all 4 trials completed 1023 requests" in cell["quantised"][0]
    low, high = cell["ratio_ci_phase_box"]
    assert low < 1.0 < high and low < cell["ratio_ci"][0] and high > cell["ratio_ci"][1]
    assert cell["verdict"] == "undecided" and cell["verdict_without_box"] == "changed"
    e2e = next(c for c in row["cells"] if c["cell"] == "e2e.p50")
    assert "quantised" not in e2e and e2e["verdict"] == "changed"  # a latency: never quantised
    line = next(x for x in table.markdown([row]).splitlines() if "output_throughput" in x)
    assert "quantised (closed-loop waves)" in line and "changed without it" in line


def test_trials_with_different_counts_are_not_quantised() -> None:
    row = _table().claim_row(_source(PREFIX_7B), REPO)
    assert all("quantised" not in c for c in row["cells"])


def test_a_row_says_which_test_the_run_used_and_drops_the_other_tests_warnings() -> None:
    table = _table()
    old = table.claim_row(_source(PREFIX_1B), REPO)
    assert old["test_run_with"] == "mann-whitney" and old["design"]["test"] == "welch-log"
    assert old["test_changed_after_data"] is True
    assert all("decided here with welch-log" in line
               for line in table.markdown([old]).splitlines()[2:])
    new = table.claim_row(_source(PREFIX_7B), REPO)
    assert new["test_changed_after_data"] is False
    # its summary.json carried the rank test's "can never reach" note beside Welch decisions
    summary = json.loads((PREFIX_7B / "summary.json").read_text())
    assert any("can never reach" in w for w in summary["warnings"])
    assert not any("can never reach" in w for w in new["warnings"])


def test_each_cells_p_is_held_to_its_own_level() -> None:
    row = _table().claim_row(_source(SEQS), REPO)
    for cell in row["cells"]:
        assert cell["p_is_holm_adjusted"] is False
        if cell.get("verdict_without_box", cell["verdict"]) == "changed":
            assert cell["p"] < cell["level"]


def test_a_capacity_folder_is_a_claim_of_its_second_variant_over_its_first(
        tmp_path: Path) -> None:
    """base brackets [9.5, 10.4] req/s, chunked [11.4, 12.48] (1.2× as much): the row's ratio
    interval is [11.4 / 10.4, 12.48 / 9.5] at 90% (two 95% searches), "higher", and below a
    claimed 2× (its upper end is 1.31)."""
    from tests.unit.test_capacity_report import write_variants

    write_variants(tmp_path / "cap")
    source = {**_source(CHUNKED), "folder": "cap", "claimed_ratio": 2.0}
    table = _table()
    row = table.claim_row(source, tmp_path)
    assert row["compared"] == "chunked vs base"
    (cell,) = row["cells"]
    assert cell["cell"] == "capacity (req/s)" and cell["verdict"] == "higher"
    assert cell["ratio"] == pytest.approx(1.2)
    assert cell["ratio_ci"] == pytest.approx([11.4 / 10.4, 12.48 / 9.5])
    assert cell["ratio_confidence"] == pytest.approx(0.90)
    assert cell["versus_claim"] == "below" and cell["warnings"] == []
    intervals = [bound for side in cell["searches"] for bound in side["interval"]]
    assert intervals == pytest.approx([9.5, 10.4, 11.4, 12.48])
    line = table.markdown([row]).splitlines()[-1]
    assert "capacity (req/s)" in line and "+20.0% [+9.6%, +31.4%] (90.0%)" in line, line
