"""`traffic.lora`: which model (the base or a LoRA adapter) each request names.

Pure and deterministic: the plan's conversations, in plan order, are dealt the names by the
weights (`dealing.Dealer`: every leading part of the plan is within one conversation of the
weights for each name — a 2 : 1 split of 52 conversations is 35 : 17 or 34 : 18, never the
26 : 26 a draw can give), and every turn of a conversation talks to the same model (as a user
of one fine-tune does; vLLM keeps each adapter's prefix cache apart). The names follow from the
plan and the weights alone, so the same seed sends the same conversations to the same adapters
in every run and every arm of an A/B, and every process of a run (each holds the whole plan)
agrees. Each part of a mix (`PlannedRequest.profile`) is dealt on its own: every part is split
by the weights within one conversation (the whole run within one per part), and a dealt mix
cannot send all of one part to one name in step with it. The prompts themselves do not depend
on the split (the plan and its sha256 are the same with or without `traffic.lora`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from vllm_slo.loadtests.dealing import deal_by_group
from vllm_slo.scenarios.lora import BASE

if TYPE_CHECKING:
    from vllm_slo.loadtests.plan import PlannedRequest


class LoraSplit:
    """The names of `traffic.lora` dealt to a plan's conversations."""

    def __init__(self, weights: Mapping[str, float], requests: Iterable[PlannedRequest]):
        if not weights or any(not w > 0 for w in weights.values()):
            raise ValueError(f"traffic.lora needs positive weights, got {dict(weights)!r}")
        self.names = tuple(weights)
        self._by_conversation = deal_by_group(
            weights, ((request.profile, request.conversation_id) for request in requests))

    def name_for(self, conversation_id: int) -> str:
        """The traffic.lora name (`base` or an adapter) of one of the plan's conversations."""
        return self._by_conversation[conversation_id]


def unserved_names(weights: Mapping[str, float], served_models: Sequence[str]) -> list[str]:
    """The adapters of `traffic.lora` that the server does not list in /v1/models (their
    requests would all fail with 404)."""
    return [name for name in weights if name != BASE and name not in served_models]


def request_model(name: str | None, served_model: str) -> str:
    """The request's `model` field: the served model's name for `base` (or no split), else
    the adapter's name (vLLM serves each --lora-modules NAME under that name)."""
    return served_model if name is None or name == BASE else name
