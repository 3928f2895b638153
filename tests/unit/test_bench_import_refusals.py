"""Issue 40 items 14 and 15 (second half): a malformed `vllm bench serve` file is exit 2
naming the file, key and entry — token counts beyond the rows' int32, JSON nested past
Python's recursion limit, durations too large to be measurements (TTFT 1e300) — with no
`--out` folder left behind; a file whose latencies end before their first token says so, and
its E2E never reads below its TTFT."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from vllm_slo import cli
from vllm_slo.scenarios.errors import ExitCode

BENCH = Path(__file__).resolve().parent / "data" / "vllm_bench"
SOURCE = BENCH / "chat-rate8-trial1.json"


def run_main(arguments: list[str]) -> tuple[int, str, str]:
    said: list[str] = []
    complained: list[str] = []
    code = cli.main(arguments, said.append, complained.append)
    return code, "\n".join(said), "\n".join(complained)


def spoiled(tmp_path: Path, key: str, index: int, value: object) -> Path:
    data = json.loads(SOURCE.read_text())
    data[key] = list(data[key])
    data[key][index] = value
    path = tmp_path / f"spoiled-{key}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(("key", "value", "says"), [
    ("output_lens", 2**40, "key 'output_lens', entry 3: 1099511627776 is not a token count "
                           "(0 to 2,147,483,647)"),
    ("input_lens", 2**31, "key 'input_lens', entry 3: 2147483648 is not a token count"),
    ("ttfts", 1e300, "key 'ttfts', entry 3: 1e+300 is not a non-negative number of seconds "
                     "below 10,000,000"),
    ("latencies", 1e12, "key 'latencies', entry 3: 1000000000000.0 is not a non-negative"),
    ("itls", [0.01, 1e300], "key 'itls', entry 3: [0.01, 1e+300] is not a list of gaps"),
])
@pytest.mark.parametrize("out", ["given", "default"])
def test_values_no_row_can_hold_are_exit_2_and_leave_no_folder(
        tmp_path: Path, key: str, value: object, says: str, out: str) -> None:
    path = spoiled(tmp_path, key, 3, value)
    runs = tmp_path / "runs"
    target = ["--out", str(tmp_path / "imported")] if out == "given" else []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning on the way
        code, said, complained = run_main(["--runs-dir", str(runs), "import", "vllm-bench",
                                           str(path), *target])
    assert code == ExitCode.USAGE_ERROR, (said, complained)
    assert complained == f"vllm-slo: error: {path}: {says}" or says in complained
    assert not (tmp_path / "imported").exists() and not runs.exists()


def test_json_nested_past_the_recursion_limit_is_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    code, _, complained = run_main(["import", "vllm-bench", str(path), "--out",
                                    str(tmp_path / "imported")])
    assert code == ExitCode.USAGE_ERROR
    assert complained == (f"vllm-slo: error: {path}: JSON nested too deeply to read (a vllm "
                          f"bench result nests 3 levels); expected a `vllm bench serve "
                          f"--save-result` file")
    assert not (tmp_path / "imported").exists()


def test_a_failure_after_the_folder_was_made_removes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever fails once writing began (here: the rows' table), no folder is left; an
    empty --out folder given by the user is kept, empty."""
    from vllm_slo.vllm_bench import run_folder

    def broken(*args: object, **kwargs: object) -> None:
        import pyarrow as pa

        raise pa.ArrowInvalid("Integer value 4294967296 not in range: -2147483648 to "
                              "2147483647")

    monkeypatch.setattr(run_folder, "build_rows", broken)
    created = tmp_path / "imported"
    code, _, complained = run_main(["import", "vllm-bench", str(SOURCE), "--out",
                                    str(created)])
    assert code == ExitCode.USAGE_ERROR
    assert complained.startswith(f"vllm-slo: error: {SOURCE}: a value does not fit the run's "
                                 "rows (ArrowInvalid: Integer value 4294967296")
    assert not created.exists()
    given = tmp_path / "given"
    given.mkdir()
    code, _, _ = run_main(["import", "vllm-bench", str(SOURCE), str(SOURCE), "--out",
                           str(given)])
    assert code == ExitCode.USAGE_ERROR
    assert given.is_dir() and list(given.iterdir()) == []


def test_latencies_below_ttft_are_said_and_never_make_e2e_below_ttft(tmp_path: Path) -> None:
    data = json.loads(SOURCE.read_text())
    early = [3, 10, 11]
    for index in early:
        data["latencies"][index] = data["ttfts"][index] * 0.5
    path = tmp_path / "early.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "imported"
    code, said, complained = run_main(["import", "vllm-bench", str(path), "--out", str(out)])
    assert code == ExitCode.PASS, complained
    assert ("warning: 3 request(s) end before their first token in the file (latency < ttft, "
            "e.g. request 3): their E2E is left out") in said
    rows = pq.read_table(out / "samples.parquet").to_pydict()
    by_request = dict(zip(rows["request_id"], zip(rows["ttft_s"], rows["e2e_s"], strict=True),
                          strict=True))
    assert all(by_request[str(i)][1] is None for i in early)
    assert all(e2e >= ttft for ttft, e2e in by_request.values() if e2e is not None)
    summary = json.loads((out / "summary.json").read_text())
    metrics = summary["metrics"]
    assert metrics["e2e"]["count"] == 57 and metrics["ttft"]["count"] == 60
    assert metrics["e2e"]["percentiles"]["p50"]["value"] >= (
        metrics["ttft"]["percentiles"]["p50"]["value"])
    assert np.isfinite(metrics["e2e"]["percentiles"]["p50"]["value"])
