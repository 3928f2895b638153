"""One serialiser for the suite's result types (pure; a leaf: it imports nothing of the suite,
so every layer may use it).

`to_json(result)` writes a dataclass as a JSON object of its fields, in field order (result
types are `kw_only`, so their fields can stand in the document's order whatever their
defaults). A field that is written otherwise says so in its metadata, `json_field(...)`:

- `key`: its name in the document, where that differs from the field's;
- `group`: the object it sits in (`throughput: {output_tokens_per_s, ...}`); a group's
  fields stand next to each other;
- `omit_none`: left out when None (a part of the document only some results have);
- `skip`: never written (the key a mapping of results is written under, or a working value);
- `keyed_by`: a sequence of results written as an object keyed by that attribute of each;
- `convert`: a function applied first (a type from elsewhere, e.g. a scenario's SLO rule);
- `flatten`: the (converted) object's keys stand in this object, not under the field's key.

Values: a dataclass recursively; an Enum as its value; a mapping as an object; a tuple or list
as a list; anything else as it is (str, int, float, bool, None). A value the document states
but the result derives (`healthy`, `valid_trials`) is a field too, `init=False`, set in
`__post_init__` by `derive`: the document is the result's fields, nothing else.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from typing import Any

_META = "json"


@dataclasses.dataclass(frozen=True, slots=True)
class FieldSpec:
    key: str | None = None
    group: str | None = None
    omit_none: bool = False
    skip: bool = False
    keyed_by: str | None = None
    convert: Callable[[Any], Any] | None = None
    flatten: bool = False


def json_field(*, key: str | None = None, group: str | None = None, omit_none: bool = False,
               skip: bool = False, keyed_by: str | None = None,
               convert: Callable[[Any], Any] | None = None, flatten: bool = False,
               **field_args: Any) -> Any:
    """`dataclasses.field(**field_args)` with how the field is written (see the module)."""
    spec = FieldSpec(key, group, omit_none, skip, keyed_by, convert, flatten)
    return dataclasses.field(metadata={_META: spec}, **field_args)


def derive(result: object, **values: Any) -> None:
    """Set a frozen result's derived (`init=False`) fields, from its `__post_init__`."""
    for name, value in values.items():
        object.__setattr__(result, name, value)


_PLAIN = FieldSpec()


def to_json(result: object) -> dict[str, Any]:
    """A result (a dataclass instance) as a JSON object (see the module docstring)."""
    if not dataclasses.is_dataclass(result) or isinstance(result, type):
        raise TypeError(f"not a result: {result!r}")
    document: dict[str, Any] = {}
    for field in dataclasses.fields(result):
        spec: FieldSpec = field.metadata.get(_META, _PLAIN)
        value = getattr(result, field.name)
        if spec.skip or (spec.omit_none and value is None):
            continue
        if spec.convert is not None:
            value = spec.convert(value)
        if spec.keyed_by is not None:
            value = {getattr(item, spec.keyed_by): item for item in value}
        value = _value(value)
        target = document if spec.group is None else document.setdefault(spec.group, {})
        if spec.flatten:
            target.update(value)
        else:
            target[spec.key or field.name] = value
    return document


def _value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {key: _value(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [_value(item) for item in value]
    return value
