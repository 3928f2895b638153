"""Golden files: a fixed, deterministic sample set rendered by the real pipeline must produce
exactly the stored summary.json (scenario echo and start time left out), summary.md, terminal
table and junit.xml.

A deliberate change of any of them: regenerate, review the diff, commit it —

    VLLM_SLO_UPDATE_GOLDEN=1 pytest tests/unit/test_report_golden.py
"""

from __future__ import annotations

import difflib
import json
import math
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support import synthetic as synthesis
from vllm_slo.reports.run_report import render_run
from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("VLLM_SLO_UPDATE_GOLDEN") == "1"
T0 = 1_800_000_000.0
RUN_ID = "20270101T000000Z-golden"
SLOS = {"ttft": ["p50 < 100ms", "p90 < 60ms"], "itl": ["p95 < 20ms"], "tpot": ["mean < 15ms"],
        "e2e": ["p99 < 1s"], "error_rate": "< 10%", "output_throughput": "> 50 tok/s"}


def golden_rows() -> list[dict[str, Any]]:
    """300 requests every 80 ms (4 s warm-up, 20 s measured); latencies from integer
    arithmetic only (no RNG, so the set is the same on every platform and numpy version)."""
    out = []
    for i in range(300):
        send = i * 0.08
        ok = i % 40 != 13
        ttft = 0.05 + 0.001 * ((i * 37) % 100) + (0.2 if i % 50 == 7 else 0.0)
        gaps = [0.010 + 0.0005 * ((i * 7 + j * 3) % 10) for j in range(5)]
        offsets = [ttft]
        for gap in gaps:
            offsets.append(offsets[-1] + gap)
        error = ("HTTP 503: Service Unavailable" if i % 80 == 13
                 else "SSE error event: {'code': 503}")
        out.append({
            "request_id": f"g{i:03d}", "process_id": 1, "user_id": i % 8,
            "conversation_id": i // 3, "turn": i % 3,
            "phase": "warmup" if send < 4.0 else "measure", "endpoint": "chat",
            "intended_send_unix_s": T0 + send, "send_unix_s": T0 + send + 0.0002 * (i % 5),
            "send_lag_s": 0.0002 * (i % 5), "ttft_s": ttft if ok else None,
            "e2e_s": offsets[-1] + 0.001 if ok else 0.02, "chunk_offsets_s": offsets if ok else [],
            "output_tokens": (6 + (i % 4 == 0)) if ok else None, "prompt_tokens": 100,
            "max_tokens": 7, "status_code": 200 if ok or i % 80 != 13 else 503, "ok": ok,
            "error": None if ok else error, "finish_reason": "length" if ok else None})
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory):
    table = pa.Table.from_pylist(golden_rows(), schema=SAMPLE_SCHEMA)
    scenario = synthesis.scenario_document(
        "golden", duration_s=20.0, warmup_s=4.0, slo=SLOS,
        description="fixed synthetic sample set for golden tests")
    run_dir = synthesis.write_run_folder(tmp_path_factory.mktemp("golden") / RUN_ID, table,
                                         scenario)
    return render_run(run_dir)


def _rounded(value: Any) -> Any:
    """Floats to 10 significant digits: platform noise (FFT, BLAS) stays below that."""
    if isinstance(value, float):
        return value if value == 0 or not math.isfinite(value) else float(f"{value:.10g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def check_golden(name: str, actual: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
    assert path.is_file(), (f"no golden file {path}; create it with "
                            f"VLLM_SLO_UPDATE_GOLDEN=1 pytest tests/unit/test_report_golden.py")
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True),
                                            actual.splitlines(keepends=True),
                                            f"golden/{name}", "rendered"))
        pytest.fail(f"{name} differs from its golden file (regenerate with "
                    f"VLLM_SLO_UPDATE_GOLDEN=1 if intended):\n{diff}")


def test_summary_json_golden(rendered) -> None:
    document = json.loads(rendered.summary_path.read_text())
    # the scenario echo is the scenario model's business (its defaults change with it)
    document["scenario"] = {k: document["scenario"][k] for k in ("name", "description", "slo")}
    document["provenance"].pop("started_utc")
    check_golden("summary.json", json.dumps(_rounded(document), indent=2, sort_keys=True) + "\n")


def test_summary_md_golden(rendered) -> None:
    check_golden("summary.md", rendered.markdown_path.read_text(encoding="utf-8"))


def test_text_table_golden(rendered) -> None:
    check_golden("table.txt", rendered.text + "\n")


def test_junit_xml_golden(rendered) -> None:
    check_golden("junit.xml", rendered.junit_path.read_text(encoding="utf-8"))


def test_golden_set_exercises_every_verdict(rendered) -> None:
    verdicts = {s["verdict"] for s in rendered.summary["slos"]}
    assert verdicts == {"PASS", "FAIL", "INCONCLUSIVE"}
    assert rendered.summary["requests"]["failed"] > 0
