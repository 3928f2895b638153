"""Token counters: how the request plan measures prompt and output lengths.

Lengths are measured with the served model's own tokenizer, never estimated from words:
either its `tokenizer.json` loaded with the Rust `tokenizers` library (fast, batched), or, when
no tokenizer file is at hand (attach mode), the server's own `POST /tokenize` endpoint (vLLM).
Both count plain text without special tokens and without a chat template.

This module imports neither locust nor gevent; `tokenizers` is imported only when a local
counter is made.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from vllm_slo.transport.http_stream import HttpStreamClient

if TYPE_CHECKING:
    from tokenizers import Tokenizer

_BATCH_CHARS = 4_000_000  # bounds the memory of one encode_batch call (encodings are large)


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of plain texts (no special tokens, no chat template)."""

    name: str

    def count_many(self, texts: Sequence[str]) -> list[int]: ...


class LocalTokenCounter:
    """A `tokenizer.json` through `tokenizers.Tokenizer.encode_batch` (Rust, multi-threaded)."""

    def __init__(self, tokenizer: Tokenizer, name: str) -> None:
        tokenizer.no_truncation()  # a tokenizer.json may carry truncation/padding: counts must not
        tokenizer.no_padding()
        self._tokenizer = tokenizer
        self._encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
        self.name = name

    def count_many(self, texts: Sequence[str]) -> list[int]:
        counts: list[int] = []
        batch: list[str] = []
        size = 0
        for text in texts:
            batch.append(text)
            size += len(text)
            if size >= _BATCH_CHARS:
                counts.extend(self._count_batch(batch))
                batch, size = [], 0
        if batch:
            counts.extend(self._count_batch(batch))
        return counts

    def _count_batch(self, batch: list[str]) -> list[int]:
        return [len(encoding) for encoding in self._encode(batch, add_special_tokens=False)]


def local_token_counter(path: str | Path) -> TokenCounter:
    """A counter from a model folder holding `tokenizer.json`, or from the file itself."""
    try:
        from tokenizers import Tokenizer
    except ImportError as error:  # pragma: no cover - tokenizers comes with vLLM/transformers
        raise ValueError(
            "counting tokens with a local tokenizer needs the 'tokenizers' package "
            "(pip install tokenizers), or leave traffic.tokenizer unset to use the server's "
            "/tokenize endpoint") from error
    given = Path(path).expanduser()
    file = given / "tokenizer.json" if given.is_dir() else given
    if not file.is_file():
        raise ValueError(f"no tokenizer.json at {given} (give a model folder holding "
                         "tokenizer.json, or the file itself)")
    try:
        tokenizer = Tokenizer.from_file(str(file))
    except Exception as error:  # tokenizers raises its own Exception type
        raise ValueError(f"{file}: not a readable tokenizer.json ({error})") from error
    return LocalTokenCounter(tokenizer, f"tokenizer.json at {file.resolve()}")


class ServerTokenCounter:
    """vLLM's `POST /tokenize` ({"model", "prompt", "add_special_tokens": false} -> count).

    One request per text over one keep-alive connection; not thread-safe."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 timeout_s: float = 60.0) -> None:
        root = base_url.rstrip("/")
        if root.endswith("/v1"):  # /tokenize lives at the server root, not under /v1
            root = root[: -len("/v1")]
        self.base_url = root
        self.model = model
        shown = re.sub(r"//[^/@]*@", "//", root, count=1)  # a description: no credentials
        self.name = f"server /tokenize at {shown} (model {model})"
        self._client = HttpStreamClient(root, timeout_s=timeout_s, api_key=api_key)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        try:
            return [self._count(text) for text in texts]
        finally:
            self._client.close()

    def _count(self, text: str) -> int:
        body = json.dumps({"model": self.model, "prompt": text, "add_special_tokens": False})
        response = self._client.request("POST", "/tokenize", body.encode())
        if response.transport_error:
            raise ConnectionError(f"POST {self.base_url}/tokenize: {response.transport_error}")
        if response.status != 200:
            raise ValueError(
                f"POST {self.base_url}/tokenize answered HTTP {response.status}: "
                f"{response.body[:300].decode(errors='replace')} (set traffic.tokenizer to the "
                "model's tokenizer folder to count tokens locally)")
        try:
            return int(json.loads(response.body)["count"])
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"POST {self.base_url}/tokenize: unexpected answer "
                             f"{response.body[:300]!r}") from error


def server_token_counter(base_url: str, model: str, api_key: str | None = None) -> TokenCounter:
    """A counter that asks the running server (vLLM's `/tokenize`) for each text's length."""
    return ServerTokenCounter(base_url, model, api_key=api_key)
