"""A registry of named entries: the built-in ones fixed, others added and removed by plugins
and tests. The metric registry (`scenarios.metrics`), the profile specs
(`scenarios.profile_specs`) and the profile generators (`loadtests.profiles`) are each one;
their own `register_*` functions check an entry's content, this checks names only."""

from __future__ import annotations

from types import MappingProxyType
from typing import Generic, TypeVar

Entry = TypeVar("Entry")


class Registry(Generic[Entry]):
    def __init__(self, what: str) -> None:
        self._what = what  # "metric", "traffic profile", ...: what the messages call an entry
        self._entries: dict[str, Entry] = {}
        self._built_in: list[str] = []
        # every entry, in registration order (a read-only view that follows additions)
        self.view: MappingProxyType[str, Entry] = MappingProxyType(self._entries)

    @property
    def built_in(self) -> tuple[str, ...]:
        return tuple(self._built_in)

    def add(self, name: str, entry: Entry, *, built_in: bool = False) -> Entry:
        """Adds `entry` under `name`; returns it. ValueError when the name is taken."""
        if name in self._entries:
            raise ValueError(f"{self._what} {name!r} is already registered")
        self._entries[name] = entry
        if built_in:
            self._built_in.append(name)
        return entry

    def remove(self, name: str) -> None:
        """Removes an added entry (tests that add one clean up); a built-in one stays."""
        if name in self._built_in:
            raise ValueError(f"{name!r} is a built-in {self._what}")
        self._entries.pop(name, None)
