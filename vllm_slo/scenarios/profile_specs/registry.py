"""The traffic-profile registry of the bottom layer: each profile's name (`traffic.profile`),
the model of its settings section (`traffic.<name>`), and whether a `mix` may draw from it.
The scenario model validates a scenario file against it (so `vllm-slo report` and every other
command read scenarios without importing the load generator); the generators are registered by
name in `vllm_slo.loadtests.profiles`, whose registry refuses a generator without a spec here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import MappingProxyType

from vllm_slo.scenarios.model_base import Frozen
from vllm_slo.scenarios.registry import Registry

_PROFILE_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
# keys of `traffic` a settings section must not take (the model's own fields are checked too)
_RESERVED = ("mix",)


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    name: str  # as `traffic.profile` names it; its settings are `traffic.<name>`
    settings: type[Frozen] | None  # the model of `traffic.<name>`; None: the profile has none
    mixable: bool = False  # a mix may draw whole conversations from it (it has conversations)


_SPECS: Registry[ProfileSpec] = Registry("traffic profile")
# every registered profile, in registration order (a read-only view)
PROFILE_SPECS: MappingProxyType[str, ProfileSpec] = _SPECS.view


def register_profile_spec(spec: ProfileSpec, *, built_in: bool = False) -> ProfileSpec:
    """Adds a profile's spec; returns it. ValueError on a taken or malformed name."""
    if not _PROFILE_NAME.match(spec.name):
        raise ValueError(f"a profile's name is lower-case words joined by '-', got {spec.name!r}")
    if spec.settings is not None and spec.name in _RESERVED:
        raise ValueError(f"traffic.{spec.name} is taken: a profile with settings is not named "
                         f"{', '.join(_RESERVED)}")
    return _SPECS.add(spec.name, spec, built_in=built_in)


def unregister_profile_spec(name: str) -> None:
    """Removes a profile added by `register_profile_spec` (tests that add one clean up)."""
    _SPECS.remove(name)


def mixable_profiles() -> tuple[str, ...]:
    """The profiles a `mix` can draw conversations from."""
    return tuple(name for name, spec in PROFILE_SPECS.items() if spec.mixable)


def one_of(names: tuple[str, ...] | list[str]) -> str:
    """`'a', 'b' or 'c'` (as pydantic lists a Literal's values)."""
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
