"""`profile: sharegpt`'s settings (`traffic.sharegpt`); its generator is
vllm_slo/loadtests/profiles/sharegpt.py."""

from __future__ import annotations

from pydantic import Field

from vllm_slo.scenarios.model_base import Frozen
from vllm_slo.scenarios.profile_specs.registry import ProfileSpec


class ShareGptSpec(Frozen):
    """Replay of ShareGPT-format conversations (all human turns, with their real history).
    Filters as vLLM bench applies them, made explicit."""

    path: str | None = Field(None, description="ShareGPT JSON; default: the shipped sample")
    min_prompt_tokens: int = Field(4, ge=1)
    max_prompt_tokens: int = Field(1024, ge=1)
    min_output_tokens: int = Field(4, ge=1)
    max_output_tokens: int | None = Field(None, ge=1)
    max_total_tokens: int = Field(2048, ge=2)
    all_turns: bool = True


SPEC = ProfileSpec("sharegpt", ShareGptSpec)
