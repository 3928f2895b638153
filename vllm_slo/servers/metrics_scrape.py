"""vLLM's Prometheus `/metrics`, scraped and parsed with prometheus_client's real parser.

A `MetricsRecorder` thread scrapes every interval during a run and appends one JSON line per
scrape to `server_metrics.jsonl` (gauges and counters of the `vllm:` families, histogram
`_sum`/`_count`), so the series survives a crash and the report can plot it.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from vllm_slo.transport.http_stream import HttpStreamClient


def parse_vllm_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {'vllm:num_requests_running{engine="0",...}': 3.0, ...}, for the
    `vllm:` families only (histogram buckets dropped; _sum and _count kept)."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("vllm:"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket") or sample.name.endswith("_created"):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = float(sample.value)
    return values


def scrape(base_url: str, timeout_s: float = 10.0) -> dict[str, float] | None:
    client = HttpStreamClient(base_url, timeout_s=timeout_s)
    try:
        response = client.request("GET", "/metrics")
    finally:
        client.close()
    if response.transport_error or response.status != 200:
        return None
    return parse_vllm_metrics(response.body.decode("utf-8", "replace"))


class MetricsRecorder:
    """Background scraper: one line per scrape in server_metrics.jsonl, from start to stop."""

    def __init__(self, base_url: str, path: Path, interval_s: float = 2.0):
        self.base_url = base_url
        self.path = path
        self.interval_s = interval_s
        self.first_values: dict[str, float] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-recorder", daemon=True)

    def start(self) -> MetricsRecorder:
        """Scrape once now (kept as `first_values`: what the server exports at the start) and
        then every interval in the background."""
        self.first_values = scrape(self.base_url)
        self._write(self.first_values)
        self._thread.start()
        return self

    def _write(self, values: dict[str, float] | None) -> None:
        if values is None:
            return
        with open(self.path, "a") as sink:
            sink.write(json.dumps({"unix_s": time.time(), "values": values}) + "\n")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._write(scrape(self.base_url))

    def stop(self) -> None:
        """Stop scraping, after one last scrape (the run's closing counter values)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        self._write(scrape(self.base_url))
