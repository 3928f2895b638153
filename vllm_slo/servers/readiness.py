"""Readiness means one real completion: /health, then /v1/models, then one streamed request.

What the server says about itself is checked where it is read (`read_model_list`,
`read_version`): an answer of the wrong shape is a named warning when the run can go on without
it (a `max_model_len` that is not a positive integer, a `/version` that is not a string) and a
usage error (exit 2) when it cannot (a `/v1/models` that lists no model by a string id, a
`served_model_name` it does not list, `https://` to a server that speaks plain HTTP)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from vllm_slo.scenarios.errors import ScenarioError, ServerError
from vllm_slo.transport.http_stream import HttpStreamClient

# /health, /v1/models and /version answer at once on a live vLLM (and refuse the connection
# before it listens); a listener that accepts and never answers (another process that won the
# race for the port) is given up after this, so a dead launch is noticed in seconds, not 30 s
METADATA_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 30.0  # the probe completion: a cold server's first request may take long
WAITING_EVERY_S = 30.0  # how often a wait says it is still waiting (a GPU start takes minutes)
QUOTED_CHARS = 120  # how much of a malformed answer a message quotes


@dataclass(frozen=True, slots=True)
class ReadyServer:
    base_url: str
    model_id: str
    max_model_len: int | None
    version: str | None
    ready_after_s: float
    served_models: tuple[str, ...] = ()  # /v1/models' ids: the base model, LoRA adapters
    # what the server said of itself in a shape the suite could not use (named, then ignored)
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ModelList:
    """`/v1/models` as read: the ids (strings), each one's `max_model_len` (None: not said or
    unusable), and what was ignored; `problem` says why no id could be read."""

    ids: tuple[str, ...]
    max_model_lens: dict[str, int | None]
    warnings: tuple[str, ...] = ()
    problem: str | None = None


def _quoted(value: object) -> str:
    text = repr(value)
    return text if len(text) <= QUOTED_CHARS else text[:QUOTED_CHARS] + "..."


def _positive_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def read_model_list(payload: object) -> ModelList:
    """Pure: a 200 answer of `/v1/models` (parsed JSON) read as OpenAI's model list, `{"data":
    [{"id": "m", "max_model_len": 2048}, ...]}`. An entry without a string id and a
    `max_model_len` that is not a positive integer are ignored with a warning; an answer of
    another shape, or one whose entries all lack a string id, is a `problem`."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        return ModelList((), {}, problem=f"/v1/models answered {_quoted(payload)}, not "
                                         "OpenAI's model list (an object with a `data` list)")
    ids: list[str] = []
    lengths: dict[str, int | None] = {}
    warnings: list[str] = []
    for index, entry in enumerate(data):
        model_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(model_id, str) or not model_id:
            warnings.append(f"/v1/models data[{index}] is {_quoted(entry)}, not a model "
                            "object with a string id: ignored")
            continue
        assert isinstance(entry, dict)
        length = entry.get("max_model_len")
        lengths[model_id] = _positive_int(length)
        if length is not None and lengths[model_id] is None:
            warnings.append(f"/v1/models max_model_len of {model_id!r} is {_quoted(length)}, "
                            "not a positive integer: ignored (prompts are not trimmed to the "
                            "server's context)")
        ids.append(model_id)
    if data and not ids:
        return ModelList((), {}, tuple(warnings), problem=(
            f"/v1/models lists {len(data)} entr{'y' if len(data) == 1 else 'ies'} and none is "
            f"a model object with a string id: {_quoted(data)}"))
    return ModelList(tuple(ids), lengths, tuple(warnings))


def read_version(status: int, payload: object) -> tuple[str | None, str | None]:
    """Pure: `/version`'s answer -> (the version, a warning). A server without /version (not
    200) has no version and no warning; a 200 whose `version` is not a string has a warning."""
    if status != 200:
        return None, None
    version = payload.get("version") if isinstance(payload, dict) else None
    if isinstance(version, str):
        return version, None
    said = f"a version of {_quoted(version)}" if isinstance(payload, dict) else \
        _quoted(payload)
    return None, f"/version answered {said}, not a version string: recorded as unknown"


def url_with_scheme(base_url: str, scheme: str) -> str:
    return urlunsplit(urlsplit(base_url)._replace(scheme=scheme))


def plain_http_status(base_url: str, timeout_s: float = METADATA_TIMEOUT_S) -> int | None:
    """The status an `https://` server's host and port answer to plain HTTP (`/health`), None
    when they do not: tells "this server speaks plain HTTP" from "nothing answers"."""
    client = HttpStreamClient(url_with_scheme(base_url, "http"), timeout_s=timeout_s)
    try:
        response = client.request("GET", "/health")
    finally:
        client.close()
    return None if response.transport_error else response.status


# OpenSSL's words for a peer that answered a TLS hello with something else (plain HTTP);
# a certificate that fails verification is not one of them
_NOT_TLS = ("WRONG_VERSION_NUMBER", "wrong version number", "record layer failure",
            "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST", "UNKNOWN_PROTOCOL")


def _tls_refused(base_url: str, transport_error: str) -> None:
    """Raises ScenarioError when an `https://` URL's TLS handshake failed because the server
    speaks plain HTTP there (its words say the peer is not TLS, and plain HTTP answers)."""
    if not base_url.startswith("https://") or not any(
            words in transport_error for words in _NOT_TLS):
        return
    status = plain_http_status(base_url)
    if status is not None:
        raise ScenarioError(
            f"server.url = {base_url!r}: the server speaks plain HTTP, not TLS (the TLS "
            f"handshake failed: {transport_error}; plain HTTP answered /health with "
            f"{status}): use {url_with_scheme(base_url, 'http')!r}")


def _get_json(client: HttpStreamClient, path: str) -> tuple[int, object]:
    """(status, parsed JSON body) — the body's first 200 characters when it is not JSON;
    (0, the transport error) when nothing answered."""
    response = client.request("GET", path)
    if response.transport_error:
        return 0, response.transport_error
    try:
        return response.status, json.loads(response.body or b"null")
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past Python's limit
        return response.status, response.body[:200].decode("utf-8", "replace")


def _choice_has_content(choice: object) -> bool:
    if not isinstance(choice, dict):
        return False
    delta = choice.get("delta")
    return bool((isinstance(delta, dict) and delta.get("content")) or choice.get("text"))


def _has_content(payload: dict[str, object]) -> bool:
    choices = payload.get("choices")
    return isinstance(choices, list) and any(map(_choice_has_content, choices))


def probe_completion(client: HttpStreamClient, model_id: str) -> str | None:
    """One streamed chat completion (completions if the model has no chat template).
    Returns None when tokens streamed back, else what went wrong."""
    problems = []
    for path, request in (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Say hello."}]}),
        ("/v1/completions", {"prompt": "Hello"}),
    ):
        body = json.dumps({"model": model_id, "max_tokens": 4, "stream": True,
                           "stream_options": {"include_usage": True}, **request}).encode()
        response = client.request("POST", path, body)
        if response.transport_error or response.status != 200:
            problems.append(f"{path}: {response.status} {response.transport_error or ''}"
                            f"{response.body[:300].decode('utf-8', 'replace')}")
            continue
        try:
            payloads = [json.loads(data) for _, data in response.events if data != b"[DONE]"]
        except (ValueError, RecursionError) as error:
            problems.append(f"{path}: malformed SSE payload ({type(error).__name__})")
            continue
        odd = next((payload for payload in payloads if not isinstance(payload, dict)), None)
        if odd is not None:
            problems.append(f"{path}: an SSE payload is {_quoted(odd)}, not a JSON object")
            continue
        if any("error" in payload for payload in payloads):
            problems.append(f"{path}: error event {payloads}")
            continue
        if any(payload.get("usage") or _has_content(payload) for payload in payloads):
            return None  # (a server that streams tokens but no usage is measured, and warned of)
        problems.append(f"{path}: stream ended without a content token or a usage chunk")
    return "; ".join(problems)


def wait_until_ready(
    base_url: str,
    timeout_s: float,
    model_name: str | None = None,
    server_failure: Callable[[], str | None] = lambda: None,
    api_key: str | None = None,
    poll_s: float = 0.5,
    on_waiting: Callable[[str], None] | None = None,
    waiting_every_s: float = WAITING_EVERY_S,
) -> ReadyServer:
    """Block until the server answers all three checks or raise ServerError at the deadline;
    ScenarioError at once when waiting cannot help (see the module's docstring).
    `server_failure()` returns a reason when a launched server died (checked every poll);
    `on_waiting(text)` is told every `waiting_every_s` how long it has waited and for what."""
    started = time.monotonic()
    deadline = started + timeout_s
    next_word_at = started + waiting_every_s
    client = HttpStreamClient(base_url, timeout_s=METADATA_TIMEOUT_S, api_key=api_key)
    prober = HttpStreamClient(base_url, timeout_s=PROBE_TIMEOUT_S, api_key=api_key)
    last_problem = "no answer yet"
    try:
        while (now := time.monotonic()) < deadline:
            if on_waiting is not None and now >= next_word_at:
                on_waiting(f"{base_url} not ready after {now - started:.0f}s of "
                           f"{timeout_s:.0f}s: {last_problem}")
                next_word_at = now + waiting_every_s
            died = server_failure()
            if died is not None:
                raise ServerError(died)
            status, answer = _get_json(client, "/health")
            if status != 200:
                last_problem = f"/health answered {status or 'nothing'}"
                if status == 0 and "SSL" in str(answer):  # e.g. a certificate not trusted here
                    _tls_refused(base_url, str(answer))
                    last_problem += f" (the TLS handshake failed: {str(answer)[:200]})"
                if status == 404 and urlsplit(base_url).path.strip("/"):
                    last_problem += (f" (the suite asks {base_url}/health: is "
                                     f"{urlsplit(base_url).path!r} part of the server's root?)")
                client.close()
                time.sleep(poll_s)
                continue
            status, models = _get_json(client, "/v1/models")
            if status != 200:
                last_problem = f"/v1/models answered {status}: {_quoted(models)}"
                time.sleep(poll_s)
                continue
            listing = read_model_list(models)
            if listing.problem is not None:
                raise ScenarioError(f"server.url: {base_url} is not an OpenAI-compatible server "
                                    f"the suite can measure: {listing.problem}")
            if not listing.ids:
                last_problem = "/v1/models lists no model yet"
                time.sleep(poll_s)
                continue
            if model_name is not None and model_name not in listing.ids:
                raise ScenarioError(
                    f"server.served_model_name = {model_name!r}: {base_url} does not serve it "
                    f"(its /v1/models lists {', '.join(map(repr, listing.ids))}); name one of "
                    "those, or leave served_model_name out to take the first; nothing was sent")
            model_id = model_name or listing.ids[0]
            problem = probe_completion(prober, model_id)
            if problem is not None:
                last_problem = f"probe completion failed: {problem}"
                time.sleep(poll_s)
                continue
            version, version_warning = read_version(*_get_json(client, "/version"))
            return ReadyServer(
                base_url=base_url, model_id=model_id,
                max_model_len=listing.max_model_lens.get(model_id), version=version,
                ready_after_s=time.monotonic() - started, served_models=listing.ids,
                warnings=(*listing.warnings,
                          *([version_warning] if version_warning is not None else ())))
    finally:
        client.close()
        prober.close()
    raise ServerError(f"{base_url} not ready after {timeout_s:.0f}s: {last_problem}")
