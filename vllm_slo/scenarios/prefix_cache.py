"""`traffic.prefix_cache`: the server's prefix-cache state before the measured window and,
optionally, a hit rate the prompts are shaped to and the run checks against vLLM's /metrics.

    traffic:
      prefix_cache: reset        # short form, as before: reset (= phases: cold) | keep
      prefix_cache:              # long form
        target_hit_rate: 0.6     # prompts share prefixes so that hits / queries comes out near it
        tolerance: 0.1           # |achieved - target| above it: the run is flagged (exit 4)
        phases: warm             # cold: flush, measure | warm: flush, prime, measure | keep

The shaping is `loadtests/prefix_shaping.py`, the check `vllm_slo/analysis/prefix_cache.py`;
docs/traffic.md "Prefix-cache control" says what the numbers mean.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_serializer, model_validator

from vllm_slo.scenarios.model_base import Frozen

SHORT_FORMS = {"reset": "cold", "keep": "keep", "cold": "cold", "warm": "warm"}


class PrefixCacheSpec(Frozen):
    """The prefix-cache phases and the hit-rate target (None: prompts as the profile makes
    them, nothing checked)."""

    phases: Literal["cold", "warm", "keep"] = Field(
        "cold", description="cold: POST /reset_prefix_cache before the traffic; warm: that, "
        "then each shared prefix sent once before the traffic; keep: the cache as it is")
    target_hit_rate: float | None = Field(
        None, ge=0, lt=1, description="prefix-cache hits / queries (tokens, vLLM's counters) "
        "the prompts are shaped to over the measured window")
    tolerance: float = Field(
        0.1, gt=0, le=1, description="an achieved hit rate further than this from the target "
        "is a miss (a warning and exit code 4: the load was not the one asked for)")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, data: Any) -> Any:
        """`reset` / `keep` (the setting's earlier values; saved run folders carry them), and
        `cold` / `warm`, stand for a mapping with just those phases."""
        if isinstance(data, str):
            if data not in SHORT_FORMS:
                raise ValueError(f"expected reset | keep | cold | warm or a mapping "
                                 f"{{target_hit_rate, tolerance, phases}}, got {data!r}")
            return {"phases": SHORT_FORMS[data]}
        return data

    @model_validator(mode="after")
    def _warm_primes_shaped_prefixes(self) -> PrefixCacheSpec:
        if self.phases == "warm" and self.target_hit_rate is None:
            raise ValueError("phases: warm primes the shared prefixes that target_hit_rate "
                             "shapes: set target_hit_rate too (or use phases: cold)")
        return self

    @model_serializer(mode="wrap")
    def _short_when_plain(self, handler: Any) -> Any:
        """Written back in the short form when there is no target (scenario.yaml of runs that
        never set one stays as it was)."""
        if self.target_hit_rate is None and self.phases != "warm":
            return "reset" if self.phases == "cold" else "keep"
        return handler(self)

    @property
    def resets(self) -> bool:
        """The suite flushes the cache before the traffic (and launches vLLM in dev mode)."""
        return self.phases != "keep"

    @property
    def primes(self) -> bool:
        return self.phases == "warm"
