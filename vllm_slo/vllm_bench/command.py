"""`vllm-slo import vllm-bench`: saved `vllm bench serve --save-result --save-detailed` files
turned into run folders, so `report`, `compare`, `gate` and `plan` work on them.

One file (one result record) becomes one run folder; several become an experiment folder laid
out as `run` lays one out (`trials/<NNN>-<variant>-<k>/`, one complete run folder per file),
then every run and the experiment are rendered by the report code, unchanged. A file written
with `--append-result` holds several records: each is a trial.

What a result file holds (vLLM's `vllm/benchmarks/serve.py`, `--save-detailed`): per request, in
send order, `ttfts` (0.0 when no chunk arrived), `itls` (gaps between chunks after the first),
`latencies` (to the last chunk), `start_times` (perf_counter at the send), `queue_times`
(send - the moment vLLM bench's pacing released the request: waiting for `--max-concurrency`),
`input_lens`, `output_lens` (0 for failures), `errors` ("" when it succeeded); and once:
`duration`, `date` (local time, to the second, when the file was written), `backend`,
`model_id`, `num_prompts`, `request_rate` ("inf" for a burst), `burstiness`,
`max_concurrency`, plus any `--metadata KEY=VALUE`. Older vLLM versions lack `latencies`,
`start_times` and `queue_times`; every other missing key is named in the error.

Rows (`scenarios/samples_format.py`), one per request, all in the `measure` phase:
- open loop (finite `request_rate`): intended send = when the pacing released the request
  (`start_time - queue_time`), so time spent waiting for a `--max-concurrency` slot counts in
  TTFT and E2E (the suite's coordinated-omission-safe definition; vLLM bench's own TTFT starts
  at the send) and the request is marked `queued_for_slot` when every slot was busy at its
  release; `--latency-from send` keeps vLLM bench's definition instead;
- closed loop (`request_rate` inf): latencies count from the actual send, as the suite's
  closed loop does, so TTFT and E2E are the file's own numbers;
- `chunk_offsets_s` = TTFT + cumulative ITLs; E2E = `latencies` (else TTFT + sum(ITL));
- a request failed when it has an error or no first chunk; a success with 0 output tokens
  is "HTTP 200 but no content tokens", as in the suite;
- without `start_times` the send times are reconstructed (requests in file order, released at
  `i / request_rate`, or all at 0 for a burst, each waiting for one of `max_concurrency` slots
  freed by the recorded latencies) and the run's warnings say so.
Absolute times are anchored at `date - duration` (approximate: `date` has no zone and
whole seconds); every interval between requests is the file's own.
"""

from __future__ import annotations

import hashlib
import heapq
import importlib.metadata as metadata
import json
import math
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http import HTTPStatus
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from vllm_slo.experiment_runner import trial_folder_name
from vllm_slo.reports.experiment_report import render_experiment
from vllm_slo.reports.redaction import redact_secrets
from vllm_slo.reports.run_report import RenderedRun, render_run
from vllm_slo.saved_runs import CommandResult
from vllm_slo.scenarios.errors import ExitCode, ScenarioError
from vllm_slo.scenarios.loader import load_scenario
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.run_files import (
    PROVENANCE_FILE,
    SCENARIO_FILE,
    STATUS_FILE,
    TRIALS_DIR,
)
from vllm_slo.scenarios.samples_format import SAMPLE_SCHEMA, SAMPLES_FILE

SOURCE = "vllm-bench"
SCENARIO_NAME = "vllm-bench"
SOURCE_COPY = "vllm_bench_result.json"  # the imported record, kept in its run folder
LATENCY_FROM = ("arrival", "send")
CHAT_BACKENDS = ("openai-chat",)
GENERATION_BACKENDS = ("vllm", "openai", "openai-chat", "openai-responses", "openai-audio")
PER_REQUEST_KEYS = ("ttfts", "itls", "latencies", "start_times", "queue_times", "input_lens",
                    "output_lens", "errors", "generated_texts")
SETUP_KEYS = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
              "num_prompts", "request_rate", "burstiness", "max_concurrency",
              "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")
MAX_USERS = 100_000  # the scenario model's bound on users / max_in_flight
NO_CONTENT = "HTTP 200 but no content tokens"  # the suite's name for this failure
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_REASONS = {status.phrase.lower(): status.value for status in HTTPStatus}


def _suite_version() -> str | None:
    try:
        return metadata.version("vllm-slo")
    except metadata.PackageNotFoundError:
        return None


class BenchFileError(ScenarioError):
    """A result file that cannot be imported: names the file and the key (exit code 2)."""


@dataclass(frozen=True, slots=True)
class BenchRecord:
    """One result record: a file, or one record of a file written with --append-result."""

    path: Path
    index: int  # 1-based position in the file
    count: int  # records in the file
    data: dict[str, Any]
    sha256: str  # of the whole file

    @property
    def name(self) -> str:
        return str(self.path) if self.count == 1 else f"{self.path}#{self.index}"


@dataclass(frozen=True, slots=True)
class ParsedBench:
    """A record's per-request columns (file order = send order), validated."""

    n: int
    duration_s: float
    ttft: np.ndarray  # NaN where the file has none
    itls: list[list[float]] | None
    latency: np.ndarray | None
    start: np.ndarray | None
    queue: np.ndarray | None
    input_lens: list[int | None] | None
    output_lens: list[int | None]
    errors: list[str] | None
    backend: str | None
    request_rate: float  # inf for a burst
    burstiness: float
    max_concurrency: int | None
    setup: dict[str, Any]  # the file's setup keys as written
    metadata: dict[str, Any]  # --metadata KEY=VALUE and other keys vLLM bench does not write
    reported: dict[str, Any]  # vLLM bench's own aggregate numbers, for cross-checking
    missing: tuple[str, ...]  # optional per-request keys the file lacks

    @property
    def open_loop(self) -> bool:
        return math.isfinite(self.request_rate) or self.setup.get("ramp_up_strategy") is not None

    @property
    def endpoint(self) -> str:
        return "chat" if self.backend in CHAT_BACKENDS else "completions"


@dataclass(frozen=True, slots=True)
class Rows:
    table: pa.Table
    requests: int
    failed: int
    warnings: tuple[str, ...]
    send_times: str  # how the send times were obtained

    @property
    def reconstructed(self) -> bool:
        return self.send_times.startswith("reconstructed")


@dataclass(frozen=True, slots=True)
class ImportedRun:
    record: BenchRecord
    label: str | None
    run_dir: Path
    rows: Rows
    rendered: RenderedRun | None = None


@dataclass(slots=True)
class _Plan:
    """Which record goes where: label (= variant) per record, in the order given."""

    records: list[BenchRecord] = field(default_factory=list)
    labels: list[str | None] = field(default_factory=list)


# ---------------------------------------------------------------- reading and validating


def read_records(path: Path) -> list[BenchRecord]:
    """The result records of a file (one, or several appended by --append-result)."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise BenchFileError(f"{path}: cannot read the file ({error.strerror or error})") from None
    digest = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BenchFileError(f"{path}: not a UTF-8 JSON file") from None
    decoder = json.JSONDecoder()
    documents: list[Any] = []
    position = 0
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            break
        try:
            document, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as error:
            raise BenchFileError(
                f"{path}: not valid JSON ({error.msg} at line {error.lineno} column "
                f"{error.colno}); expected a `vllm bench serve --save-result` file") from None
        documents.append(document)
    if not documents:
        raise BenchFileError(f"{path}: the file is empty")
    records = []
    for index, document in enumerate(documents, start=1):
        if not isinstance(document, dict):
            where = f"{path}#{index}" if len(documents) > 1 else str(path)
            raise BenchFileError(f"{where}: expected a JSON object (a vllm bench result), got "
                                 f"{type(document).__name__}")
        records.append(BenchRecord(path, index, len(documents), document, digest))
    return records


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _entries(record: BenchRecord, key: str, n: int | None) -> list[Any]:
    values = record.data[key]
    if not isinstance(values, list):
        raise BenchFileError(f"{record.name}: key {key!r} should be a list with one entry per "
                             f"request, got {type(values).__name__}")
    if n is not None and len(values) != n:
        raise BenchFileError(f"{record.name}: key {key!r} has {len(values)} entries but "
                             f"'ttfts' has {n} (one per request in both)")
    return values


def _bad_entry(record: BenchRecord, key: str, index: int, value: Any, expected: str
               ) -> BenchFileError:
    return BenchFileError(f"{record.name}: key {key!r}, entry {index}: "
                          f"{json.dumps(value)[:80]} is not {expected}")


def _floats(record: BenchRecord, key: str, n: int, allow_null: bool) -> np.ndarray:
    out = np.full(n, np.nan)
    for index, value in enumerate(_entries(record, key, n)):
        if value is None and allow_null:
            continue
        if not _is_number(value) or not math.isfinite(value) or value < 0:
            raise _bad_entry(record, key, index, value, "a non-negative number of seconds")
        out[index] = float(value)
    return out


def _counts(record: BenchRecord, key: str, n: int) -> list[int | None]:
    out: list[int | None] = []
    for index, value in enumerate(_entries(record, key, n)):
        if value is None:
            out.append(None)
        elif _is_number(value) and value >= 0 and float(value).is_integer():
            out.append(int(value))
        else:
            raise _bad_entry(record, key, index, value, "a token count")
    return out


def _gap_lists(record: BenchRecord, n: int) -> list[list[float]]:
    out = []
    for index, gaps in enumerate(_entries(record, "itls", n)):
        if gaps is None:
            out.append([])
            continue
        if not isinstance(gaps, list) or not all(
                _is_number(g) and math.isfinite(g) and g >= 0 for g in gaps):
            raise _bad_entry(record, "itls", index, gaps,
                             "a list of non-negative gaps in seconds")
        out.append([float(g) for g in gaps])
    return out


def _rate(record: BenchRecord, key: str, default: float) -> float:
    value = record.data.get(key, default)
    if value is None:
        return default
    try:
        rate = float(value)  # vLLM writes the string "inf" for a burst
    except (TypeError, ValueError):
        raise BenchFileError(f"{record.name}: key {key!r} = {value!r} is not a number "
                             f"(or \"inf\")") from None
    if math.isnan(rate) or rate <= 0:
        raise BenchFileError(f"{record.name}: key {key!r} = {value!r} must be positive")
    return rate


def parse_record(record: BenchRecord) -> ParsedBench:
    """Validate one record; raise BenchFileError naming the file and the key otherwise."""
    data = record.data
    backend = data.get("backend", data.get("endpoint_type"))
    if "ttfts" not in data:
        if "total_input_sequences" in data or backend not in (None, *GENERATION_BACKENDS):
            raise BenchFileError(
                f"{record.name}: a pooling/embedding benchmark (backend {backend!r}) has no "
                f"per-request 'ttfts'; only text-generation results can be imported")
        raise BenchFileError(
            f"{record.name}: missing key 'ttfts' (per-request results): vLLM bench writes "
            f"them only with --save-detailed; re-run `vllm bench serve --save-result "
            f"--save-detailed ...`")
    for key in ("duration", "output_lens"):
        if key not in data:
            raise BenchFileError(
                f"{record.name}: missing key {key!r}; is this a `vllm bench serve "
                f"--save-result --save-detailed` file? (it has: "
                f"{', '.join(sorted(data)[:25])})")
    if "itls" not in data and "latencies" not in data:
        raise BenchFileError(f"{record.name}: missing key 'itls' (and 'latencies'): "
                             f"neither the end of the responses nor the token gaps are known")
    duration = data["duration"]
    if not _is_number(duration) or not math.isfinite(duration) or duration <= 0:
        raise BenchFileError(f"{record.name}: key 'duration' = {duration!r} is not a positive "
                             f"number of seconds")
    n = len(_entries(record, "ttfts", None))
    if n == 0:
        raise BenchFileError(f"{record.name}: key 'ttfts' is empty: the file holds no request")
    present = [key for key in PER_REQUEST_KEYS if key in data]
    for key in present:
        _entries(record, key, n)  # every per-request list has one entry per request
    errors = None
    if "errors" in data:
        errors = []
        for index, value in enumerate(data["errors"]):
            if value is not None and not isinstance(value, str):
                raise _bad_entry(record, "errors", index, value, "an error text or \"\"")
            errors.append(value or "")
    max_concurrency = data.get("max_concurrency")
    if max_concurrency is not None and (not _is_number(max_concurrency) or max_concurrency < 1
                                        or not float(max_concurrency).is_integer()):
        raise BenchFileError(f"{record.name}: key 'max_concurrency' = {max_concurrency!r} is "
                             f"not a positive integer (or null)")
    setup = {key: data[key] for key in SETUP_KEYS if key in data}
    known = {*SETUP_KEYS, *PER_REQUEST_KEYS, "duration"}
    reported = {k: v for k, v in data.items() if k not in known and _reported_key(k)}
    metadata = {k: v for k, v in data.items()
                if k not in known and k not in reported and not isinstance(v, list | dict)}
    return ParsedBench(
        n=n, duration_s=float(duration),
        ttft=_floats(record, "ttfts", n, allow_null=True),
        itls=_gap_lists(record, n) if "itls" in data else None,
        latency=_floats(record, "latencies", n, True) if "latencies" in data else None,
        start=_start_times(record, n) if "start_times" in data else None,
        queue=_floats(record, "queue_times", n, True) if "queue_times" in data else None,
        input_lens=_counts(record, "input_lens", n) if "input_lens" in data else None,
        output_lens=_counts(record, "output_lens", n), errors=errors,
        backend=str(backend) if backend is not None else None,
        request_rate=_rate(record, "request_rate", math.inf),
        burstiness=_rate(record, "burstiness", 1.0),
        max_concurrency=int(max_concurrency) if max_concurrency is not None else None,
        setup=setup, metadata=metadata, reported=reported,
        missing=tuple(k for k in ("itls", "latencies", "start_times", "queue_times",
                                  "input_lens", "errors") if k not in data))


def _start_times(record: BenchRecord, n: int) -> np.ndarray:
    out = np.empty(n)
    for index, value in enumerate(_entries(record, "start_times", n)):
        if not _is_number(value) or not math.isfinite(value):
            raise _bad_entry(record, "start_times", index, value, "a clock reading (seconds)")
        out[index] = float(value)
    return out


_REPORTED = re.compile(r"^((mean|median|std|p\d+(\.\d+)?)_(ttft|tpot|itl|e2el)_ms|completed|"
                       r"failed|total_\w+|\w+_throughput|request_goodput:?|max_\w+|rtfx)$")


def _reported_key(key: str) -> bool:
    return bool(_REPORTED.match(key))


# ---------------------------------------------------------------- times and rows


def _release_and_send(parsed: ParsedBench, busy_s: np.ndarray, latency_from: str
                      ) -> tuple[np.ndarray, np.ndarray, str, list[str]]:
    """(intended, actual) send times relative to the first send, how they were obtained, and
    the warnings that go with it."""
    warnings: list[str] = []
    if parsed.start is not None:
        send = parsed.start - parsed.start.min()
        if not parsed.open_loop or latency_from == "send":
            how = "recorded (start_times); latencies count from the actual send"
            return send, send, how, warnings
        if parsed.queue is None:
            warnings.append("the file has no queue_times (older vLLM): intended send = actual "
                            "send, waits for a --max-concurrency slot are not counted")
            return send, send, "recorded (start_times); no queue_times", warnings
        queue = np.nan_to_num(parsed.queue, nan=0.0)
        how = ("recorded (start_times); intended send = start_time - queue_time (when vLLM "
               "bench's pacing released the request)")
        return send - queue, send, how, warnings
    # older files: no start_times. Reconstruct, honestly labelled.
    n = parsed.n
    rate = parsed.request_rate
    release = np.arange(n) / rate if math.isfinite(rate) else np.zeros(n)
    slots = parsed.max_concurrency or n
    send = np.empty(n)
    busy_until: list[float] = []
    for index in range(n):
        start = release[index]
        if len(busy_until) >= slots:
            start = max(start, heapq.heappop(busy_until))
        send[index] = start
        heapq.heappush(busy_until, start + busy_s[index])
    schedule = (f"evenly at the configured {rate:g} req/s (the real schedule was "
                f"{'Poisson' if parsed.burstiness == 1 else 'gamma'}-distributed)"
                if math.isfinite(rate) else "all at once (request rate inf)")
    cap = (f", each waiting for one of {parsed.max_concurrency} slots freed by the recorded "
           f"latencies" if parsed.max_concurrency else "")
    how = f"reconstructed: no start_times in the file; released in file order {schedule}{cap}"
    warnings.append(f"send times {how}; per-second throughput and the autocorrelation of the "
                    f"series are approximate, the latencies themselves are the file's")
    intended = release if (parsed.open_loop and latency_from == "arrival") else send
    return intended, send, how, warnings


def _queued(parsed: ParsedBench, intended: np.ndarray, send: np.ndarray, busy_s: np.ndarray
            ) -> np.ndarray:
    """Open loop with a --max-concurrency cap: were the slots taken when the request was
    released? Taken = released earlier (file order is release order) and not finished by
    then, whether in flight or itself still waiting for a slot."""
    if not parsed.open_loop or parsed.max_concurrency is None:
        return np.zeros(parsed.n, dtype=bool)
    ends = np.sort(send + busy_s)
    released_before = np.arange(parsed.n)
    finished_before = np.searchsorted(ends, intended, side="right")
    taken = released_before - finished_before
    return (taken >= parsed.max_concurrency) & (send - intended > 0)


def _failure(error: str) -> tuple[int, str]:
    """(status code, error text) in the suite's words for a vLLM bench error string."""
    text = error.strip()
    if not text or text.startswith("Never received a valid chunk"):
        return 200, NO_CONTENT
    if "Traceback (most recent call last)" in text:
        last = [line.strip() for line in text.splitlines() if line.strip()]
        return 0, last[-1][:500] if last else "client exception"
    code = _REASONS.get(text.lower())
    if code is not None:
        return code, f"HTTP {code}: {text}"
    if text.startswith("{"):  # an error event inside a 200 stream (openai-responses)
        return 200, f"error event: {' '.join(text.split())[:500]}"
    return 0, text.splitlines()[0][:500]


def build_rows(parsed: ParsedBench, anchor_unix_s: float, latency_from: str = "arrival"
               ) -> Rows:
    """One row per request in the samples schema, time-ordered by intended send."""
    n = parsed.n
    ttft = parsed.ttft
    gaps = parsed.itls
    has_first = np.isfinite(ttft) & (ttft > 0)
    if parsed.latency is not None:
        latency = parsed.latency.copy()
    else:
        latency = np.array([ttft[i] + sum(gaps[i]) if has_first[i] and gaps is not None
                            else np.nan for i in range(n)])
    busy = np.nan_to_num(latency, nan=0.0)
    intended, send, how, warnings = _release_and_send(parsed, busy, latency_from)
    queued = _queued(parsed, intended, send, busy)
    lag = send - intended
    errors = parsed.errors or [""] * n
    rows = []
    no_content = 0
    for i in range(n):
        output_tokens = parsed.output_lens[i]
        ok = has_first[i] and not errors[i]
        error = None
        status = 200
        if ok and output_tokens == 0:
            ok, no_content = False, no_content + 1
            status, error = 200, NO_CONTENT
        elif not ok and parsed.errors is None:
            status, error = 0, "no first token (the file records no error text)"
        elif not ok:
            status, error = _failure(errors[i])
        offsets: list[float] = []
        if has_first[i]:
            offsets = list(ttft[i] + lag[i] + np.cumsum([0.0, *(gaps[i] if gaps else [])]))
        end = latency[i] if np.isfinite(latency[i]) and latency[i] > 0 else np.nan
        rows.append({
            "request_id": f"{i}", "process_id": 0, "user_id": None, "plan_index": i,
            "conversation_id": None, "turn": None, "phase": "measure",
            "endpoint": parsed.endpoint,
            "intended_send_unix_s": anchor_unix_s + float(intended[i]),
            "send_unix_s": anchor_unix_s + float(send[i]), "send_lag_s": float(lag[i]),
            "queued_for_slot": bool(queued[i]),
            "ttft_s": float(ttft[i] + lag[i]) if has_first[i] else None,
            "e2e_s": float(end + lag[i]) if np.isfinite(end) else None,
            "chunk_offsets_s": [float(x) for x in offsets],
            "output_tokens": output_tokens if (ok or output_tokens) else None,
            "prompt_tokens": parsed.input_lens[i] if parsed.input_lens else None,
            "prompt_tokens_planned": None, "max_tokens": None,
            "status_code": status, "ok": bool(ok), "error": error, "finish_reason": None,
        })
    rows.sort(key=lambda row: row["intended_send_unix_s"])
    failed = sum(1 for row in rows if not row["ok"])
    if no_content:
        warnings.append(f"{no_content} request(s) vLLM bench counted as successful returned no "
                        f"output tokens: counted as failed ({NO_CONTENT}), as the suite does")
    completed = parsed.reported.get("completed")
    if _is_number(completed) and completed != n - failed and not no_content:
        warnings.append(f"vLLM bench counted {completed} completed requests; the rows say "
                        f"{n - failed}")
    if gaps is None:
        warnings.append("the file has no itls: ITL cannot be computed (TTFT, E2E and TPOT can)")
    if parsed.latency is None:
        warnings.append("the file has no latencies (older vLLM): E2E = TTFT + sum(ITL)")
    if parsed.errors is None:
        warnings.append("the file has no errors list: a request without a first token counts "
                        "as failed")
    if parsed.backend in CHAT_BACKENDS:
        warnings.append(
            "vLLM bench's openai-chat client times the first chunk carrying `choices`; on vLLM "
            "that is the empty role chunk sent with the first token, so TTFT is vLLM bench's "
            "(at most one chunk earlier than the suite's first content chunk) and each "
            "request's first ITL is the role-to-content gap")
    if parsed.open_loop and parsed.start is not None and parsed.queue is not None:
        waited = float(np.nanmax(lag)) if n else 0.0
        if latency_from == "arrival" and waited > 0.001:
            warnings.append(
                f"latencies count from when vLLM bench released each request (start_time - "
                f"queue_time): up to {waited * 1e3:.1f} ms of client-side queueing is included "
                f"(vLLM bench's own TTFT excludes it; --latency-from send reproduces it)")
    table = pa.Table.from_pylist(rows, schema=SAMPLE_SCHEMA)
    return Rows(table, n, failed, tuple(warnings), how)


# ---------------------------------------------------------------- scenario and provenance


def anchor_unix_s(record: BenchRecord, parsed: ParsedBench) -> tuple[float, str]:
    """Unix time of the first send: the file's `date` (written at the end, local time, whole
    seconds) minus its duration; without a date, the file's modification time."""
    date = parsed.setup.get("date")
    if isinstance(date, str):
        try:
            end = datetime.strptime(date, "%Y%m%d-%H%M%S").timestamp()  # local time
            return end - parsed.duration_s, (
                f"date {date} (the writer's local time, read in this machine's time zone) "
                f"minus duration")
        except ValueError:
            pass
    end = record.path.stat().st_mtime
    return end - parsed.duration_s, "the file's modification time minus duration (no date)"


def _arrival(parsed: ParsedBench) -> dict[str, Any]:
    cap = min(MAX_USERS, parsed.max_concurrency or parsed.n)
    if not parsed.open_loop:
        return {"kind": "closed", "users": cap, "spawn_rate": float(cap), "think_time": 0.0}
    rate = parsed.request_rate
    if not math.isfinite(rate):  # ramp-up: recorded as its mean rate
        rate = parsed.n / parsed.duration_s
    if math.isinf(parsed.burstiness):
        return {"kind": "constant", "rate": rate, "max_in_flight": cap}
    if parsed.burstiness == 1.0:
        return {"kind": "poisson", "rate": rate, "max_in_flight": cap}
    return {"kind": "gamma", "rate": rate, "burstiness": parsed.burstiness,
            "max_in_flight": cap}


def trial_scenario(record: BenchRecord, parsed: ParsedBench, label: str | None,
                   slo_source: Scenario | None) -> Scenario:
    """A valid single-run scenario describing what vLLM bench did (the profile is the
    model's default: the scenario model has no profile for external traffic)."""
    setup = parsed.setup
    rate = ("inf" if not math.isfinite(parsed.request_rate) else f"{parsed.request_rate:g}")
    description = (
        f"Imported from `vllm bench serve` result {record.path.name}"
        f"{f' (record {record.index})' if record.count > 1 else ''}: backend "
        f"{parsed.backend}, {parsed.n} requests, request rate {rate}, max concurrency "
        f"{parsed.max_concurrency}, date {setup.get('date')}. The traffic profile is a "
        f"placeholder; the workload was vLLM bench's dataset.")
    if slo_source is not None:
        description += f" SLOs and compared cells from scenario {slo_source.name!r}."
    model = setup.get("model_id")
    document: dict[str, Any] = {
        "name": SCENARIO_NAME, "description": description,
        "server": {"model": str(model) if model else "unknown", "instance": label},
        "traffic": {"endpoint": parsed.endpoint, "arrival": _arrival(parsed),
                    "duration": parsed.duration_s, "warmup": 0.0, "cooldown": 0.0,
                    "prefix_cache": "keep"},
    }
    if slo_source is not None:
        document["slo"] = slo_source.slo.model_dump(mode="json", by_alias=True)
        document["compare"] = slo_source.compare.model_dump(mode="json", by_alias=True)
    return Scenario.model_validate(document)


def _provenance(record: BenchRecord, parsed: ParsedBench, label: str | None, rows: Rows,
                anchor: tuple[float, str], latency_from: str) -> dict[str, Any]:
    vllm_version = next((str(parsed.metadata[k]) for k in ("vllm_version", "version")
                         if parsed.metadata.get(k)), None)
    return {
        "source": SOURCE,
        "vllm_version": vllm_version, "model_id": parsed.setup.get("model_id"),
        "platform": None, "seed": None,
        "started_utc": datetime.fromtimestamp(anchor[0], timezone.utc).isoformat(),
        "suite_version": _suite_version(),
        "imported_utc": datetime.now(timezone.utc).isoformat(),
        "server_instance": {"kind": "imported", "label": label},
        "vllm_bench": {
            "file": str(record.path.resolve()), "sha256": record.sha256,
            "record": record.index, "records_in_file": record.count,
            "copy": SOURCE_COPY, **parsed.setup, "request_rate": parsed.setup.get(
                "request_rate", "inf"), "duration_s": parsed.duration_s,
            "requests": parsed.n, "metadata": parsed.metadata, "reported": parsed.reported,
            "missing_fields": list(parsed.missing),
        },
        "send_times": rows.send_times,
        "time_anchor": anchor[1],
        "latency_from": latency_from if parsed.open_loop else "send",
        "plan": {"requests": parsed.n,
                 "source": "vllm bench serve's dataset (prompts are not in the result file)"},
    }


def write_run(run_dir: Path, record: BenchRecord, label: str | None,
              slo_source: Scenario | None, latency_from: str = "arrival") -> ImportedRun:
    """One complete run folder from one record (not rendered)."""
    parsed = parse_record(record)
    anchor = anchor_unix_s(record, parsed)
    rows = build_rows(parsed, anchor[0], latency_from)
    scenario = trial_scenario(record, parsed, label, slo_source)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / SCENARIO_FILE).write_text(
        yaml.safe_dump(redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
    provenance = _provenance(record, parsed, label, rows, anchor, latency_from)
    (run_dir / PROVENANCE_FILE).write_text(json.dumps(redact_secrets(provenance), indent=2))
    warnings = [f"imported from vllm bench serve ({record.name}); send times {rows.send_times}",
                "the traffic profile in scenario.yaml is a placeholder (the workload was vLLM "
                "bench's dataset)", *rows.warnings]
    (run_dir / STATUS_FILE).write_text(json.dumps(
        {"server_failure": None, "load_generator_failure": None, "interrupted": False,
         "warnings": warnings}, indent=2))
    pq.write_table(rows.table, run_dir / SAMPLES_FILE)
    if record.count == 1:
        shutil.copyfile(record.path, run_dir / SOURCE_COPY)
    else:
        (run_dir / SOURCE_COPY).write_text(json.dumps(record.data) + "\n")
    return ImportedRun(record, label, run_dir, rows)


# ---------------------------------------------------------------- the command


def _check_label(label: str, where: str) -> str:
    if label == "run":  # trial folders `NNN-run-k` are those of an unnamed variant
        raise ScenarioError(f"{where} 'run' is reserved for unlabelled files; pick another "
                            f"label")
    if not _LABEL.match(label):
        raise ScenarioError(f"{where} {label!r}: a label names a variant and a trial folder; "
                            f"use letters, digits, '.', '_' and '-', starting with a letter "
                            f"or digit")
    return label


def _assign(files: Sequence[Path], labels: Sequence[str], variants: Sequence[str]) -> _Plan:
    if files and variants:
        raise ScenarioError("give the files either as arguments (labelled with --label) or all "
                            "as --variant NAME=FILE, not both")
    pairs: list[tuple[Path, str | None]] = []
    if variants:
        if labels:
            raise ScenarioError("--label and --variant both name labels: with --variant "
                                "NAME=FILE the NAME is the file's label")
        for text in variants:
            name, sep, file = text.partition("=")
            if not sep or not name or not file:
                raise ScenarioError(f"--variant {text!r}: expected NAME=FILE")
            pairs.append((Path(file), _check_label(name, "--variant")))
    elif not files:
        raise ScenarioError("which files? pass vllm bench result files (FILE.json ...) or "
                            "--variant NAME=FILE")
    elif not labels:
        pairs = [(file, None) for file in files]
    elif len(labels) == 1:
        pairs = [(file, _check_label(labels[0], "--label")) for file in files]
    elif len(labels) == len(files):
        pairs = [(file, _check_label(label, "--label"))
                 for file, label in zip(files, labels, strict=True)]
    else:
        raise ScenarioError(f"{len(labels)} --label values for {len(files)} files: give one "
                            f"label for all files, or one per file in the same order")
    plan = _Plan()
    for file, label in pairs:
        for record in read_records(file):
            plan.records.append(record)
            plan.labels.append(label)
    return plan


def _fresh_folder(out: Path) -> Path:
    out = out.expanduser().resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ScenarioError(f"--out {out} already exists and is not empty; importing never "
                            f"overwrites a run folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _slo_source(reference: str | None) -> Scenario | None:
    if reference is None:
        return None
    scenario, _ = load_scenario(reference)
    return scenario


def _diff(base: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """The keys of `other` that differ from `base` (recursively), as a variant patch."""
    patch: dict[str, Any] = {}
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            nested = _diff(base[key], value)
            if nested:
                patch[key] = nested
        elif base.get(key) != value:
            patch[key] = value
    return patch


def experiment_scenario(trials: Sequence[tuple[str | None, Scenario]]) -> Scenario:
    """The experiment's scenario.yaml: the first trial's scenario as the base; one variant
    per label (its server.instance and whatever else differs from the base), none when the
    files are unlabelled; `trials` = the fewest trials any variant has."""
    base = trials[0][1].to_yaml_dict()
    base["server"]["instance"] = None
    counts: dict[str | None, int] = {}
    firsts: dict[str | None, Scenario] = {}
    for label, scenario in trials:
        counts[label] = counts.get(label, 0) + 1
        firsts.setdefault(label, scenario)
    document = {**base, "trials": min(counts.values())}
    if list(counts) != [None]:
        document["variants"] = {
            label: {key: value for key, value in _diff(base, scenario.to_yaml_dict()).items()
                    if key in ("server", "traffic")}
            for label, scenario in firsts.items()}
        document["description"] = (f"{len(trials)} `vllm bench serve` results imported as "
                                   f"trials of {len(counts)} variant(s), one per label")
    else:
        document["description"] = (f"{len(trials)} `vllm bench serve` results imported as "
                                   f"trials of one setting")
    return Scenario.model_validate(document)


def _line(run: ImportedRun, out: Path) -> str:
    rows = run.rows
    where = run.run_dir.relative_to(out) if run.run_dir != out else Path(".")
    label = f" [{run.label}]" if run.label else ""
    return (f"  {run.record.name}{label} -> {where}: {rows.requests} requests, "
            f"{rows.failed} failed; send times "
            f"{'reconstructed' if rows.reconstructed else 'recorded'}")


def import_vllm_bench(files: Sequence[Path], out: Path | None, labels: Sequence[str] = (),
                      variants: Sequence[str] = (), slo_from: str | None = None,
                      latency_from: str = "arrival", runs_root: Path = Path("runs")
                      ) -> CommandResult:
    """Import `vllm bench serve` result files into a run folder (one record) or an
    experiment folder (several: one trial each, grouped into variants by label), render
    them, and return the rendered text with the run's exit code."""
    if latency_from not in LATENCY_FROM:
        raise ScenarioError(f"--latency-from {latency_from!r}: expected one of "
                            f"{', '.join(LATENCY_FROM)}")
    plan = _assign(files, labels, variants)
    for record in plan.records:
        parse_record(record)  # every file is checked before anything is written
    slo_source = _slo_source(slo_from)
    if out is None:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out = runs_root / f"{stamp}-{SCENARIO_NAME}"
    out = _fresh_folder(out)
    lines = [f"importing {len(plan.records)} vllm bench result(s) into {out}"]
    if len(plan.records) == 1:
        run = write_run(out, plan.records[0], plan.labels[0], slo_source, latency_from)
        rendered = render_run(out)  # its text lists the run's warnings
        lines.append(_line(run, out))
    else:
        trial_numbers: dict[str | None, int] = {}
        runs = []
        for position, (record, label) in enumerate(zip(plan.records, plan.labels,
                                                       strict=True), start=1):
            trial_numbers[label] = trial_numbers.get(label, 0) + 1
            trial_dir = out / TRIALS_DIR / trial_folder_name(position, label or "",
                                                             trial_numbers[label])
            run = write_run(trial_dir, record, label, slo_source, latency_from)
            render_run(trial_dir)
            runs.append(run)
            lines.append(_line(run, out))
        scenario = experiment_scenario([(r.label, Scenario.model_validate(yaml.safe_load(
            (r.run_dir / SCENARIO_FILE).read_text()))) for r in runs])
        (out / SCENARIO_FILE).write_text(
            yaml.safe_dump(redact_secrets(scenario.to_yaml_dict()), sort_keys=False))
        rendered = render_experiment(out)
        warnings = list(dict.fromkeys(w for r in runs for w in r.rows.warnings))
        lines += [f"  warning: {w}" for w in warnings]
    code = ExitCode(rendered.summary["exit_code"])
    lines += ["", rendered.text, "", f"report: {rendered.report_path}",
              f"exit code {int(code)} ({code.name})"]
    return CommandResult("\n".join(lines), code, rendered.report_path)
