"""The emulated engine: the FIFO queue, the token schedule, the completion responses sent on it,
and the counters ``/metrics`` shows.

Timing model (all times from a monotonic clock, scheduled as absolute deadlines so nothing drifts):

* ``receipt``: the request has been read. Streaming responses send their HTTP headers now.
* ``start``: the request leaves the FIFO queue (immediately unless ``max_concurrency`` is
  reached). The chat role chunk goes at ``start + min(role_delay_s, ttft_s)``.
* token ``i`` is "generated" at ``start + ttft_s + i * itl_s`` (+ uniform ``[0, jitter_s]``);
  a chunk is sent when its last token is generated. Chunks hold one token, or, with
  ``tokens_per_chunk = k``, the first token alone and then ``k`` tokens each (vLLM
  ``--stream-interval``), or, with ``chunk_pattern``, the pattern's sizes in turn from the
  first chunk (speculative decoding's uneven chunks). Usage chunk, ``[DONE]`` and the
  terminating HTTP chunk follow the last token chunk at once, each as its own write. With
  ``stream_options.continuous_usage_stats`` every chunk carries usage (as vLLM's: the role
  chunk 0 completion tokens, each token chunk the count so far).
* chat with ``reasoning_tokens = r``: tokens ``0 .. r-1`` are sent as reasoning (the delta's
  ``reasoning_field``), the rest as content; no chunk spans the boundary.
* non-streaming responses are sent whole at the time of the last token.

The faults that change the generated tokens (``no_tokens``, ``drop_mid_stream``, ``xss``,
``bad_value``) are carried out here; see ``faults``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections import deque

from vllm_slo.servers.standin.config import StandinConfig, Trace
from vllm_slo.servers.standin.faults import BAD_VALUES, XSS_WORDS, spoil
from vllm_slo.servers.standin.http import LAST_CHUNK, http_chunk, send_json, write
from vllm_slo.servers.standin.openai import Params, sse

_WORDS = ("The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".")


async def sleep_until(deadline: float) -> None:
    """Sleep until a monotonic deadline (the loop's clock is ``time.monotonic``)."""
    loop = asyncio.get_running_loop()
    if deadline <= loop.time():
        return
    waiter = loop.create_future()
    handle = loop.call_at(deadline, _resolve, waiter)
    try:
        await waiter
    finally:
        handle.cancel()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FifoLimiter:
    """Strictly first-in-first-out concurrency limit (None: unlimited)."""

    def __init__(self, limit: int | None) -> None:
        self._limit = limit
        self.running = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    async def acquire(self) -> None:
        if self._limit is None or (self.running < self._limit and not self._waiters):
            self.running += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # the releasing request hands its slot over; `running` is unchanged
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.running -= 1


@dataclasses.dataclass
class Counters:
    """Totals since start, as vLLM's engine counts them (only ever grow)."""

    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = dataclasses.field(
        default_factory=lambda: {"length": 0, "stop": 0, "abort": 0}
    )


class Engine:
    """Serves accepted completion requests: queues them (FIFO, ``max_concurrency``), then sends
    each response on the schedule above, filling in its Trace and the Counters."""

    def __init__(self, config: StandinConfig) -> None:
        self.config = config
        self.queue = FifoLimiter(config.max_concurrency)
        self.counters = Counters()
        self._jitter_rng = random.Random(f"jitter:{config.seed}")
        self._bad_values = 0  # bad_value faults served: each takes the next spoil in turn

    def _bad_value(self, fault: str | None) -> tuple[str, str] | None:
        """This request's spoil (name, chunk) under the ``bad_value`` fault, else None."""
        if fault != "bad_value":
            return None
        self._bad_values += 1
        return BAD_VALUES[(self._bad_values - 1) % len(BAD_VALUES)]

    async def generate(
        self,
        writer: asyncio.StreamWriter,
        chat: bool,
        params: Params,
        fault: str | None,
        trace: Trace,
        keep: bool,
    ) -> bool:
        """Wait for a queue slot, then send the response; returns whether the connection
        stays open (streaming responses have sent their headers already)."""
        await self.queue.acquire()
        try:
            trace.start_s = time.monotonic()
            self.counters.prompt_tokens += params.prompt_tokens
            if params.stream:
                return await self._stream(writer, chat, params, fault, trace, keep)
            return await self._whole(writer, chat, params, fault, trace, keep)
        finally:
            self.queue.release()

    def _token_offsets(self, n: int) -> list[float]:
        cfg = self.config
        offsets: list[float] = []
        previous = 0.0
        for i in range(n):
            offset = cfg.ttft_s + i * cfg.itl_s
            if cfg.jitter_s:
                offset += self._jitter_rng.uniform(0.0, cfg.jitter_s)
            previous = max(previous, offset)
            offsets.append(previous)
        return offsets

    def _chunk_ranges(self, n: int, reasoning: int = 0) -> list[tuple[int, int]]:
        if n == 0:
            return []
        pattern = self.config.chunk_pattern
        ranges = [(0, pattern[0] if pattern else 1)]
        while ranges[-1][1] < n:
            start = ranges[-1][1]
            size = pattern[len(ranges) % len(pattern)] if pattern else (
                self.config.tokens_per_chunk)
            ranges.append((start, start + size))
        ranges[-1] = (ranges[-1][0], n)
        if 0 < reasoning < n:  # split the chunk that spans the reasoning's end
            ranges = [piece for a, b in ranges
                      for piece in ([(a, reasoning), (reasoning, b)] if a < reasoning < b
                                    else [(a, b)])]
        return ranges

    def _texts(self, ranges: list[tuple[int, int]], fault: str | None) -> list[str]:
        words = XSS_WORDS if fault == "xss" else _WORDS
        return ["".join(words[i % len(words)] for i in range(a, b)) for a, b in ranges]

    @staticmethod
    def _usage(params: Params, completion_tokens: int, fault: str | None) -> dict[str, object]:
        """A chunk's per-chunk usage (continuous_usage_stats), or nothing (also under the
        ``no_usage`` fault: a server that sends no usage at all)."""
        if not params.continuous_usage or fault == "no_usage":
            return {}
        return {"usage": {"prompt_tokens": params.prompt_tokens,
                          "total_tokens": params.prompt_tokens + completion_tokens,
                          "completion_tokens": completion_tokens}}

    async def _stream(
        self,
        writer: asyncio.StreamWriter,
        chat: bool,
        params: Params,
        fault: str | None,
        trace: Trace,
        keep: bool,
    ) -> bool:
        start = trace.start_s
        assert start is not None
        n = 0 if fault == "no_tokens" else params.max_tokens
        offsets = self._token_offsets(n)
        reasoning = self.config.reasoning_tokens if chat else 0
        ranges = self._chunk_ranges(n, reasoning)
        texts = self._texts(ranges, fault)
        drop_at = params.max_tokens // 2 if fault == "drop_mid_stream" else None
        bad = self._bad_value(fault)
        created = int(time.time())
        base = {
            "id": trace.request_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": self.config.model,
        }
        first_offset = offsets[0] if offsets else self.config.ttft_s
        if chat:
            await sleep_until(start + min(self.config.role_delay_s, first_offset))
            role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
            role.update(logprobs=None, finish_reason=None)
            event = sse({**base, "choices": [role], **self._usage(params, 0, fault)})
            trace.last_chunk_s = await write(
                writer, _without_data_field(event) if fault == "no_data" else event)
        for (a, b), text in zip(ranges, texts, strict=True):
            if drop_at is not None and b > drop_at:
                await sleep_until(start + offsets[b - 1])
                writer.close()
                self.counters.finished["abort"] += 1
                return False
            await sleep_until(start + offsets[b - 1])
            finish = "length" if b == n else None
            if chat:
                key = self.config.reasoning_field if b <= reasoning else "content"
                choice = {"index": 0, "delta": {key: text}, "logprobs": None}
            else:
                choice = {"index": 0, "text": text, "logprobs": None}
            choice.update(finish_reason=finish, stop_reason=None)
            doc = {**base, "choices": [choice], **self._usage(params, b, fault)}
            if bad is not None and bad[1] == ("last" if b == n else "middle" if
                                               b == n // 2 + 1 else ""):
                doc = spoil(doc, bad[0])
            event = sse(doc)
            if b == n // 2 + 1 and fault in ("bad_json", "bad_utf8"):
                event = _broken(event, fault)
            elif fault == "no_data":
                event = _without_data_field(event)
            sent = await write(writer, event)
            trace.content_chunk_s.append(sent)
            if trace.first_content_s is None:
                trace.first_content_s = sent
            trace.last_chunk_s = sent
            trace.completion_tokens += b - a
            self.counters.generation_tokens += b - a
        if n == 0:
            await sleep_until(start + self.config.ttft_s)
        if params.include_usage and fault != "no_usage":
            usage = {
                "prompt_tokens": params.prompt_tokens,
                "total_tokens": params.prompt_tokens + n,
                "completion_tokens": n,
            }
            doc = {**base, "choices": [], "usage": usage}
            usage_event = sse(spoil(doc, bad[0]) if bad is not None and bad[1] == "usage"
                              else doc)
            await write(writer, _without_data_field(usage_event) if fault == "no_data"
                        else usage_event)
        if fault == "no_data":
            await write(writer, _without_data_field(sse("[DONE]")))
        elif fault != "no_done":
            await write(writer, sse("[DONE]"))
        trace.last_chunk_s = await write(writer, LAST_CHUNK)
        self.counters.finished["stop" if n == 0 else "length"] += 1
        return keep

    async def _whole(
        self,
        writer: asyncio.StreamWriter,
        chat: bool,
        params: Params,
        fault: str | None,
        trace: Trace,
        keep: bool,
    ) -> bool:
        start = trace.start_s
        assert start is not None
        n = 0 if fault == "no_tokens" else params.max_tokens
        offsets = self._token_offsets(n)
        if fault == "drop_mid_stream":
            await sleep_until(start + offsets[n // 2])
            writer.close()
            self.counters.finished["abort"] += 1
            return False
        await sleep_until(start + (offsets[-1] if offsets else self.config.ttft_s))
        text = "".join(self._texts([(0, n)], fault)) if n else ""
        finish = "length" if n else "stop"
        usage = {
            "prompt_tokens": params.prompt_tokens,
            "total_tokens": params.prompt_tokens + n,
            "completion_tokens": n,
            "prompt_tokens_details": None,
        }
        if chat:
            message = {"role": "assistant", "content": text, "tool_calls": []}
            choice = {"index": 0, "message": message, "logprobs": None}
            kind = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None}
            kind = "text_completion"
        choice.update(finish_reason=finish, stop_reason=None)
        body = {
            "id": trace.request_id,
            "object": kind,
            "created": int(time.time()),
            "model": self.config.model,
            "choices": [choice],
            "usage": [1, 2] if fault == "bad_value" else usage,
        }
        trace.status = 200
        sent = await send_json(writer, 200, body, keep_alive=keep)
        trace.first_content_s = trace.last_chunk_s = sent
        if n:
            trace.content_chunk_s.append(sent)
        trace.completion_tokens = n
        self.counters.generation_tokens += n
        self.counters.finished["length" if n else "stop"] += 1
        return keep


def _broken(event: bytes, fault: str) -> bytes:
    """One SSE chunk spoiled: its JSON cut short (`bad_json`), or a UTF-8 sequence cut in half
    inside its text (`bad_utf8`); re-framed as one HTTP chunk."""
    payload = event.split(b"\r\n", 1)[1].rsplit(b"\r\n", 1)[0]  # `data: {...}\n\n`
    if fault == "bad_json":
        payload = payload[: len(payload) // 2] + b"\n\n"
    else:
        payload = payload.replace(b'"text":"', b'"text":"\xc3', 1).replace(
            b'"content":"', b'"content":"\xc3', 1)
    return http_chunk(payload)


def _without_data_field(event: bytes) -> bytes:
    """An SSE chunk whose `data: ` field name is gone (a bare line no SSE client reads)."""
    payload = event.split(b"\r\n", 1)[1].rsplit(b"\r\n", 1)[0]
    return http_chunk(payload.removeprefix(b"data: "))
