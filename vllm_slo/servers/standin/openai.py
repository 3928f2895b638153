"""The OpenAI-compatible surface, shaped as vLLM's (``vllm serve``, as
observed from vLLM's CPU build): completion request parsing and validation, the
error shape, SSE framing, ``/v1/models`` and ``/tokenize``. Prompt tokens are counted as
whitespace-separated words. When each response piece is sent is ``engine``'s business."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

from vllm_slo.servers.standin.config import StandinConfig, is_int
from vllm_slo.servers.standin.http import Request, dumps, http_chunk, send_json

SSE_HEADERS = (
    ("content-type", "text/event-stream; charset=utf-8"),
    ("transfer-encoding", "chunked"),
)


class ApiError(Exception):
    """An OpenAI-style error answer, shaped like vLLM's ``ErrorResponse``."""

    def __init__(self, status: int, err_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.err_type = err_type
        self.message = message

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": None,
                "code": self.status,
            }
        }


@dataclasses.dataclass(frozen=True)
class Params:
    """What the stand-in takes from a completion request."""

    prompt_tokens: int
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool = False  # usage on every chunk (stream_options)


def sse(obj: Any) -> bytes:
    """One SSE event (``data: <json or text>``) as one HTTP chunk."""
    data = obj if isinstance(obj, str) else dumps(obj)
    return http_chunk(f"data: {data}\n\n".encode())


def count_words(value: Any) -> int:
    """Prompt tokens of a string or of OpenAI content parts: whitespace-separated words."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):  # content parts [{"type": "text", "text": ...}]
        return sum(count_words(p.get("text", "")) for p in value if isinstance(p, dict))
    return 0


def parse_completion(req: Request, chat: bool, config: StandinConfig) -> Params:
    """Validate a /v1/chat/completions (`chat`) or /v1/completions body; ApiError if vLLM
    would refuse it."""
    try:
        body = json.loads(req.body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, "BadRequestError", f"Invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequestError", "The request body must be a JSON object.")
    model = body.get("model")
    if model is not None and model != config.model:
        raise ApiError(404, "NotFoundError", f"The model `{model}` does not exist.")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "BadRequestError", "messages: a non-empty list is required")
        prompt_tokens = sum(count_words(m.get("content")) for m in messages if isinstance(m, dict))
        what = "messages"
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt_tokens = count_words(prompt)
        elif isinstance(prompt, list) and prompt and all(is_int(t) for t in prompt):
            prompt_tokens = len(prompt)
        elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt_tokens = count_words(prompt[0])
        else:
            raise ApiError(
                400,
                "BadRequestError",
                "prompt: a string, a list of one string or a list of token ids is required",
            )
        what = "prompt"
    max_tokens = body.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is None:
        max_tokens = config.default_max_tokens
    if not is_int(max_tokens) or max_tokens < 1:
        raise ApiError(400, "BadRequestError", f"max_tokens must be at least 1, got {max_tokens}")
    if body.get("n", 1) != 1:
        raise ApiError(400, "BadRequestError", "the stand-in serves n=1 only")
    if prompt_tokens + max_tokens > config.max_model_len:
        raise ApiError(
            400,
            "BadRequestError",
            f"This model's maximum context length is {config.max_model_len} tokens. "
            f"However, you requested {prompt_tokens + max_tokens} tokens ({prompt_tokens} "
            f"in the {what}, {max_tokens} in the completion). Please reduce the length of "
            f"the {what} or completion.",
        )
    stream = body.get("stream") is True
    options = body.get("stream_options")
    if options is not None and not stream:
        raise ApiError(
            400, "BadRequestError", "Stream options can only be defined when `stream=True`."
        )
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    continuous = bool(include_usage and isinstance(options, dict)
                      and options.get("continuous_usage_stats"))  # vLLM's rule
    return Params(prompt_tokens, max_tokens, stream, include_usage, continuous)


def models_list(config: StandinConfig) -> dict[str, Any]:
    """The ``GET /v1/models`` body: the one served model."""
    model = config.model
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "vllm",
                "root": model,
                "parent": None,
                "max_model_len": config.max_model_len,
            }
        ],
    }


async def tokenize(req: Request, writer: asyncio.StreamWriter, config: StandinConfig) -> bool:
    """vLLM's POST /tokenize, counted the stand-in's way (whitespace-separated words); returns
    whether the connection stays open."""
    try:
        payload = json.loads(req.body or b"{}")
        text = payload["prompt"]
    except (ValueError, KeyError, TypeError):
        await send_json(
            writer,
            400,
            {
                "error": {
                    "message": 'expected {"prompt": ...}',
                    "type": "BadRequestError",
                    "code": 400,
                }
            },
            keep_alive=req.keep_alive,
        )
        return req.keep_alive
    count = count_words(text)
    await send_json(
        writer,
        200,
        {"count": count, "max_model_len": config.max_model_len, "tokens": list(range(count))},
        keep_alive=req.keep_alive,
    )
    return req.keep_alive
