"""`tune:` — `vllm-slo tune`'s search space over server args: a grid (every combination a
candidate) and search procedures (one arg moved step by step), the objective candidates are
ranked by and the Pareto front's latency axis (docs/tuning.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from vllm_slo.scenarios.experiment_spec import check_cell
from vllm_slo.scenarios.model_base import Frozen
from vllm_slo.scenarios.server_spec import EngineArgValue, check_flag_name


class SearchSpec(Frozen):
    """One of the tuning guides' procedures: move one server arg step by step from `start`
    (times `factor`, or plus `step`) until a stop condition holds or `max`/`max_steps` is
    reached. Each step is a candidate run as trials on the best configuration found so far.

    until: preemptions (vLLM counted any), start_failure (the server did not come up: OOM, KV
    cache too small), slo_fail (an SLO failed across the step's trials), no_gain (the
    objective's median did not rise above the previous step's)."""

    arg: str = Field(description="a vllm serve flag name, e.g. max-num-batched-tokens")
    start: float | str = Field(description="a number, or the name of another server arg whose "
                                           "value it starts from (e.g. max-model-len)")
    factor: float | None = Field(None, gt=1, description="multiply the value by this per step")
    step: float | None = Field(None, gt=0, description="add this to the value per step")
    max: float | None = Field(None, gt=0, description="no step goes above this value")
    max_steps: int = Field(6, ge=1, le=64)
    until: list[Literal["preemptions", "start_failure", "slo_fail", "no_gain"]] = Field(
        min_length=1)

    @field_validator("arg")
    @classmethod
    def _arg_is_flag(cls, arg: str) -> str:
        check_flag_name({arg: None})
        return arg

    @model_validator(mode="after")
    def _one_way_to_move(self) -> SearchSpec:
        if (self.factor is None) == (self.step is None):
            raise ValueError(f"search over {self.arg!r} sets exactly one of factor (multiply "
                             f"per step, e.g. 2) or step (add per step, e.g. 0.05)")
        if isinstance(self.start, str):
            check_flag_name({self.start: None})
        elif self.start <= 0:
            raise ValueError(f"search over {self.arg!r}: start must be > 0, got {self.start!r}")
        return self


def _grid_values(grid: dict[str, list[EngineArgValue]]) -> dict[str, list[EngineArgValue]]:
    check_flag_name(grid)
    for flag, values in grid.items():
        if not values:
            raise ValueError(f"grid {flag!r} lists no values")
        if len({repr(value) for value in values}) != len(values):
            raise ValueError(f"grid {flag!r} repeats a value: {values!r}")
    return grid


class TuneSpec(Frozen):
    """`vllm-slo tune`: a search space over server args, every candidate run as trials on fresh
    servers and ranked by `objective`; one candidate is called better than another only when
    the difference across trials is significant (docs/tuning.md)."""

    objective: Literal["goodput", "output_throughput", "request_throughput", "capacity"] = Field(
        "goodput", description="goodput: requests/s that met every per-request latency SLO "
        "(ttft, tpot, e2e); throughputs are means over the measured window; capacity: the "
        "highest load within the SLOs (the scenario's capacity: section), candidates raced "
        "(docs/capacity.md)")
    trials: int | None = Field(None, ge=1, le=100,
                               description="trials per candidate (default: the scenario's)")
    baseline: bool = Field(
        False, description="also run the scenario's own server args as a candidate ('as "
        "given', first, interleaved with the grid), so the tune states the recommendation's "
        "gain over them (the 'N x over defaults' question when they are vLLM's defaults)")
    grid: Annotated[dict[str, list[EngineArgValue]], AfterValidator(_grid_values)] = Field(
        default_factory=dict, description="flag -> values; every combination is a candidate")
    search: list[SearchSpec] = Field(
        default_factory=list, description="procedures run in order after the grid, each from "
        "the best candidate so far")
    latency_cell: Annotated[str | None, AfterValidator(lambda c: c and check_cell(c))] = Field(
        None, description="the Pareto front's latency axis (default: the first latency SLO's "
        "cell, else e2e.p50)")
    max_candidates: int = Field(64, ge=1, le=1000)

    @model_validator(mode="after")
    def _something_to_search(self) -> TuneSpec:
        if not self.grid and not self.search and not self.baseline:
            raise ValueError("tune needs a grid (flag -> values) or a search procedure")
        if not self.grid and not self.search:
            raise ValueError("tune.baseline alone has nothing to compare the scenario's own "
                             "args with: add a grid or a search")
        combinations = 1
        for values in self.grid.values():
            combinations *= len(values)
        if combinations > self.max_candidates:
            raise ValueError(f"the grid has {combinations} combinations, more than "
                             f"max_candidates = {self.max_candidates}")
        return self

