"""Fault injection: the fault kinds, the request header that asks for one, and the seeded
choice of which requests get the configured fault.

A fault comes from ``StandinConfig.fault_kind`` with probability ``fault_rate``, or per request
from the header ``x-standin-fault: <kind>`` (``none`` forces a normal answer). What each kind
does:

* ``http_500`` / ``http_503``: that status at once, with a vLLM-shaped JSON error body (503
  with the configured ``Retry-After``, ``StandinConfig.retry_after``).
* ``sse_error``: streaming: HTTP 200, one SSE ``{"error": {..., "code": 503}}`` event, then
  ``[DONE]`` (vLLM under ``--max-num-queued-reqs``); non-streaming: HTTP 503 (as vLLM does).
* ``no_tokens``: HTTP 200, the role chunk (chat), then at ``ttft_s`` the usage chunk (when asked
  for) with ``completion_tokens: 0`` and ``[DONE]``; non-streaming: empty content.
* ``drop_mid_stream``: the socket is closed (FIN, no terminating chunk) at the moment token
  ``max_tokens // 2`` would be sent, i.e. after half the tokens.
* ``hang``: streaming: HTTP 200 headers, then nothing until the client disconnects;
  non-streaming: nothing at all.
* ``http_429``: HTTP 429 with ``Retry-After`` (``StandinConfig.retry_after``, 1 s unless set
  otherwise or off) and a vLLM-shaped JSON error body.
* ``bad_json`` / ``bad_utf8``: streaming: the middle token chunk's payload is cut short
  (not JSON) / carries a truncated UTF-8 sequence; the rest of the stream is normal.
* ``no_done``: streaming: every token and the usage chunk, but no ``data: [DONE]``.
* ``not_sse``: streaming asked for, a whole JSON completion (``application/json``) returned.
* ``no_data``: streaming: every event written without its ``data: `` field name (a bare JSON
  line), ``[DONE]`` too: an SSE body without a single data event.
* ``no_usage``: streaming: no usage at all although ``stream_options`` asked for it (neither
  the final usage chunk nor per-chunk ``continuous_usage_stats``): a success whose token
  count the client cannot know.
* ``xss``: normal timing, but the content tokens carry HTML/JS payloads (report-escaping tests).
* ``bad_value``: streaming: well-framed JSON with one value of the wrong type or range; each
  faulted request takes the next of ``BAD_VALUES`` in turn: ``finish_reason: 7``,
  ``completion_tokens: "16"`` / ``2^40`` / ``NaN`` / ``-5`` in the usage chunk, a per-chunk
  ``completion_tokens`` that falls, ``"usage": [1, 2]``, ``"delta": "hello"`` (chat; a
  completion's ``"text": 7``). Non-streaming: ``"usage": [1, 2]``.

The configured kind ``mixed`` gives each faulted request the next kind of ``MIXED_KINDS`` in
turn (every way to fail, reproducibly: a hostile server for end-to-end tests).

The answers that replace a request's normal serving (``http_*``, ``sse_error``, ``hang``) are
sent by ``app.StandinApp``; the ones that change the generated tokens (``no_tokens``,
``drop_mid_stream``, ``xss``) by ``engine.Engine``.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from typing import Any

FAULT_KINDS: tuple[str, ...] = (
    "http_500",
    "http_503",
    "http_429",
    "sse_error",
    "no_tokens",
    "drop_mid_stream",
    "hang",
    "bad_json",
    "bad_utf8",
    "no_done",
    "not_sse",
    "no_data",
    "no_usage",
    "xss",
    "bad_value",
)
MIXED = "mixed"  # as a configured kind: each faulted request takes the next kind in turn
# every way to fail (no_usage and xss are answers the suite must take as successes)
MIXED_KINDS = tuple(kind for kind in FAULT_KINDS if kind not in ("xss", "no_usage"))
FAULT_HEADER = "x-standin-fault"
NO_FAULT = "none"

BUSY_MESSAGE = "The engine is currently busy, please retry later (standin injected fault)."
XSS_PAYLOADS: tuple[str, ...] = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>')
XSS_WORDS = (" " + XSS_PAYLOADS[0], " " + XSS_PAYLOADS[1], " &amp;", " '")


# bad_value's spoils, in turn: (name, the chunk it spoils: the last token chunk, the middle
# one, or the final usage chunk)
BAD_VALUES: tuple[tuple[str, str], ...] = (
    ("finish_reason_int", "last"),
    ("count_string", "usage"),
    ("count_huge", "usage"),
    ("count_nan", "usage"),
    ("count_negative", "usage"),
    ("count_falls", "middle"),
    ("usage_list", "usage"),
    ("delta_string", "middle"),
)


def spoil(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """A chunk (or a whole completion) with the value `name` spoils replaced; a new dict."""
    doc = copy.deepcopy(doc)
    choices = doc.get("choices") or [{}]
    usage = doc.get("usage")
    if name == "finish_reason_int":
        choices[0]["finish_reason"] = 7
    elif name == "usage_list":
        doc["usage"] = [1, 2]
    elif name == "delta_string":
        if "delta" in choices[0]:
            choices[0]["delta"] = "hello"
        else:
            choices[0]["text"] = 7
    elif isinstance(usage, dict):
        usage["completion_tokens"] = {"count_string": str(usage.get("completion_tokens")),
                                      "count_huge": 2**40, "count_nan": float("nan"),
                                      "count_negative": -5, "count_falls": 0}[name]
    return doc


class UnknownFaultError(ValueError):
    """The fault header names no fault kind (answered with HTTP 400)."""


class FaultPicker:
    """Decides each request's fault: the header's if it has one, else the configured kind with
    probability `rate`, drawn from a generator seeded with `seed` (reproducible runs)."""

    def __init__(self, kind: str | None, rate: float, seed: int) -> None:
        self._kind = kind
        self._rate = rate
        self._rng = random.Random(f"fault:{seed}")
        self._turn = 0

    def decide(self, headers: Mapping[str, str]) -> str | None:
        """The fault for a request with these (lower-case) headers; None: a normal answer."""
        requested = headers.get(FAULT_HEADER)
        if requested is not None:
            requested = requested.strip().lower()
            if requested == NO_FAULT:
                return None
            if requested not in FAULT_KINDS:
                raise UnknownFaultError(
                    f"{FAULT_HEADER}: unknown fault {requested!r}; "
                    f"allowed: {NO_FAULT}, {', '.join(FAULT_KINDS)}"
                )
            return requested
        if self._kind is None:
            return None
        if self._rng.random() >= self._rate:
            return None
        if self._kind == MIXED:
            self._turn += 1
            return MIXED_KINDS[(self._turn - 1) % len(MIXED_KINDS)]
        return self._kind
