"""A rate SLO added in this one module, as a contributor or a plugin adds one: `send_rate`,
the measured requests *sent* per second (by intended send time) in each 1-s bin of the rate
span — the load the client actually offered, from data every run already holds. Importing the
module registers it (`metrics.register_metric`); from then on `slo: {send_rate: ">= 3 req/s"}`
validates, is judged, compared (`send_rate.mean`) and reported, with nothing else edited.
tests/unit/test_registered_metric.py imports it and unregisters it afterwards."""

from __future__ import annotations

import numpy as np

from vllm_slo.scenarios.metrics import MeasuredRun, Metric, MetricKind, register_metric


def sends_per_bin(run: MeasuredRun) -> np.ndarray:
    """Measured requests by intended send time, per second of each bin of the rate span."""
    widths = run.bin_widths()
    if run.window_start_unix_s is None or not widths.size:
        return np.zeros(widths.size)
    edges = run.window_start_unix_s + np.concatenate(([0.0], np.cumsum(widths)))
    counts, _ = np.histogram(run.measured_send_unix_s, bins=edges)
    rates: np.ndarray = counts / widths
    return rates


SEND_RATE = register_metric(Metric(
    "send_rate", MetricKind.RATE, "Send rate", "req/s", lower_is_better=False,
    samples=sends_per_bin, summary_field="", sampled_per="1-s bin"))
