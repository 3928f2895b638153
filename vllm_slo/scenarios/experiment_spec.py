"""An experiment's design: the keys a variant (an arm) may override, what a comparison of the
variants tests (`compare:`), how many trials each variant runs (`trials:`, a fixed count or a
sequential design) and the device slots of variants run side by side (`side_by_side:`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from vllm_slo.scenarios.metrics import parse_cell
from vllm_slo.scenarios.model_base import Frozen, Seconds
from vllm_slo.scenarios.profile_specs import mixable_profiles

VARIANT_KEYS = ("server", "traffic", "slo", "description")
DEFAULT_COMPARED_CELLS = ("ttft.p50", "ttft.p90", "itl.p50", "tpot.p50", "e2e.p50",
                          "output_throughput.mean")


def check_cell(cell: str) -> str:
    """A whole-run cell (`itl.p99`) or one part's of a mix (`chat:itl.p99`)."""
    part = parse_cell(cell).part
    if part is not None and part not in mixable_profiles():
        raise ValueError(f"{part!r}: a cell's part is one of {', '.join(mixable_profiles())} "
                         "(e.g. chat:itl.p99, for profile: mix)")
    return cell


class CompareSpec(Frozen):
    """What a comparison between variants (or saved runs) tests, on per-trial statistics."""

    cells: list[Annotated[str, AfterValidator(check_cell)]] = Field(
        default_factory=lambda: list(DEFAULT_COMPARED_CELLS),
        description="metric.statistic cells; Holm-corrected as one family per pair")
    alpha: float = Field(0.05, gt=0, lt=1)
    effect: float = Field(0.10, gt=0, lt=10, description="relative effect to plan trials for; "
                          "a sequential design's equivalence margin (±effect)")
    test: Literal["welch-log", "mann-whitney"] = Field(
        "welch-log", description="the per-trial test of a sequential design's looks and of "
        "the design check: Welch t on logarithms, or Mann-Whitney U (docs/statistics.md)")


MAX_TRIALS = 1000
# a sequential design's boundaries are integrated per look: at most this many trials per arm
# (stats.sequential.MAX_SEQUENTIAL_TRIALS; a unit test holds them equal)
MAX_SEQUENTIAL_TRIALS = 200


def _trials_mapping(value: object) -> object:
    """`trials: N` is `{min: N, max: N}` (a fixed count); a mapping is read as it is."""
    if isinstance(value, bool):
        raise ValueError(f"expected a whole number of trials or {{min: N, max: M, budget: "
                         f"DURATION}}, got {value!r}")
    if isinstance(value, int):
        if not 1 <= value <= MAX_TRIALS:
            raise ValueError(f"expected 1 to {MAX_TRIALS} trials per variant, got {value}")
        return {"min": value, "max": value}
    if isinstance(value, TrialsSpec | dict):
        return value
    raise ValueError(f"expected a whole number of trials or {{min: N, max: M, budget: "
                     f"DURATION}}, got {value!r}")


class TrialsSpec(Frozen):
    """Trials per variant: a fixed count (`trials: 5`, min = max) or a sequential design
    (`trials: {min: 3, max: 10, budget: 15m}`): interleaved rounds, one trial per variant each,
    from `min` on the compared cells are tested after every round and the experiment stops
    once each is decided (changed, or equivalent within compare.effect), at `max`, or when
    another round would pass `budget` (wall time)."""

    min: int = Field(ge=1, le=MAX_TRIALS, description="trials per variant before the first look")
    max: int = Field(ge=1, le=MAX_TRIALS, description="trials per variant at most")
    budget_s: Seconds | None = Field(
        None, alias="budget", gt=0,
        description="wall time: no round starts that would end past it (estimated from the "
                    "rounds so far)")

    @model_validator(mode="after")
    def _min_up_to_max(self) -> TrialsSpec:
        if self.min > self.max:
            raise ValueError(f"trials.min = {self.min} is more than trials.max = {self.max}")
        return self

    @property
    def sequential(self) -> bool:
        return self.min < self.max

    def to_yaml(self) -> int | dict[str, Any]:
        """A fixed count as the integer a user writes; otherwise the mapping."""
        if not self.sequential and self.budget_s is None:
            return self.max
        document: dict[str, Any] = {"min": self.min, "max": self.max}
        if self.budget_s is not None:
            document["budget"] = self.budget_s
        return document


# `trials:` as written: N (a fixed count) or {min: N, max: M, budget: DURATION}
Trials = Annotated[TrialsSpec, BeforeValidator(_trials_mapping)]


class SideBySideSpec(Frozen):
    """Each round of an experiment runs all its variants at the same time, one per device
    slot; the slots rotate among the variants from round to round, so every variant meets
    every device (as A B B A balances drift over time)."""

    devices: list[Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]] = Field(
        min_length=2, description="one slot per variant, e.g. [[0], [1]] (GPU indices; CPU "
                                  "core ids on vLLM's CPU build)")

    @field_validator("devices")
    @classmethod
    def _slots_are_disjoint(cls, slots: list[list[int]]) -> list[list[int]]:
        seen: set[int] = set()
        for slot in slots:
            shared = seen & set(slot)
            if shared or len(set(slot)) != len(slot):
                raise ValueError(f"side_by_side.devices: device(s) "
                                 f"{sorted(shared) or slot} in more than one place: "
                                 "each slot needs devices of its own")
            seen |= set(slot)
        return slots

    def slot_of(self, variant_index: int, round_index: int) -> tuple[int, ...]:
        """The devices variant `variant_index` runs on in round `round_index` (from 0)."""
        return tuple(self.devices[(variant_index + round_index) % len(self.devices)])

