"""One request's row (the `run_folder.samples_format` schema) from its measured outcome.

Pure: the Locust user hands over what it knows (plan entry, user, times on both clocks) and
gets the dict the sample writer appends. Latencies count from the intended send time (open
loop: the schedule; closed loop: the actual send)."""

from __future__ import annotations

from typing import Any

from vllm_slo.loadtests.openai_stream import RequestOutcome
from vllm_slo.loadtests.plan import PlannedRequest


def request_row(*, request_id: str, process_id: int, user_id: int, request: PlannedRequest,
                endpoint: str, phase: str, intended_perf_s: float, send_unix_s: float,
                queued: bool, outcome: RequestOutcome) -> dict[str, Any]:
    """`send_unix_s` is the wall clock at the send; `intended_perf_s` and the outcome's times
    are perf_counter seconds of the same process."""
    intended_unix_s = send_unix_s - (outcome.send_perf_s - intended_perf_s)
    chunks = outcome.content_chunk_perf_s
    return {
        "request_id": request_id,
        "process_id": process_id,
        "user_id": user_id,
        "plan_index": request.index,
        "conversation_id": request.conversation_id,
        "turn": request.turn,
        "phase": phase,
        "endpoint": endpoint,
        "intended_send_unix_s": intended_unix_s,
        "send_unix_s": send_unix_s,
        "send_lag_s": outcome.send_perf_s - intended_perf_s,
        "queued_for_slot": queued,
        "ttft_s": chunks[0] - intended_perf_s if chunks else None,
        "e2e_s": outcome.end_perf_s - intended_perf_s,
        "chunk_offsets_s": [t - intended_perf_s for t in chunks],
        "output_tokens": outcome.output_tokens,
        "prompt_tokens": outcome.prompt_tokens,
        "prompt_tokens_planned": request.prompt_tokens,
        "max_tokens": request.max_tokens,
        "status_code": outcome.status_code,
        "ok": outcome.ok,
        "error": outcome.error,
        "finish_reason": outcome.finish_reason,
        "status": outcome.status,
        "retry_after_s": outcome.retry_after_s,
        "profile": request.profile or None,
        "chunk_tokens": outcome.chunk_tokens,
        "ttft_answer_s": (None if outcome.first_answer_perf_s is None
                          else outcome.first_answer_perf_s - intended_perf_s),
        "reasoning_chunks": outcome.reasoning_chunks,
        "reasoning_tokens": outcome.reasoning_tokens,
    }
