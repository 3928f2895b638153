"""What a server says about itself (`/v1/models`, `/version`) is checked where the suite reads
it (vllm_slo/servers/readiness.py): a shape the run can do without is a named warning, one it
cannot is a usage error (exit 2) at once, never an internal error; a `served_model_name` the
server does not list, and `https://` to a plain-HTTP server, are exit 2 within seconds.

The server is a tiny hostile one of this file's own: a real OpenAI-shaped answer on every path
unless the test replaces one."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from vllm_slo.scenarios.errors import ExitCode, ScenarioError, ServerError
from vllm_slo.servers.readiness import (
    ModelList,
    read_model_list,
    read_version,
    wait_until_ready,
)

SSE = (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
       b'data: {"choices":[],"usage":{"completion_tokens":1}}\n\ndata: [DONE]\n\n')
GOOD = {"/health": b"", "/version": b'{"version":"0.32.0"}',
        "/v1/models": b'{"object":"list","data":[{"id":"m","max_model_len":2048}]}'}


@contextmanager
def hostile_server(answers: dict[str, bytes]) -> Iterator[str]:
    """GET answers by path (JSON bodies), 404 elsewhere; POST streams SSE."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            body = answers.get(self.path)
            self._send(404 if body is None else 200, body or b"{}", "application/json")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._send(200, SSE, "text/event-stream")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _ready(answers: dict[str, bytes], model_name: str | None = None, timeout_s: float = 5.0,
           scheme: str = "http") -> object:
    with hostile_server({**GOOD, **answers}) as url:
        return wait_until_ready(url.replace("http", scheme, 1), timeout_s, model_name,
                                poll_s=0.05)


def test_a_well_formed_server_is_read_without_warnings() -> None:
    ready = _ready({})
    assert (ready.model_id, ready.max_model_len, ready.version, ready.warnings) == (
        "m", 2048, "0.32.0", ())


@pytest.mark.parametrize(("models", "named"), [
    (b'{"data":["m","n"]}', "2 entries and none is a model object with a string id: ['m', 'n']"),
    (b'{"data":[{"id":7}]}', "1 entry and none is a model object with a string id: [{'id': 7}]"),
    (b'{"data":[{"name":"m"}]}', "string id: [{'name': 'm'}]"),
    (b'{"data":{"id":"m"}}', "not OpenAI's model list"),
    (b'["m"]', "not OpenAI's model list"),
    (b'7', "not OpenAI's model list"),
    (b'<html>models</html>', "not OpenAI's model list"),
])
def test_a_model_list_without_a_string_id_is_exit_2_at_once(models: bytes, named: str) -> None:
    started = time.monotonic()
    with pytest.raises(ScenarioError) as caught:
        _ready({"/v1/models": models}, timeout_s=30.0)
    assert time.monotonic() - started < 5  # not the ready_timeout
    assert caught.value.exit_code == ExitCode.USAGE_ERROR
    assert "not an OpenAI-compatible server" in str(caught.value)
    assert named in str(caught.value)


def test_entries_without_a_string_id_are_ignored_by_name_beside_good_ones() -> None:
    ready = _ready({"/v1/models": b'{"data":[7,{"id":5},{"id":"m","max_model_len":512}]}'})
    assert (ready.model_id, ready.served_models, ready.max_model_len) == ("m", ("m",), 512)
    assert ready.warnings == (
        "/v1/models data[0] is 7, not a model object with a string id: ignored",
        "/v1/models data[1] is {'id': 5}, not a model object with a string id: ignored")


@pytest.mark.parametrize("length", ['"2048"', "-1", "0", "true", "2048.5", "null", "[2048]"])
def test_a_max_model_len_that_is_not_a_positive_integer_is_ignored(length: str) -> None:
    ready = _ready({"/v1/models": b'{"data":[{"id":"m","max_model_len":%s}]}'
                    % length.encode()})
    assert ready.max_model_len is None
    if length == "null":  # not said: nothing to warn of
        assert ready.warnings == ()
    else:
        assert ready.warnings == (
            f"/v1/models max_model_len of 'm' is {json.loads(length)!r}, not a positive "
            "integer: ignored (prompts are not trimmed to the server's context)",)


@pytest.mark.parametrize(("body", "said"), [
    (b'{"version":{"major":0}}', "a version of {'major': 0}"),
    (b'{"version":32}', "a version of 32"),
    (b'{"v":"0.32"}', "a version of None"),
    (b'32', "32"),
    (b'"0.32.0"', "'0.32.0'"),
    (b'not json', "'not json'"),
])
def test_a_version_that_is_not_a_string_is_unknown_with_a_warning(body: bytes,
                                                                   said: str) -> None:
    ready = _ready({"/version": body})
    assert ready.version is None
    assert ready.warnings == (f"/version answered {said}, not a version string: recorded as "
                              "unknown",)


def test_a_server_without_version_is_unknown_without_a_warning() -> None:
    with hostile_server({k: v for k, v in GOOD.items() if k != "/version"}) as url:
        ready = wait_until_ready(url, 5.0, poll_s=0.05)
    assert (ready.version, ready.warnings) == (None, ())


def test_a_served_model_name_the_server_does_not_list_is_exit_2_naming_both() -> None:
    with pytest.raises(ScenarioError) as caught:
        _ready({"/v1/models": b'{"data":[{"id":"a"},{"id":"b"}]}'}, model_name="c")
    assert caught.value.exit_code == ExitCode.USAGE_ERROR
    message = str(caught.value)
    assert message.startswith("server.served_model_name = 'c': ")
    assert "lists 'a', 'b'" in message and "nothing was sent" in message


def test_https_to_a_plain_http_server_says_so_within_seconds() -> None:
    started = time.monotonic()
    with pytest.raises(ScenarioError) as caught:
        _ready({}, timeout_s=30.0, scheme="https")
    assert time.monotonic() - started < 10
    message = str(caught.value)
    assert "speaks plain HTTP, not TLS" in message and "use 'http://127.0.0.1:" in message
    assert "answered nothing" not in message


def test_a_tls_failure_that_is_not_plain_http_is_named_not_misread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A certificate this host does not trust (the server does speak TLS): waited on, the
    handshake's words in the message; no plain-HTTP probe, no "speaks plain HTTP"."""
    from vllm_slo.servers import readiness

    error = "SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED] self-signed"
    monkeypatch.setattr(readiness, "_get_json", lambda client, path: (0, error))
    monkeypatch.setattr(readiness, "plain_http_status", lambda url: pytest.fail("probed"))
    with pytest.raises(ServerError) as caught:
        wait_until_ready("https://127.0.0.1:9", 0.3, poll_s=0.05)
    assert str(caught.value).endswith(f"/health answered nothing (the TLS handshake failed: "
                                      f"{error})")


def test_a_path_that_404s_on_health_is_named_while_waiting() -> None:
    with hostile_server(GOOD) as url, pytest.raises(ServerError) as caught:
        wait_until_ready(f"{url}/api", 0.5, poll_s=0.05)
    assert f"the suite asks {url}/api/health: is '/api' part of the server's root?" in str(
        caught.value)


def test_the_pure_readers_never_raise_on_any_json_value() -> None:
    for value in (None, 1, 1.5, "x", [], {}, [None], {"data": None}, {"data": [[]]},
                  {"data": [{"id": "m", "max_model_len": float("nan")}]}):
        listing = read_model_list(value)
        assert isinstance(listing, ModelList)
        version, warning = read_version(200, value)
        assert version is None and warning is not None
    assert read_model_list({"data": []}) == ModelList((), {})  # none listed yet: wait
    assert read_version(404, "x") == (None, None)
