"""Reading and validating saved `vllm bench serve --save-result --save-detailed` files.

What a result file holds (vLLM's `vllm/benchmarks/serve.py`, `--save-detailed`): per request, in
send order, `ttfts` (0.0 when no chunk arrived), `itls` (gaps between chunks after the first),
`latencies` (to the last chunk), `start_times` (perf_counter at the send), `queue_times`
(send - the moment vLLM bench's pacing released the request: waiting for `--max-concurrency`),
`input_lens`, `output_lens` (0 for failures), `errors` ("" when it succeeded); and once:
`duration`, `date` (local time, to the second, when the file was written), `backend`,
`model_id`, `num_prompts`, `request_rate` ("inf" for a burst), `burstiness`,
`max_concurrency`, plus any `--metadata KEY=VALUE`. Older vLLM versions lack `latencies`,
`start_times` and `queue_times`; every other missing key is named in the error.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vllm_slo.scenarios.errors import ScenarioError

CHAT_BACKENDS = ("openai-chat",)
GENERATION_BACKENDS = ("vllm", "openai", "openai-chat", "openai-responses", "openai-audio")
PER_REQUEST_KEYS = ("ttfts", "itls", "latencies", "start_times", "queue_times", "input_lens",
                    "output_lens", "errors", "generated_texts")
SETUP_KEYS = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id",
              "num_prompts", "request_rate", "burstiness", "max_concurrency",
              "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")


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
        except RecursionError:
            raise BenchFileError(
                f"{path}: JSON nested too deeply to read (a vllm bench result nests 3 levels); "
                f"expected a `vllm bench serve --save-result` file") from None
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


def is_number(value: Any) -> bool:
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


#: the longest duration a file may record (~116 days): beyond it a value is no measurement,
#: and its square overflows the statistics (TTFT 1e300)
MAX_DURATION_S = 1e7
_SECONDS = f"a non-negative number of seconds below {MAX_DURATION_S:,.0f}"


def _seconds(value: Any) -> bool:
    return is_number(value) and math.isfinite(value) and 0 <= value < MAX_DURATION_S


def _floats(record: BenchRecord, key: str, n: int, allow_null: bool) -> np.ndarray:
    out = np.full(n, np.nan)
    for index, value in enumerate(_entries(record, key, n)):
        if value is None and allow_null:
            continue
        if not _seconds(value):
            raise _bad_entry(record, key, index, value, _SECONDS)
        out[index] = float(value)
    return out


#: the largest token count a row holds (samples_format: int32 columns)
MAX_TOKEN_COUNT = 2**31 - 1


def _counts(record: BenchRecord, key: str, n: int) -> list[int | None]:
    out: list[int | None] = []
    for index, value in enumerate(_entries(record, key, n)):
        if value is None:
            out.append(None)
        elif (is_number(value) and 0 <= value <= MAX_TOKEN_COUNT
              and float(value).is_integer()):
            out.append(int(value))
        else:
            raise _bad_entry(record, key, index, value,
                             f"a token count (0 to {MAX_TOKEN_COUNT:,})")
    return out


def _gap_lists(record: BenchRecord, n: int) -> list[list[float]]:
    out: list[list[float]] = []
    for index, gaps in enumerate(_entries(record, "itls", n)):
        if gaps is None:
            out.append([])
            continue
        if not isinstance(gaps, list) or not all(_seconds(g) for g in gaps):
            raise _bad_entry(record, "itls", index, gaps,
                             f"a list of gaps, each {_SECONDS}")
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
    if not is_number(duration) or not math.isfinite(duration) or duration <= 0:
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
    if max_concurrency is not None and (not is_number(max_concurrency) or max_concurrency < 1
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
        if not is_number(value) or not math.isfinite(value):
            raise _bad_entry(record, "start_times", index, value, "a clock reading (seconds)")
        out[index] = float(value)
    return out


_REPORTED = re.compile(r"^((mean|median|std|p\d+(\.\d+)?)_(ttft|tpot|itl|e2el)_ms|completed|"
                       r"failed|total_\w+|\w+_throughput|request_goodput:?|max_\w+|rtfx)$")


def _reported_key(key: str) -> bool:
    return bool(_REPORTED.match(key))
