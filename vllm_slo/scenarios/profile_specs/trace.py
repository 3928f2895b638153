"""`profile: trace`'s settings (`traffic.trace`); its generator is
vllm_slo/loadtests/profiles/trace.py, its readers vllm_slo/loadtests/trace_formats.py."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from vllm_slo.scenarios.model_base import Frozen
from vllm_slo.scenarios.profile_specs.registry import ProfileSpec
from vllm_slo.scenarios.units import parse_duration_s

TraceSeconds = Annotated[float, BeforeValidator(parse_duration_s)]  # a trace may span weeks


class TraceSpec(Frozen):
    """Timed replay of a request trace (`traffic.arrival.kind: trace`): each record sent at
    its time, its prompt built so that records sharing prefix-block ids share those tokens,
    its output length forced (ignore_eos + max_tokens)."""

    format: Literal["mooncake", "azure", "burstgpt", "generic"] = Field(
        "mooncake", description="the file's format (docs/traffic-trace.md lists each one's "
        "columns)")
    path: str | None = Field(
        None, description="the trace file; default: the shipped Mooncake-format sample "
        "(loadtests/data/trace_sample.jsonl)")
    start_s: TraceSeconds = Field(
        0.0, alias="start", ge=0, description="the window's start, from the trace's first "
        "record")
    end_s: TraceSeconds | None = Field(
        None, alias="end", gt=0, description="the window's end, from the trace's first record "
        "(default: the end of the file or of the run, whichever comes first)")
    speedup: float = Field(1.0, gt=0, le=1e6, description="replay k× faster (times ÷ k)")
    rate_scale: float = Field(
        1.0, gt=0, le=1000, description="sends per record, dealt evenly: 0.5 sends every other "
        "record, 2 each record twice (the copy in a prefix-block space of its own), at the "
        "trace's times")
    max_requests: int | None = Field(
        None, ge=1, description="at most this many records of the window are read")
    block_tokens: int = Field(
        512, ge=1, le=65536, description="tokens per prefix-block id (Mooncake: 512)")
    hit_rate_tolerance: float = Field(
        0.05, gt=0, le=1, description="vLLM's counted prefix-cache hit rate further than this "
        "from the trace's implied one is the named warning trace_hit_rate_mismatch")

    @model_validator(mode="after")
    def _window(self) -> TraceSpec:
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end ({self.end_s:g} s) must come after start "
                             f"({self.start_s:g} s)")
        if self.path is None and self.format != "mooncake":
            raise ValueError(f"format {self.format!r} needs a path (the shipped sample is "
                             "Mooncake-format)")
        return self


SPEC = ProfileSpec("trace", TraceSpec)
