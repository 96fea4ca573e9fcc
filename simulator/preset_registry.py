"""A case-insensitive registry of named presets with aliases, loaded on first use.

GPUs and models are both looked up by a name or an alias from a packaged JSON file; this is
the one place that handles spelling, duplicate names and the "unknown name" error.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from simulator.errors import ConfigError

T = TypeVar("T")


def _key(name: str) -> str:
    return name.strip().lower()


class PresetRegistry(Generic[T]):
    """Presets of one kind (``kind`` names it in errors), filled by ``load`` on first lookup."""

    def __init__(self, kind: str, load: Callable[[], Iterable[T]]) -> None:
        self.kind = kind
        self._load = load
        self._specs: dict[str, T] = {}
        self._aliases: dict[str, str] = {}
        self._loaded = False

    def register(self, spec: T) -> None:
        """Add a preset (it has ``name`` and ``aliases``); rejects a name or alias already taken."""
        key = _key(spec.name)  # type: ignore[attr-defined]
        if not key:
            raise ConfigError(f"cannot register a {self.kind} with an empty name")
        for n in (key, *(_key(a) for a in spec.aliases)):  # type: ignore[attr-defined]
            if n in self._specs or n in self._aliases:
                raise ConfigError(f"conflicting registration: {self.kind} name {n!r} already registered")
        self._specs[key] = spec
        for alias in spec.aliases:  # type: ignore[attr-defined]
            self._aliases[_key(alias)] = key

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._loaded = True
            for spec in self._load():
                self.register(spec)

    def names(self) -> list[str]:
        """Sorted preset names (canonical spelling)."""
        self._ensure_loaded()
        return sorted(spec.name for spec in self._specs.values())  # type: ignore[attr-defined]

    def get(self, name: str) -> T:
        """Preset by name or alias (case-insensitive); ConfigError lists the valid names."""
        self._ensure_loaded()
        key = _key(name)
        key = self._aliases.get(key, key)
        if key not in self._specs:
            raise ConfigError(f"unknown {self.kind} {name!r}; presets: {', '.join(self.names())}")
        return self._specs[key]
