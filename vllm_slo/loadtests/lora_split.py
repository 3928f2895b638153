"""`traffic.lora`: which model (the base or a LoRA adapter) each request names.

Pure and deterministic: a conversation goes to one name, drawn with the weights from its own
generator, `random.Random(f"{seed}:lora:{profile}:{conversation}")`, so every turn of a
conversation talks to the same model (as a user of one fine-tune does; vLLM keeps each
adapter's prefix cache apart) and the same seed sends the same conversations to the same
adapters in every run and every arm of an A/B. The split is drawn, not dealt: over n
conversations a name's share is its weight's share ± the binomial spread, and the report
shows the counts. The prompts themselves do not depend on the split (the plan and its sha256
are the same with or without `traffic.lora`).
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Mapping, Sequence

from vllm_slo.scenarios.lora import BASE


class LoraSplit:
    """The weights of `traffic.lora`, ready to draw from."""

    def __init__(self, weights: Mapping[str, float], seed: int):
        if not weights or any(not w > 0 for w in weights.values()):
            raise ValueError(f"traffic.lora needs positive weights, got {dict(weights)!r}")
        self.names = tuple(weights)
        self.seed = seed
        self._cumulative = list(itertools.accumulate(weights[name] for name in self.names))

    def name_for(self, profile: str, conversation_id: int) -> str:
        """The traffic.lora name (`base` or an adapter) of a conversation."""
        draw = random.Random(f"{self.seed}:lora:{profile}:{conversation_id}").random()
        at = bisect.bisect_right(self._cumulative, draw * self._cumulative[-1])
        return self.names[min(at, len(self.names) - 1)]


def unserved_names(weights: Mapping[str, float], served_models: Sequence[str]) -> list[str]:
    """The adapters of `traffic.lora` that the server does not list in /v1/models (their
    requests would all fail with 404)."""
    return [name for name in weights if name != BASE and name not in served_models]


def request_model(name: str | None, served_model: str) -> str:
    """The request's `model` field: the served model's name for `base` (or no split), else
    the adapter's name (vLLM serves each --lora-modules NAME under that name)."""
    return served_model if name is None or name == BASE else name
