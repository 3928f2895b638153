"""The stand-in's configuration (:class:`StandinConfig`, validated on construction) and what it
reports about each completion request it served (:class:`RequestRecord`)."""

from __future__ import annotations

import dataclasses
import math

from vllm_slo.servers.standin.faults import FAULT_KINDS, MIXED

HOST = "127.0.0.1"  # loopback only: the stand-in is a test instrument


@dataclasses.dataclass(frozen=True)
class StandinConfig:
    """Every knob of the stand-in. Durations in seconds; validated on construction."""

    model: str = "standin"
    max_model_len: int = 2048
    ttft_s: float = 0.05
    itl_s: float = 0.01
    role_delay_s: float = 0.0
    jitter_s: float = 0.0
    max_concurrency: int | None = None  # None: unlimited; else a FIFO queue before `start`
    tokens_per_chunk: int = 1
    # tokens of each chunk in turn, cycled from the first chunk (e.g. (1, 3, 2)); overrides
    # tokens_per_chunk (speculative decoding's uneven chunks, with known truth)
    chunk_pattern: tuple[int, ...] = ()
    reasoning_tokens: int = 0  # chat: the first N tokens are reasoning, the rest the answer
    reasoning_field: str = "reasoning"  # the delta key: vLLM 0.32's; or "reasoning_content"
    default_max_tokens: int = 16
    fault_kind: str | None = None  # applied to each request with probability fault_rate
    fault_rate: float = 1.0
    seed: int = 0
    retry_after: str | None = "1"  # the Retry-After header of http_429 / http_503; None: none

    def __post_init__(self) -> None:
        for name in ("ttft_s", "itl_s", "role_delay_s", "jitter_s"):
            value = getattr(self, name)
            if not is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(
                    f"StandinConfig.{name} must be a finite number >= 0, got {value!r}"
                )
        for name in ("max_model_len", "tokens_per_chunk", "default_max_tokens"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ValueError(f"StandinConfig.{name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.chunk_pattern, tuple) or not all(
                is_int(k) and k >= 1 for k in self.chunk_pattern):
            raise ValueError("StandinConfig.chunk_pattern must be a tuple of integers >= 1, "
                             f"got {self.chunk_pattern!r}")
        if not is_int(self.reasoning_tokens) or self.reasoning_tokens < 0:
            raise ValueError("StandinConfig.reasoning_tokens must be an integer >= 0, "
                             f"got {self.reasoning_tokens!r}")
        if self.reasoning_field not in ("reasoning", "reasoning_content"):
            raise ValueError("StandinConfig.reasoning_field must be reasoning or "
                             f"reasoning_content, got {self.reasoning_field!r}")
        if self.max_concurrency is not None and (
            not is_int(self.max_concurrency) or self.max_concurrency < 1
        ):
            raise ValueError(
                "StandinConfig.max_concurrency must be None (unlimited) or an integer >= 1, "
                f"got {self.max_concurrency!r}"
            )
        if self.fault_kind is not None and self.fault_kind not in (*FAULT_KINDS, MIXED):
            raise ValueError(
                f"StandinConfig.fault_kind must be None, {MIXED} or one of "
                f"{', '.join(FAULT_KINDS)}; "
                f"got {self.fault_kind!r}"
            )
        if not is_number(self.fault_rate) or not 0.0 <= self.fault_rate <= 1.0:
            raise ValueError(f"StandinConfig.fault_rate must be in [0, 1], got {self.fault_rate!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"StandinConfig.model must be a non-empty string, got {self.model!r}")
        if not is_int(self.seed):
            raise ValueError(f"StandinConfig.seed must be an integer, got {self.seed!r}")


def is_number(value: object) -> bool:
    """An int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_int(value: object) -> bool:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    """What the stand-in really did for one completion request (times: ``time.monotonic()``)."""

    request_id: str
    path: str
    stream: bool
    fault: str | None
    status: int  # HTTP status sent; 0 when no status line was sent (hang/drop, non-streaming)
    receipt_s: float  # request fully read
    start_s: float | None  # left the FIFO queue (None: never queued, e.g. errors, hang)
    first_content_s: float | None  # first content chunk (or whole non-streaming body) written
    last_chunk_s: float | None  # last body write ([DONE] / terminating chunk / whole body)
    content_chunk_s: tuple[float, ...]  # write time of every content chunk, in order
    prompt_tokens: int
    completion_tokens: int  # tokens actually sent
    client_disconnected: bool  # the client went away before the response was complete

    @property
    def queue_wait_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.receipt_s


@dataclasses.dataclass
class Trace:
    """A :class:`RequestRecord` being filled in while its request is served."""

    request_id: str
    path: str
    receipt_s: float
    stream: bool = False
    fault: str | None = None
    status: int = 0
    start_s: float | None = None
    first_content_s: float | None = None
    last_chunk_s: float | None = None
    content_chunk_s: list[float] = dataclasses.field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    client_disconnected: bool = False

    def freeze(self) -> RequestRecord:
        fields = dataclasses.asdict(self)
        fields["content_chunk_s"] = tuple(self.content_chunk_s)
        return RequestRecord(**fields)
