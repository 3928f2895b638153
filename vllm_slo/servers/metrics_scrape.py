"""vLLM's Prometheus `/metrics`, scraped and parsed with prometheus_client's real parser.

A `MetricsRecorder` thread scrapes every interval during a run and appends one JSON line per
scrape to `server_metrics.jsonl` (gauges and counters of the `vllm:` families, histogram
`_sum`/`_count`), so the series survives a crash and the report can plot it.

The recorder never raises and never prints: a scrape that fails (no answer, an HTTP error, a
body that is not Prometheus text, a line that cannot be written because the run folder went
away) is counted with its reason, and `warnings` names them once the run is over. No verdict
rests on /metrics (every SLO is judged on the rows), so a run goes on without them.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from vllm_slo.transport.http_stream import HttpStreamClient

REASON_CHARS = 160  # how much of a failure's text a warning quotes


def parse_vllm_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {'vllm:num_requests_running{engine="0",...}': 3.0, ...}, for the
    `vllm:` families only (histogram buckets dropped; _sum and _count kept). Raises
    ValueError on text that is not Prometheus's (prometheus_client's parser's words)."""
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


@dataclass(frozen=True, slots=True)
class Scrape:
    """One scrape: the parsed values, or why there are none (`kind`: `http` for no answer or
    an HTTP error, `parse` for a body that is not Prometheus text; `reason` in words)."""

    values: dict[str, float] | None
    kind: str | None = None
    reason: str | None = None


def _short(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= REASON_CHARS else first[:REASON_CHARS] + "..."


def parse_scrape(status: int, body: bytes, transport_error: str | None = None) -> Scrape:
    """Pure: one /metrics answer read; never raises."""
    if transport_error:
        return Scrape(None, "http", f"no answer ({_short(transport_error)})")
    if status != 200:
        return Scrape(None, "http", f"HTTP {status}")
    try:
        return Scrape(parse_vllm_metrics(body.decode("utf-8", "replace")))
    except Exception as error:  # a third-party parser on a server's bytes
        return Scrape(None, "parse", f"not Prometheus text ({type(error).__name__}: "
                                     f"{_short(str(error))})")


def scrape_metrics(base_url: str, timeout_s: float = 10.0) -> Scrape:
    """GET /metrics once; never raises."""
    client = HttpStreamClient(base_url, timeout_s=timeout_s)
    try:
        response = client.request("GET", "/metrics")
    finally:
        client.close()
    return parse_scrape(response.status, response.body, response.transport_error)


def scrape(base_url: str, timeout_s: float = 10.0) -> dict[str, float] | None:
    """The parsed values of one scrape, None when there are none (see `scrape_metrics`)."""
    return scrape_metrics(base_url, timeout_s).values


class MetricsRecorder:
    """Background scraper: one line per scrape in server_metrics.jsonl, from start to stop;
    scrapes that failed are counted by reason (`warnings`)."""

    def __init__(self, base_url: str, path: Path, interval_s: float = 2.0):
        self.base_url = base_url
        self.path = path
        self.interval_s = interval_s
        self.first_values: dict[str, float] | None = None
        self.scrapes = 0
        self.recorded = 0
        self.failures: Counter[str] = Counter()  # kind -> count (http | parse | write)
        self.first_reason: dict[str, str] = {}  # kind -> the first failure's words
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-recorder", daemon=True)

    def start(self) -> MetricsRecorder:
        """Scrape once now (kept as `first_values`: what the server exports at the start) and
        then every interval in the background."""
        self.first_values = self._scrape_and_write()
        self._thread.start()
        return self

    def start_warning(self) -> str | None:
        """What went wrong with the first scrape, when its body was not Prometheus text (a
        server without /metrics, HTTP 404, is not warned of: it exports none)."""
        if self.failures["parse"]:
            return (f"server /metrics at the start: {self.first_reason['parse']}; the run goes "
                    "on (no SLO reads /metrics), and server metrics are recorded only from "
                    "scrapes that parse")
        return None

    def _failed(self, kind: str, reason: str) -> None:
        self.failures[kind] += 1
        self.first_reason.setdefault(kind, reason)

    def _scrape_and_write(self) -> dict[str, float] | None:
        """One scrape, its line appended; every failure counted, none raised."""
        self.scrapes += 1
        try:
            result = scrape_metrics(self.base_url)
        except Exception as error:  # the recorder must not end a run
            result = Scrape(None, "http", f"{type(error).__name__}: {_short(str(error))}")
        if result.values is None:
            self._failed(result.kind or "http", result.reason or "no values")
            return None
        try:
            with open(self.path, "a") as sink:
                sink.write(json.dumps({"unix_s": time.time(), "values": result.values}) + "\n")
        except (OSError, ValueError) as error:  # the run folder removed, a full disk
            self._failed("write", f"{self.path} could not be written "
                                  f"({type(error).__name__}: {_short(str(error))})")
            return result.values
        self.recorded += 1
        return result.values

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._scrape_and_write()

    def stop(self) -> None:
        """Stop scraping, after one last scrape (the run's closing counter values)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=15)
        self._scrape_and_write()

    @property
    def warnings(self) -> list[str]:
        """The failed scrapes in words, one line for all of them (none when every scrape was
        recorded, or when the server exports no /metrics at all: every scrape an HTTP error
        and none recorded)."""
        failed = sum(self.failures.values())
        exports_none = self.recorded == 0 and set(self.failures) == {"http"}
        if not failed or exports_none:
            return []
        reasons = "; ".join(f"{count} {kind}: {self.first_reason[kind]}"
                            for kind, count in sorted(self.failures.items()))
        return [f"server /metrics: {failed} of {self.scrapes} scrapes not recorded "
                f"({reasons}); the verdict rests on the rows, which this does not touch"]
