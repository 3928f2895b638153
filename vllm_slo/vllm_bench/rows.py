"""A record's requests as rows (`vllm_slo/run_folder/samples_format.py`), one per request, all
in the `measure` phase:
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
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import numpy as np
import pyarrow as pa

from vllm_slo.run_folder.samples_format import SAMPLE_SCHEMA
from vllm_slo.vllm_bench.records import CHAT_BACKENDS, ParsedBench, is_number

LATENCY_FROM = ("arrival", "send")
NO_CONTENT = "HTTP 200 but no content tokens"  # the suite's name for this failure
_REASONS = {status.phrase.lower(): status.value for status in HTTPStatus}


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
    queued: np.ndarray = (taken >= parsed.max_concurrency) & (send - intended > 0)
    return queued


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


def _status_word(ok: bool, code: int, error: str | None) -> str:
    """The suite's request status (run_folder.samples_format.REQUEST_STATUSES) for a row."""
    if ok:
        return "ok"
    if error == NO_CONTENT:
        return "no_tokens"
    if code not in (0, 200):
        return "http_error"
    if error and error.startswith("error event"):
        return "stream_error"
    return "transport_error"


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
    # a request cannot end before its first token: such a file is inconsistent, and its
    # E2E would read below its TTFT; the row keeps its TTFT, its E2E is left out (a warning)
    with np.errstate(invalid="ignore"):
        ends_early = has_first & np.isfinite(latency) & (latency > 0) & (latency < ttft)
    latency[ends_early] = np.nan
    busy = np.where(ends_early, ttft, np.nan_to_num(latency, nan=0.0))
    intended, send, how, warnings = _release_and_send(parsed, busy, latency_from)
    queued = _queued(parsed, intended, send, busy)
    lag = send - intended
    errors = parsed.errors or [""] * n
    rows: list[dict[str, Any]] = []
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
            "status": _status_word(bool(ok), status, error),
        })
    rows.sort(key=lambda row: row["intended_send_unix_s"])
    failed = sum(1 for row in rows if not row["ok"])
    if no_content:
        warnings.append(f"{no_content} request(s) vLLM bench counted as successful returned no "
                        f"output tokens: counted as failed ({NO_CONTENT}), as the suite does")
    completed = parsed.reported.get("completed")
    if is_number(completed) and completed != n - failed and not no_content:
        warnings.append(f"vLLM bench counted {completed} completed requests; the rows say "
                        f"{n - failed}")
    if ends_early.any():
        warnings.append(
            f"{int(ends_early.sum())} request(s) end before their first token in the file "
            f"(latency < ttft, e.g. request {int(np.flatnonzero(ends_early)[0])}): their E2E "
            f"is left out (TTFT and the other rows are kept)")
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
