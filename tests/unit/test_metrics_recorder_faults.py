"""The /metrics recorder (vllm_slo/servers/metrics_scrape.py) never raises and never prints a
traceback: a body that is not Prometheus text at the start or mid-run, a server that stops
answering, and a run folder deleted under it are each counted as a failed scrape, with a
named warning; the scrapes that parsed are kept."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from vllm_slo.servers.metrics_scrape import MetricsRecorder, Scrape, parse_scrape, scrape

PROMETHEUS = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3.0\n"
HTML = b"<html><body>metrics live elsewhere</body></html>"


@contextmanager
def metrics_server(bodies: list[tuple[int, bytes]]) -> Iterator[str]:
    """Answers GET /metrics with the first of `bodies` and drops it, so a test scripts what
    each scrape meets (the last body stays)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            status, body = bodies[0] if len(bodies) == 1 else bodies.pop(0)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def thread_errors(monkeypatch: pytest.MonkeyPatch) -> list[threading.ExceptHookArgs]:
    """What would have printed a thread's traceback."""
    caught: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", caught.append)
    return caught


@pytest.mark.parametrize("body", [HTML, b'{"a": 1}', b"vllm:x{a=\"b\"} notanumber\n",
                                  b"\x00\xff\xfe", b"vllm:x 1\n" * 3 + b"}{"])
def test_a_body_that_is_not_prometheus_is_a_named_failure(body: bytes) -> None:
    result = parse_scrape(200, body)
    assert result.values is None and result.kind == "parse"
    assert result.reason is not None and result.reason.startswith("not Prometheus text (")


def test_answers_that_are_not_200_are_failures_of_their_own_kind() -> None:
    assert parse_scrape(404, b"") == Scrape(None, "http", "HTTP 404")
    assert parse_scrape(0, b"", "ConnectionRefusedError: [Errno 111]") == Scrape(
        None, "http", "no answer (ConnectionRefusedError: [Errno 111])")
    assert parse_scrape(200, PROMETHEUS).values == {"vllm:num_requests_running": 3.0}


def test_a_non_prometheus_body_at_the_start_is_a_warning_and_scraping_goes_on(
        tmp_path: Path, thread_errors: list[threading.ExceptHookArgs]) -> None:
    path = tmp_path / "server_metrics.jsonl"
    with metrics_server([(200, HTML), (200, PROMETHEUS)]) as url:
        recorder = MetricsRecorder(url, path, interval_s=0.05).start()
        assert recorder.first_values is None
        warning = recorder.start_warning()
        assert warning is not None and warning.startswith(
            "server /metrics at the start: not Prometheus text (ValueError: ")
        time.sleep(0.3)
        recorder.stop()
    assert scrape(url) is None  # the server is gone: None, not an exception
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines and all(line["values"] == {"vllm:num_requests_running": 3.0} for line in lines)
    assert recorder.failures == {"parse": 1}
    [summary] = recorder.warnings
    assert summary.startswith(f"server /metrics: 1 of {recorder.scrapes} scrapes not recorded "
                              "(1 parse: not Prometheus text (ValueError: ")
    assert thread_errors == []


def test_a_bad_body_mid_run_and_a_deleted_run_folder_are_counted_not_raised(
        tmp_path: Path, thread_errors: list[threading.ExceptHookArgs],
        capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / "server_metrics.jsonl"
    bodies = [(200, PROMETHEUS), (200, PROMETHEUS), (200, HTML), (500, b"oops"),
              (200, PROMETHEUS)]
    with metrics_server(bodies) as url:
        recorder = MetricsRecorder(url, path, interval_s=0.05).start()
        assert recorder.start_warning() is None
        while len(bodies) > 1:  # every scripted answer served
            time.sleep(0.02)
        time.sleep(0.1)
        shutil.rmtree(folder)  # the run folder deleted mid-run
        time.sleep(0.2)
        recorder.stop()
    assert recorder.failures["parse"] == 1 and recorder.failures["http"] == 1
    assert recorder.failures["write"] >= 2  # the loop's scrapes after the delete, and stop's
    assert recorder.recorded >= 3
    [summary] = recorder.warnings
    assert "1 http: HTTP 500" in summary and "1 parse: not Prometheus text" in summary
    assert f"write: {path} could not be written (FileNotFoundError" in summary
    assert summary.endswith("the verdict rests on the rows, which this does not touch")
    assert thread_errors == []
    assert "Traceback" not in capsys.readouterr().err


def test_a_server_that_exports_no_metrics_is_not_warned_of(tmp_path: Path) -> None:
    with metrics_server([(404, b"")]) as url:
        recorder = MetricsRecorder(url, tmp_path / "m.jsonl", interval_s=0.05).start()
        time.sleep(0.15)
        recorder.stop()
    assert recorder.failures["http"] >= 2 and recorder.recorded == 0
    assert recorder.start_warning() is None and recorder.warnings == []
