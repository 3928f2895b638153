"""`capacity:` — `vllm-slo capacity`'s search: the load it varies (the open loop's request rate,
the closed loop's users, or a replayed trace's speedup), the range it searches, the resolution
it stops at, its time budget and an optional requirement a release gate holds the result to
(docs/capacity.md).

    capacity:
      load: traffic.arrival.rate     # or traffic.arrival.users (closed loop), or
                                     # traffic.trace.speedup (profile: trace)
      low: 1                         # req/s (or users) known to be carried
      high: 32                       # a load known to be too much
      tolerance: 5%                  # stop once high/low - 1 of the bracket is at most this
      budget: 30m                    # no step starts that would end past it
      require: ">= 10 req/s"         # exit 1 when the capacity's interval lies below it
      lengthen: 1                    # an INCONCLUSIVE step runs again with its window doubled
      trials: 1                      # the whole search again on a fresh server
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from vllm_slo.scenarios.model_base import MAX_RATE, Frozen, Seconds

# each step's SLO verdicts: above the interval's 95% (the calibration in docs/statistics.md)
DEFAULT_STEP_CONFIDENCE = 0.99
RATE_KEY = "traffic.arrival.rate"
USERS_KEY = "traffic.arrival.users"
SPEEDUP_KEY = "traffic.trace.speedup"
SPEEDUP_UNIT = "× trace"
LOAD_UNITS = {RATE_KEY: "req/s", USERS_KEY: "users", SPEEDUP_KEY: SPEEDUP_UNIT}
MAX_USERS = 100_000
_REQUIREMENT = re.compile(
    r"^\s*>=?\s*(\d+(?:\.\d*)?|\.\d+)\s*(req/s|users|[x×](?:\s*trace)?)?\s*$")


def _unit_of(written: str) -> str:
    """A requirement's unit as the spec names it: `x`, `×`, `x trace` are the speedup's."""
    return SPEEDUP_UNIT if written[0] in "x×" else written


def _fraction(value: object) -> object:
    """`5%` or 0.05."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            return float(value.strip()[:-1]) / 100.0
        except ValueError:
            raise ValueError(f"expected a percentage like 5% or a fraction like 0.05, "
                             f"got {value!r}") from None
    return value


class CapacitySpec(Frozen):
    """The highest load carried within every SLO: a search over one load key, one server for
    all its steps (each step its own warm-up and window, the prefix cache reset before it)."""

    load: Literal["traffic.arrival.rate", "traffic.arrival.users",
                  "traffic.trace.speedup"] = Field(
        "traffic.arrival.rate",
        description="the load the search varies: the open loop's rate (req/s), the closed "
                    "loop's users, or a replayed trace's speedup (× trace; profile: trace)")
    low: float = Field(gt=0, le=MAX_RATE, description="the lowest load searched (req/s, "
                                                     "users or × trace): the first step")
    high: float = Field(gt=0, le=MAX_RATE, description="the highest load searched: the "
                                                      "second step")
    tolerance: Annotated[float, BeforeValidator(_fraction)] = Field(
        0.05, gt=0, le=1, description="stop once the bracket's high/low - 1 is at most this "
                                      "(5% or 0.05)")
    budget_s: Seconds | None = Field(
        None, alias="budget", gt=0, description="wall time: no step starts that would end "
                                                "past it (estimated from the steps so far)")
    require: str | None = Field(
        None, description="`>= 10 req/s` (or `>= 16 users`, or `>= 2x` / `>= 2× trace` for "
                          "a trace's speedup): the capacity a gate asks for; exit 1 when the "
                          "capacity's interval lies below it")
    lengthen: int = Field(1, ge=0, le=4, description="times an INCONCLUSIVE step is run "
                                                     "again with its window doubled")
    trials: int = Field(1, ge=1, le=20, description="the whole search repeated, each on a "
                                                    "fresh server")
    step_confidence: float = Field(
        DEFAULT_STEP_CONFIDENCE, ge=0.9, le=0.999, description="the confidence of each "
        "step's SLO verdicts (PASS/FAIL at a load); above the capacity interval's 95% "
        "because latencies in a "
        "queue are correlated beyond what a verdict's effective sample size corrects: at 0.99 "
        "the interval covered the simulated stand-in's capacity 90-96% of the time, at 0.95 "
        "70-95% (docs/statistics.md)")

    @property
    def unit(self) -> str:
        return LOAD_UNITS[self.load]

    @property
    def whole_steps(self) -> bool:
        """Users are whole numbers: the search's loads are rounded to integers."""
        return self.load == USERS_KEY

    @property
    def required(self) -> float | None:
        """The load `require` asks for (None: no requirement)."""
        if self.require is None:
            return None
        match = _REQUIREMENT.match(self.require)
        assert match is not None  # validated
        return float(match.group(1))

    @model_validator(mode="after")
    def _range_and_requirement(self) -> CapacitySpec:
        if self.high <= self.low:
            raise ValueError(f"capacity.high ({self.high:g}) must be above capacity.low "
                             f"({self.low:g})")
        if self.whole_steps:
            for name, value in (("low", self.low), ("high", self.high)):
                if value != int(value) or value > MAX_USERS:
                    raise ValueError(f"capacity.{name} = {value:g}: users are whole numbers "
                                     f"from 1 to {MAX_USERS:,}")
        if self.require is not None:
            match = _REQUIREMENT.match(self.require)
            if match is None:
                raise ValueError(f"capacity.require = {self.require!r}: expected '>= N "
                                 f"{self.unit}', e.g. '>= 10 {self.unit}'")
            written = match.group(2)
            if written is not None and _unit_of(written) != self.unit:
                raise ValueError(f"capacity.require = {self.require!r}: the search varies "
                                 f"{self.load}, counted in {self.unit}, not {written}")
        return self
