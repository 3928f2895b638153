"""A capacity step's stability check (vllm_slo/analysis/capacity.py `stability`): a steady
step is stable; a queue that grows in the server or, past the open loop's in-flight cap, in
the client is not."""

from __future__ import annotations

import numpy as np

from vllm_slo.analysis.capacity import stability
from vllm_slo.analysis.run_metrics import RunSeries

WINDOW_S = 20.0


def series(ttft_s: np.ndarray, queued_for_slot: int = 0) -> RunSeries:
    """A measured window of evenly sent requests with the given TTFTs."""
    sends = np.linspace(0.0, WINDOW_S, ttft_s.size, endpoint=False)
    empty = np.empty(0)
    return RunSeries(ttft_s=ttft_s, itl_s=empty, tpot_s=empty, e2e_s=ttft_s,
                     send_lag_s=np.zeros(ttft_s.size), window_start_unix_s=0.0,
                     window_s=WINDOW_S, requests=ttft_s.size, failed=0,
                     output_tokens_per_bin=empty, completions_per_bin=empty,
                     queued_for_slot=queued_for_slot, measured_send_unix_s=sends,
                     measured_latency_s={"ttft": ttft_s})


def test_a_steady_step_is_stable() -> None:
    steady = stability(series(np.full(200, 0.1)), [])
    assert steady.stable and steady.reason is None
    assert steady.ttft_quarter_medians_s == (0.1, 0.1, 0.1, 0.1)


def test_a_rising_ttft_is_a_growing_queue() -> None:
    rising = stability(series(np.linspace(0.05, 2.0, 200)), [])
    assert not rising.stable
    assert rising.reason is not None and "TTFT median rose" in rising.reason


def test_arrivals_held_back_by_the_clients_cap_are_a_queue_the_server_cannot_show() -> None:
    held = stability(series(np.full(200, 0.1), queued_for_slot=30), [])
    assert not held.stable
    assert held.reason is not None and "30 of 200 measured arrivals waited" in held.reason
    assert "max_in_flight" in held.reason
    # one or two late claims (a slot freed a moment after its arrival's time) are not a queue
    assert stability(series(np.full(200, 0.1), queued_for_slot=2), []).stable
