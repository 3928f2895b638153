"""`profile: long-doc`'s settings (`traffic.long-doc`); its generator is
vllm_slo/loadtests/profiles/long_doc.py."""

from __future__ import annotations

from pydantic import Field

from vllm_slo.scenarios.model_base import Frozen
from vllm_slo.scenarios.profile_specs.registry import ProfileSpec


class LongDocSpec(Frozen):
    """Long documents with a summarisation or question prompt: the chunked-prefill workload."""

    min_doc_tokens: int = Field(2000, ge=1)
    max_doc_tokens: int | None = Field(
        None, ge=1, description="default: the server's max-model-len - output_tokens - 64")
    output_tokens: int = Field(256, ge=1)


SPEC = ProfileSpec("long-doc", LongDocSpec, mixable=True)
