"""File -> overrides -> validate: turn a scenario reference plus `key=value` overrides into a
frozen `Scenario`, or a `ScenarioError` naming the file, the dotted key, the bad value and what
is allowed."""

from __future__ import annotations

import errno
import os
import reprlib
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from vllm_slo.resources import user_folder
from vllm_slo.scenarios.errors import ScenarioError
from vllm_slo.scenarios.model import Scenario
from vllm_slo.scenarios.model_base import Frozen

SHIPPED_DIR = user_folder("scenarios")


def _duplicate_key(node: yaml.Node | None, where: tuple[str, ...] = (),
                   seen_nodes: set[int] | None = None) -> tuple[str, int, int] | None:
    """The first key given twice in one mapping of a composed YAML document, as (dotted key,
    line of the first, line of the second), or None. Plain YAML keeps the last silently (two
    variants of one name would become one arm)."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if node is None or id(node) in seen_nodes:  # aliases may point back up the tree
        return None
    seen_nodes.add(id(node))
    children: list[tuple[str, yaml.Node]] = []
    if isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: keys may be replaced
                continue
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else "?"
            line = key_node.start_mark.line + 1
            if isinstance(key_node, yaml.ScalarNode) and key in first_line:
                return ".".join((*where, key)), first_line[key], line
            first_line.setdefault(key, line)
            children.append((key, value_node))
    elif isinstance(node, yaml.SequenceNode):
        children = [(str(index), item) for index, item in enumerate(node.value)]
    for key, child in children:
        found = _duplicate_key(child, (*where, key), seen_nodes)
        if found is not None:
            return found
    return None


MAX_SCENARIO_BYTES = 1 << 20  # a scenario file is a page of YAML
MAX_YAML_VALUES = 100_000  # values after alias expansion (a 348-byte alias bomb: millions)
MAX_SHOWN_VALUE_CHARS = 200  # a bad value quoted in an error message, at most
MAX_SHOWN_MESSAGE_CHARS = 400  # what is wrong with it, at most


def _expanded_values(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many values `node` stands for once every alias is expanded (aliases share nodes
    in the composed graph, so this is counted, not built). Raises ValueError on a node that
    contains itself."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise ValueError("an alias refers to a node that contains it (recursive alias)")
    open_nodes.add(key)
    children: list[yaml.Node] = []
    if isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    total = 1
    for child in children:
        total += _expanded_values(child, sizes, open_nodes)
        if total > MAX_YAML_VALUES:
            break
    open_nodes.discard(key)
    sizes[key] = total
    return total


def load_yaml_text(text: str) -> tuple[Any, tuple[str, int, int] | None]:
    """YAML text loaded safely (plain data only: `!!python/...` tags are refused), with the
    first duplicate key (see `_duplicate_key`). Raises yaml.YAMLError, or ValueError for
    aliases that expand beyond MAX_YAML_VALUES values or refer to themselves."""
    composed = yaml.compose(text, Loader=yaml.SafeLoader)
    if composed is not None:
        size = _expanded_values(composed, {}, set())
        if size > MAX_YAML_VALUES:
            raise ValueError(f"its aliases expand to more than {MAX_YAML_VALUES:,} values "
                             "(an alias bomb?); a scenario needs a few hundred")
    return yaml.safe_load(text), _duplicate_key(composed)


def _scenario_text(path: Path) -> str:
    """A scenario file's text, or a ScenarioError saying why it is not one (too large, not
    readable, not UTF-8 text)."""
    try:
        size = path.stat().st_size
        if size > MAX_SCENARIO_BYTES:
            raise ScenarioError(f"{path}: {size:,} bytes is not a scenario file (at most "
                                f"{MAX_SCENARIO_BYTES:,} bytes of YAML)")
        data = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"{path}: not a text file (byte 0x{data[exc.start]:02x} at offset {exc.start} is "
            "not UTF-8): a scenario is a YAML text file") from None


def read_scenario_document(path: Path) -> Any:
    """The YAML of a scenario file, loaded safely (plain data only: `!!python/...` tags are
    refused) with duplicate keys rejected and alias expansion bounded."""
    text = _scenario_text(path)
    try:
        document, duplicate = load_yaml_text(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from exc
    except ValueError as exc:
        raise ScenarioError(f"{path}: refused: {exc}") from None
    if duplicate is not None:
        dotted, first, second = duplicate
        raise ScenarioError(
            f"{path}: invalid scenario (1 problem(s))\n  {dotted}: given twice (lines {first} "
            f"and {second}); each key may appear once per mapping (YAML would silently keep "
            "the last)")
    return document


@dataclass(frozen=True, slots=True)
class Override:
    dotted_key: str
    value: Any
    text: str


def shipped_scenarios() -> list[str]:
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml"))


def _not_a_file(reference: str, candidate: Path) -> str | None:
    """Why `candidate` is not a readable scenario file (a directory, a symbolic link loop, a
    broken link, missing), or None when it is a regular file."""
    try:
        mode = candidate.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"scenario path {reference!r} is a symbolic link loop"
        if candidate.is_symlink():
            return (f"scenario path {reference!r} is a broken symbolic link (to "
                    f"{os.readlink(candidate)!r})")
        if exc.errno == errno.ENOENT:
            return f"scenario file {reference!r} does not exist"
        return f"scenario path {reference!r}: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return (f"scenario path {reference!r} is a directory, not a scenario file (give the "
                ".yaml file in it)")
    if not stat.S_ISREG(mode):
        return f"scenario path {reference!r} is not a regular file"
    return None


def resolve_scenario_path(reference: str) -> Path:
    """A shipped name (`chat`) or a path to a YAML file."""
    candidate = Path(reference)
    if candidate.suffix in (".yaml", ".yml") or "/" in reference:
        problem = _not_a_file(reference, candidate)
        if problem is not None:
            raise ScenarioError(problem)
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
        value = load_yaml_text(raw)[0] if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ScenarioError(f"override {text!r}: value {raw!r} is not valid YAML: {exc}") from exc
    except ValueError as exc:
        raise ScenarioError(f"override {key!r}: value refused: {exc}") from None
    return Override(key, value, text)


def check_repeated_overrides(overrides: Sequence[Override]) -> None:
    """Each key once: a later override of the same key with another value, or of a mapping
    holding an earlier one, would silently replace it (the same value twice changes nothing:
    a shared list of overrides may repeat one)."""
    for index, override in enumerate(overrides):
        for earlier in overrides[:index]:
            if earlier.dotted_key == override.dotted_key and earlier.value != override.value:
                raise ScenarioError(
                    f"override {override.text!r}: {override.dotted_key} is given twice (also "
                    f"{earlier.text!r}); give each key once")
            if earlier.dotted_key.startswith(override.dotted_key + "."):
                raise ScenarioError(
                    f"override {override.text!r} replaces the whole of {override.dotted_key}, "
                    f"including {earlier.text!r} given before it; give {override.dotted_key} "
                    "first, then its keys")


def apply_override(document: dict[str, Any], override: Override) -> None:
    node = document
    parts = override.dotted_key.split(".")
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part)
        if depth == 0 and part == "trials" and not isinstance(child, dict):
            # `trials: N` is {min: N, max: N}: `trials.max=8` makes it sequential
            count = 1 if child is None else child
            child = node[part] = {"min": count, "max": count}
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
    document = read_scenario_document(path) or {}
    if not isinstance(document, dict):
        raise ScenarioError(f"{path}: expected a mapping at the top level, got {document!r}")
    try:
        parsed = [parse_override(text) for text in overrides]
        check_repeated_overrides(parsed)
        for override in parsed:
            apply_override(document, override)
    except ScenarioError as error:  # name the scenario file the override was applied to
        raise ScenarioError(f"{path}: {error}") from None
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
        if field is None:  # a key a registry adds (a metric of slo:, a profile's section)
            current = _registered_keys(current).get(str(part))
            if current is None:
                return None
        else:
            current = field.annotation
    if isinstance(current, type) and issubclass(current, BaseModel):
        fields = [f.alias or name for name, f in current.model_fields.items()]
        return [*_registered_keys(current), *fields]
    return None


def _registered_keys(model: type[BaseModel]) -> Mapping[str, Any]:
    """The keys a registry adds to a model's mapping (model_base.Frozen.registered_keys)."""
    return model.registered_keys() if issubclass(model, Frozen) else {}


_UNION_MEMBERS = {"str": "a string", "int": "an integer", "float": "a number",
                  "bool": "true/false", "none": "null"}


def _union_member(part: str) -> str | None:
    """What a union member's tag in an error location (`int`, `list[...]`) admits, or None
    when the part is a key or an index."""
    if part in _UNION_MEMBERS:
        return _UNION_MEMBERS[part]
    if part.startswith(("list[", "dict[")) and part.endswith("]"):
        return "a list of scalars" if part.startswith("list[") else "a mapping"
    return None


_SHORT_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_SHORT_REPR.maxlevel, _SHORT_REPR.maxlist, _SHORT_REPR.maxdict = 4, 12, 12
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = MAX_SHOWN_VALUE_CHARS


def _shown(value: Any) -> str:
    """A bad value as an error message quotes it: its repr, cut at MAX_SHOWN_VALUE_CHARS."""
    text = _SHORT_REPR.repr(value)
    if len(text) <= MAX_SHOWN_VALUE_CHARS:
        return text
    return f"{text[:MAX_SHOWN_VALUE_CHARS]}… ({len(text):,} characters)"


def format_validation_error(
    path: Path, error: ValidationError, overrides: Sequence[Override] = ()
) -> str:
    from_command_line = {o.dotted_key: o.text for o in overrides}
    problems: list[list[Any]] = []  # [dotted key, value, message or the union's members]
    unions: dict[str, list[Any]] = {}
    for item in error.errors(include_url=False):
        location = [str(p) for p in item["loc"]]
        member = next((i for i, part in enumerate(location) if _union_member(part)), None)
        if member is not None:  # a value that fits no member of a union: one line for it
            dotted = ".".join(location[:member])
            if dotted not in unions:
                unions[dotted] = [dotted, {}, []]
                problems.append(unions[dotted])
            if len(location) == member + 1:
                unions[dotted][1] = item.get("input")
            if _union_member(location[member]) not in unions[dotted][2]:
                unions[dotted][2].append(_union_member(location[member]))
            continue
        dotted = ".".join(location) or "(top level)"
        if item["type"] == "extra_forbidden":
            allowed = _allowed_keys(Scenario, location[:-1]) or []
            message = f"unknown key; allowed keys here: {', '.join(allowed)}"
        else:
            message = item["msg"].removeprefix("Value error, ")
            if len(message) > MAX_SHOWN_MESSAGE_CHARS:  # it may quote the value (units.py)
                message = f"{message[:MAX_SHOWN_MESSAGE_CHARS]}…"
        problems.append([dotted, item.get("input"), message])
    lines = [f"{path}: invalid scenario ({len(problems)} problem(s))"]
    for dotted, value, message in problems:
        if isinstance(message, list):
            message = "expected " + (f"{', '.join(message[:-1])} or {message[-1]}"
                                     if len(message) > 1 else message[0])
        origin = (
            f" (from command-line override {from_command_line[dotted]!r})"
            if dotted in from_command_line
            else ""
        )
        shown = "" if isinstance(value, dict) else f" = {_shown(value)}"
        lines.append(f"  {dotted}{shown}{origin}: {message}")
    return "\n".join(lines)
