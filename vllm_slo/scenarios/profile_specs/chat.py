"""`profile: chat`'s settings (`traffic.chat`); its generator is
vllm_slo/loadtests/profiles/chat.py."""

from __future__ import annotations

from pydantic import Field

from vllm_slo.scenarios.model_base import Frozen
from vllm_slo.scenarios.profile_specs.registry import ProfileSpec


class ChatSpec(Frozen):
    """Multi-turn conversations sharing one long system prompt (so prefix caching matters).
    Turn k's history holds the earlier user turns and a fixed, seeded stand-in for each
    earlier answer of `output_tokens` tokens, so prompts are identical across runs/variants."""

    system_prompt_tokens: int = Field(200, ge=0)
    user_tokens: int = Field(40, ge=1, description="mean; each turn uniform in ±50%")
    turns: int = Field(3, ge=1)
    output_tokens: int = Field(64, ge=1, description="max_tokens of each turn")


SPEC = ProfileSpec("chat", ChatSpec, mixable=True)
