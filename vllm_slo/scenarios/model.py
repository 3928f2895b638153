"""The scenario model: one frozen, strict pydantic model per scenario file, `Scenario`, made of
its sections, each in a module of its own — `server:` (server_spec.py), `traffic:`
(traffic_spec.py), `slo:` and `abort_on:` (slo_spec.py), `trials:`, `variants:`, `compare:`
and `side_by_side:` (experiment_spec.py), `tune:` (tune_spec.py) — and the checks that span
sections.

YAML keys are the user's words (`duration: 30s`); attributes carry units (`duration_s`).
Unknown keys are rejected everywhere; `server.args` is passed verbatim to `vllm serve`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from vllm_slo.scenarios.capacity_spec import RATE_KEY, SPEEDUP_KEY, USERS_KEY, CapacitySpec
from vllm_slo.scenarios.experiment_spec import (
    MAX_SEQUENTIAL_TRIALS,
    VARIANT_KEYS,
    CompareSpec,
    SideBySideSpec,
    Trials,
    TrialsSpec,
)
from vllm_slo.scenarios.lora import BASE
from vllm_slo.scenarios.metrics import split_cell
from vllm_slo.scenarios.model_base import Frozen
from vllm_slo.scenarios.server_spec import ServerSpec
from vllm_slo.scenarios.slo_spec import AbortSpec, SloSpec
from vllm_slo.scenarios.traffic_spec import OPEN_LOOP_KINDS, TrafficSpec
from vllm_slo.scenarios.tune_spec import TuneSpec

MAX_NAME_CHARS = 100  # a scenario's or variant's name is part of a folder's name


class Scenario(Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=MAX_NAME_CHARS)
    description: str = ""
    server: ServerSpec = Field(default_factory=ServerSpec)
    traffic: TrafficSpec = Field(default_factory=TrafficSpec)
    slo: SloSpec = Field(default_factory=SloSpec)
    trials: Trials = Field(
        default_factory=lambda: TrialsSpec(min=1, max=1),
        description="repeated runs per variant: N, or {min: N, max: M, budget: DURATION} "
                    "(sequential: stop once the compared cells are decided)")
    variants: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$",
                                        max_length=MAX_NAME_CHARS)],
                   dict[str, Any]] = Field(
        default_factory=dict,
        description="arms: name -> partial scenario (server/traffic/slo) merged onto the base")
    compare: CompareSpec = Field(default_factory=CompareSpec)
    abort_on: AbortSpec = Field(default_factory=AbortSpec)
    tune: TuneSpec | None = Field(None, description="`vllm-slo tune`: the search space")
    side_by_side: SideBySideSpec | None = Field(
        None, description="run each round's variants at once, on rotating device slots")
    capacity: CapacitySpec | None = Field(
        None, description="`vllm-slo capacity`: the load searched for the highest one carried "
                          "within the SLOs")

    @model_validator(mode="after")
    def _capacity_varies_this_traffic(self) -> Scenario:
        capacity = self.capacity
        if capacity is None:
            return self
        arrival = self.traffic.arrival
        if capacity.load == SPEEDUP_KEY and self.traffic.profile != "trace":
            raise ValueError(f"capacity.load = {capacity.load}: a trace replay's speedup, but "
                             f"traffic.profile is {self.traffic.profile!r} (use profile: trace "
                             "with arrival kind: trace, or capacity.load: traffic.arrival.rate "
                             "/ traffic.arrival.users)")
        if capacity.load in (RATE_KEY, USERS_KEY) and self.traffic.profile == "trace":
            raise ValueError(f"capacity.load = {capacity.load}: a trace replay sends at the "
                             "trace's times, with no rate or users to vary (use capacity.load: "
                             f"{SPEEDUP_KEY}, the load in multiples of the trace's speed)")
        if capacity.load == RATE_KEY and arrival.kind not in OPEN_LOOP_KINDS:
            raise ValueError(f"capacity.load = {capacity.load}: an open-loop rate, but "
                             f"traffic.arrival.kind is {arrival.kind!r} (use one of "
                             f"{', '.join(OPEN_LOOP_KINDS)}, or capacity.load: "
                             "traffic.arrival.users for a closed loop)")
        if capacity.load == USERS_KEY and arrival.kind != "closed":
            raise ValueError(f"capacity.load = {capacity.load}: closed-loop users, but "
                             f"traffic.arrival.kind is {arrival.kind!r} (use closed)")
        if self.side_by_side is not None:
            raise ValueError("capacity and side_by_side do not mix: a capacity search runs "
                             "its steps one at a time on one server")
        if not self.slo.rules():
            raise ValueError("capacity: the search looks for the highest load within the "
                             "SLOs, and slo: declares none")
        return self

    @model_validator(mode="after")
    def _parts_named_are_parts_of_the_mix(self) -> Scenario:
        named = [(f"compare.cells {cell!r}", split_cell(cell)[0], "part cells")
                 for cell in self.compare.cells]
        named += [(f"slo.by_profile.{part}", part, "per-part SLOs")
                  for part in self.slo.by_profile]
        for where, part, what in named:
            if part is not None and part not in self.traffic.mix:
                raise ValueError(
                    f"{where}: {part!r} is not a part of this run's traffic "
                    f"(profile {self.traffic.profile!r}"
                    + (f", mix {', '.join(self.traffic.mix)}" if self.traffic.mix else "")
                    + f"); {what} are for profile: mix")
        return self

    @model_validator(mode="after")
    def _adapters_named_are_loaded(self) -> Scenario:
        lora, loaded = self.traffic.lora, self.server.lora
        for adapter in self.slo.by_adapter:
            if adapter not in lora:
                raise ValueError(f"slo.by_adapter.{adapter}: {adapter!r} is not in "
                                 f"traffic.lora ({', '.join(lora) or 'unset'}); per-adapter "
                                 "SLOs are for a LoRA mix")
        if self.server.url is None:  # a launched server serves what server.lora loads
            missing = [name for name in lora if name != BASE
                       and (loaded is None or name not in loaded.adapters)]
            if missing:
                raise ValueError(f"traffic.lora names {', '.join(missing)}, which "
                                 "server.lora.adapters does not load")
        return self

    @model_validator(mode="after")
    def _side_by_side_places_every_variant(self) -> Scenario:
        if self.side_by_side is None:
            return self
        slots = len(self.side_by_side.devices)
        if self.tune is not None:
            raise ValueError("side_by_side and tune do not mix: a tune runs its trials one "
                             "at a time")
        if len(self.variants) != slots:
            raise ValueError(f"side_by_side.devices has {slots} slots for "
                             f"{len(self.variants)} variant(s): one slot per variant")
        if self.server.url is not None:
            raise ValueError("side_by_side launches a server per variant; attach mode "
                             "(server.url) targets one that already runs")
        for name, overrides in self.variants.items():
            server = overrides.get("server") or {}
            for key in ("devices", "url"):
                if isinstance(server, dict) and server.get(key) is not None:
                    raise ValueError(f"variant {name!r}: server.{key} — side_by_side "
                                     "places every variant on its device slots")
        if self.server.devices is not None:
            raise ValueError("server.devices and side_by_side both place the server: keep "
                             "side_by_side.devices")
        return self

    @model_validator(mode="after")
    def _sequential_trials_compare_variants(self) -> Scenario:
        trials = self.trials
        if trials.sequential and not self.variants:
            raise ValueError(
                f"trials: {{min: {trials.min}, max: {trials.max}}} stops once the variants' "
                "compared cells are decided: it needs variants to compare (or give a fixed "
                "count, trials: N)")
        if trials.sequential and trials.min < 2:
            raise ValueError(f"trials.min = {trials.min}: a comparison needs at least 2 "
                             "trials per variant before its first look (trials.min >= 2)")
        if trials.sequential and trials.max > MAX_SEQUENTIAL_TRIALS:
            raise ValueError(f"trials.max = {trials.max}: a sequential design takes at most "
                             f"{MAX_SEQUENTIAL_TRIALS} trials per variant")
        if trials.budget_s is not None and self.tune is not None:
            raise ValueError("trials.budget is for experiments (vllm-slo run); a tune runs "
                             "tune.trials per candidate")
        return self

    @property
    def min_trials(self) -> int:
        """Trials per variant before the first look (a fixed count: the count)."""
        return self.trials.min

    @property
    def max_trials(self) -> int:
        """Trials per variant at most (a fixed count: the count)."""
        return self.trials.max

    @model_validator(mode="after")
    def _tune_without_variants(self) -> Scenario:
        if self.tune is not None and self.variants:
            raise ValueError("tune and variants do not mix: the tune's candidates are its "
                             "variants (move the variants' server args into tune.grid)")
        return self

    @field_validator("variants")
    @classmethod
    def _variants_touch_only_arms(cls, variants: dict[str, dict[str, Any]]
                                  ) -> dict[str, dict[str, Any]]:
        for name, overrides in variants.items():
            extra = set(overrides) - set(VARIANT_KEYS)
            if extra:
                raise ValueError(
                    f"variant {name!r} may override {', '.join(VARIANT_KEYS)}, "
                    f"not {', '.join(sorted(extra))}")
        return variants

    def base_without_arms(self) -> dict[str, Any]:
        document = self.to_yaml_dict()
        document.pop("variants")
        document.pop("tune", None)
        document.pop("side_by_side", None)
        document.pop("capacity", None)
        document["trials"] = self.max_trials  # an arm is one trial's scenario: no design
        return document

    def to_yaml_dict(self) -> dict[str, Any]:
        """The resolved scenario as the user would write it (aliases, durations in seconds);
        `tune`, `side_by_side`, `server.devices` and the LoRA keys only when set."""
        document = self.model_dump(mode="json", by_alias=True)
        document["trials"] = self.trials.to_yaml()
        for key in ("tune", "side_by_side", "capacity"):
            if document[key] is None:
                del document[key]
        if document["server"]["devices"] is None:
            del document["server"]["devices"]
        if document["server"]["lora"] is None:  # LoRA keys only for a LoRA run
            del document["server"]["lora"]
        if not document["traffic"]["lora"]:
            del document["traffic"]["lora"]
        if not document["slo"]["by_adapter"]:
            del document["slo"]["by_adapter"]
        return document
