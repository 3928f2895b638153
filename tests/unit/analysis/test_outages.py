"""Outages: spans of requests that got no response at all, in send order."""

from __future__ import annotations

import numpy as np

from vllm_slo.analysis.outages import find_outages


def test_a_span_of_unanswered_requests_to_the_end_is_an_outage() -> None:
    sends = np.arange(20) * 0.5  # one request every 0.5 s
    answered = np.array([True] * 12 + [False] * 8)
    errors = [None] * 12 + ["ConnectionRefusedError: [Errno 111]"] * 8
    (outage,) = find_outages(sends, answered, errors)
    assert outage.start_unix_s == 6.0 and outage.end_unix_s == 9.5
    assert outage.requests == 8 and outage.to_the_end
    assert outage.first_error.startswith("ConnectionRefused")
    text = outage.reason(run_start_unix_s=0.0)
    assert "+6.0 s into the run" in text and "until the end of the run" in text
    assert "8 requests got no response" in text


def test_isolated_errors_and_short_blips_are_not_outages() -> None:
    sends = np.arange(10) * 0.1
    blip = np.array([True, False, False, False, True, True, False, True, True, True])
    assert find_outages(sends, blip, [None] * 10) == ()  # 0.2 s: shorter than a second
    spread = np.arange(10) * 2.0
    two = np.array([True, False, False, True] + [True] * 6)
    assert find_outages(spread, two, [None] * 10) == ()  # only 2 requests


def test_a_recovered_outage_has_its_duration_and_order_does_not_matter() -> None:
    sends = np.arange(30) * 0.25
    answered = np.ones(30, bool)
    answered[8:20] = False
    shuffled = np.random.default_rng(0).permutation(30)
    (outage,) = find_outages(sends[shuffled], answered[shuffled], ["reset"] * 30)
    assert outage.requests == 12 and not outage.to_the_end
    assert outage.duration_s == 11 * 0.25
    assert "for 2.8 s" in outage.reason(0.0)
