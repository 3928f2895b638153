"""Readiness means one real completion: /health, then /v1/models, then one streamed request."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from vllm_slo.scenarios.errors import ServerError
from vllm_slo.transport.http_stream import HttpStreamClient

# /health, /v1/models and /version answer at once on a live vLLM (and refuse the connection
# before it listens); a listener that accepts and never answers (another process that won the
# race for the port) is given up after this, so a dead launch is noticed in seconds, not 30 s
METADATA_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 30.0  # the probe completion: a cold server's first request may take long
WAITING_EVERY_S = 30.0  # how often a wait says it is still waiting (a GPU start takes minutes)


@dataclass(frozen=True, slots=True)
class ReadyServer:
    base_url: str
    model_id: str
    max_model_len: int | None
    version: str | None
    ready_after_s: float
    served_models: tuple[str, ...] = ()  # /v1/models' ids: the base model, LoRA adapters


def _get_json(client: HttpStreamClient, path: str) -> tuple[int, object]:
    response = client.request("GET", path)
    if response.transport_error:
        return 0, response.transport_error
    try:
        return response.status, json.loads(response.body or b"null")
    except json.JSONDecodeError:
        return response.status, response.body[:200].decode("utf-8", "replace")


def _has_content(payload: object) -> bool:
    choices = payload.get("choices") if isinstance(payload, dict) else None
    return any(isinstance(c, dict) and ((c.get("delta") or {}).get("content") or c.get("text"))
               for c in choices or ())


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
        except ValueError as error:
            problems.append(f"{path}: malformed SSE payload ({error})")
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
    """Block until the server answers all three checks or raise ServerError at the deadline.
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
            status, _ = _get_json(client, "/health")
            if status != 200:
                last_problem = f"/health answered {status or 'nothing'}"
                client.close()
                time.sleep(poll_s)
                continue
            status, models = _get_json(client, "/v1/models")
            listed = (models.get("data", [])
                      if status == 200 and isinstance(models, dict) else [])
            ids = [m.get("id") for m in listed]
            if not ids:
                last_problem = f"/v1/models answered {status}: {models!r:.200}"
                time.sleep(poll_s)
                continue
            if model_name is not None and model_name not in ids:
                raise ServerError(f"{base_url} serves {ids}, not the model {model_name!r}")
            model_id = model_name or ids[0]
            problem = probe_completion(prober, model_id)
            if problem is not None:
                last_problem = f"probe completion failed: {problem}"
                time.sleep(poll_s)
                continue
            max_len = next((m.get("max_model_len") for m in listed
                            if m.get("id") == model_id), None)
            status, version = _get_json(client, "/version")
            return ReadyServer(
                base_url=base_url, model_id=model_id, max_model_len=max_len,
                version=version.get("version") if status == 200 and isinstance(version, dict)
                else None,
                ready_after_s=time.monotonic() - started,
                served_models=tuple(str(i) for i in ids))
    finally:
        client.close()
        prober.close()
    raise ServerError(f"{base_url} not ready after {timeout_s:.0f}s: {last_problem}")
