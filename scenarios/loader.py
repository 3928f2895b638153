"""File -> overrides -> validate: turn a scenario reference plus `key=value` overrides into a
frozen `Scenario`, or a `ScenarioError` naming the file, the dotted key, the bad value and what
is allowed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.model import Scenario

SHIPPED_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class Override:
    dotted_key: str
    value: Any
    text: str


def shipped_scenarios() -> list[str]:
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml"))


def resolve_scenario_path(reference: str) -> Path:
    """A shipped name (`chat`) or a path to a YAML file."""
    candidate = Path(reference)
    if candidate.suffix in (".yaml", ".yml") or "/" in reference:
        if not candidate.is_file():
            raise ScenarioError(f"scenario file {reference!r} does not exist")
        return candidate
    shipped = SHIPPED_DIR / f"{reference}.yaml"
    if not shipped.is_file():
        raise ScenarioError(
            f"scenario {reference!r} is neither a shipped scenario "
            f"({', '.join(shipped_scenarios())}) nor a path to a .yaml file"
        )
    return shipped


def parse_override(text: str) -> Override:
    """`traffic.duration=30s` -> Override; the value is read as a YAML scalar/flow value."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ScenarioError(
            f"command-line argument {text!r} is not a 'dotted.key=value' override "
            f"(e.g. traffic.duration=30s or server.args.block-size=32)"
        )
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ScenarioError(f"override {text!r}: value {raw!r} is not valid YAML: {exc}") from exc
    return Override(key, value, text)


def apply_override(document: dict[str, Any], override: Override) -> None:
    node = document
    parts = override.dotted_key.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        elif not isinstance(child, dict):
            prefix = ".".join(parts[: depth + 1])
            raise ScenarioError(
                f"override {override.text!r}: {prefix!r} holds {child!r}, not a mapping, "
                f"so it has no key {parts[depth + 1]!r}"
            )
        node = child
    node[parts[-1]] = override.value


def deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def resolve_variants(scenario: Scenario, path: Path | str = "<scenario>") -> dict[str, Scenario]:
    """Each variant as a complete single-arm scenario (the base merged with the variant's
    patch); a scenario without variants is one arm named ""."""
    base = scenario.base_without_arms()
    if not scenario.variants:
        return {"": Scenario.model_validate(base)}
    arms = {}
    for name, patch in scenario.variants.items():
        try:
            arms[name] = Scenario.model_validate(deep_merge(base, patch))
        except ValidationError as exc:
            message = format_validation_error(Path(str(path)), exc)
            raise ScenarioError(message.replace("\n  ", f"\n  variants.{name}: ")) from None
    return arms


def load_scenario(reference: str, overrides: Sequence[str] = ()) -> tuple[Scenario, Path]:
    """Load a scenario file, apply overrides, validate strictly (variants included).
    Returns (scenario, file)."""
    path = resolve_scenario_path(reference)
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise ScenarioError(f"{path}: expected a mapping at the top level, got {document!r}")
    parsed = [parse_override(text) for text in overrides]
    for override in parsed:
        apply_override(document, override)
    try:
        scenario = Scenario.model_validate(document)
    except ValidationError as exc:
        raise ScenarioError(format_validation_error(path, exc, parsed)) from None
    resolve_variants(scenario, path)
    return scenario, path


def _allowed_keys(model: type[BaseModel], location: Sequence[str | int]) -> list[str] | None:
    """Walk the model along `location` (aliases) and list the keys allowed at its end."""
    current: Any = model
    for part in location:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = next(
            (f for name, f in current.model_fields.items() if (f.alias or name) == part), None
        )
        if field is None:
            return None
        current = field.annotation
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or name for name, f in current.model_fields.items()]
    return None


def format_validation_error(
    path: Path, error: ValidationError, overrides: Sequence[Override] = ()
) -> str:
    lines = [f"{path}: invalid scenario ({error.error_count()} problem(s))"]
    from_command_line = {o.dotted_key: o.text for o in overrides}
    for item in error.errors(include_url=False):
        location = [str(p) for p in item["loc"]]
        dotted = ".".join(location) or "(top level)"
        if item["type"] == "extra_forbidden":
            allowed = _allowed_keys(Scenario, location[:-1]) or []
            message = f"unknown key; allowed keys here: {', '.join(allowed)}"
        else:
            message = item["msg"].removeprefix("Value error, ")
        origin = (
            f" (from command-line override {from_command_line[dotted]!r})"
            if dotted in from_command_line
            else ""
        )
        value = item.get("input")
        shown = "" if isinstance(value, dict) else f" = {value!r}"
        lines.append(f"  {dotted}{shown}{origin}: {message}")
    return "\n".join(lines)
