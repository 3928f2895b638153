"""LoRA adapters: what a launched server loads (`server.lora`) and how traffic is split across
the base model and the adapters (`traffic.lora`), checked against each other by the scenario.

    server:
      lora:
        adapters: {sql: tiny, chat: /models/chat-lora}   # tiny: generated for the model
        max_rank: 8                                      # --max-lora-rank
        max_loras: 2                                     # --max-loras (default: all adapters)
    traffic:
      lora: {base: 2, sql: 1, chat: 1}     # weights; each conversation goes to one of them

The suite passes `--enable-lora --lora-modules NAME=PATH ... --max-lora-rank R --max-loras N`
(vLLM's own flags, so `server.args` may not set them as well); a request's `model` field is
the adapter's name (`base`: the served model name).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from vllm_slo.scenarios.model_base import Frozen

BASE = "base"  # traffic.lora's name for the base model (the request names the served model)
LORA_FLAGS = ("enable-lora", "lora-modules", "max-lora-rank", "max-loras")
# the ranks vLLM accepts for --max-lora-rank (vllm.config.lora.MaxLoRARanks, 0.32)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
AdapterName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)]


class LoraSpec(Frozen):
    """`server.lora`: the adapters a launched server loads."""

    adapters: dict[AdapterName, str] = Field(
        min_length=1, description="name -> 'tiny' (a random adapter generated for the model, "
        "seeded by the name; needs a local model), a local PEFT folder, or a model id")
    max_rank: int = Field(8, description="--max-lora-rank; also the rank of tiny adapters")
    max_loras: int | None = Field(
        None, ge=1, description="--max-loras: adapters in one batch (default: all of them)")

    @field_validator("adapters")
    @classmethod
    def _base_is_reserved(cls, adapters: dict[str, str]) -> dict[str, str]:
        if BASE in adapters:
            raise ValueError(f"{BASE!r} names the base model in traffic.lora; give the "
                             "adapter another name")
        return adapters

    @field_validator("max_rank")
    @classmethod
    def _rank_vllm_takes(cls, rank: int) -> int:
        if rank not in VLLM_LORA_RANKS:
            raise ValueError(f"vLLM's --max-lora-rank is one of "
                             f"{', '.join(map(str, VLLM_LORA_RANKS))}; got {rank}")
        return rank

    @model_validator(mode="after")
    def _max_loras_up_to_adapters(self) -> LoraSpec:
        if self.max_loras is not None and self.max_loras > len(self.adapters):
            raise ValueError(f"max_loras = {self.max_loras} is more than the "
                             f"{len(self.adapters)} adapter(s) listed")
        return self

    @property
    def batch_loras(self) -> int:
        return self.max_loras or len(self.adapters)


def lora_weights(weights: dict[str, float]) -> dict[str, float]:
    """`traffic.lora`: at least one name; weights positive (the model checks the numbers)."""
    if len(weights) == 1 and BASE in weights:
        raise ValueError(f"traffic.lora sends everything to {BASE!r}: leave traffic.lora out "
                         "(or name an adapter)")
    return weights


def weight_names(weights: dict[str, float]) -> list[str]:
    """The adapters (not `base`) that traffic.lora sends to."""
    return [name for name in weights if name != BASE]
