"""The result types' one serialiser (vllm_slo/serialise.py): fields in order, and each
per-field option doing what the result documents need of it."""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from vllm_slo.serialise import derive, json_field, to_json


class Colour(enum.Enum):
    RED = "red"


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    label: str = json_field(skip=True)
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Whole:
    version: int = 3  # a default first: kw_only lets fields stand in the document's order
    name: str = json_field(key="title")
    low: float = json_field(group="span")
    high: float = json_field(group="span")
    width: float = json_field(group="span", init=False)
    colour: Colour
    parts: tuple[Part, ...] = json_field(keyed_by="label")
    by_name: Mapping[str, Part]
    extra: Part | None = json_field(default=None, omit_none=True)
    nothing: Part | None = None
    rule: tuple[str, str] = json_field(convert=lambda r: {"a": r[0], "b": r[1]}, flatten=True)

    def __post_init__(self) -> None:
        derive(self, width=self.high - self.low)


def whole(**changes: object) -> Whole:
    given: dict[str, object] = {
        "name": "w", "low": 1.0, "high": 3.5, "colour": Colour.RED,
        "parts": (Part(label="p", size=1), Part(label="q", size=2)),
        "by_name": {"x": Part(label="x", size=3)}, "rule": ("r", "s"), **changes}
    return Whole(**given)  # type: ignore[arg-type]


def test_every_option_in_field_order() -> None:
    assert json.dumps(to_json(whole())) == json.dumps({
        "version": 3, "title": "w", "span": {"low": 1.0, "high": 3.5, "width": 2.5},
        "colour": "red", "parts": {"p": {"size": 1}, "q": {"size": 2}},
        "by_name": {"x": {"size": 3}}, "nothing": None, "a": "r", "b": "s"})


def test_omit_none_writes_the_field_when_set() -> None:
    assert to_json(whole(extra=Part(label="e", size=9)))["extra"] == {"size": 9}


def test_only_a_result_is_serialised() -> None:
    with pytest.raises(TypeError):
        to_json({"a": 1})


@dataclass(frozen=True, slots=True)
class Plain:
    values: tuple[float, ...]
    total: float = field(init=False)

    def __post_init__(self) -> None:
        derive(self, total=sum(self.values))


def test_derived_fields_follow_a_replace() -> None:
    import dataclasses

    plain = dataclasses.replace(Plain((1.0, 2.0)), values=(4.0,))
    assert to_json(plain) == {"values": [4.0], "total": 4.0}
