"""One name -> factory registry per policy family; the CLI's choices come from here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from simulator.errors import ConfigError

T = TypeVar("T")


class Registry(Generic[T]):
    """A strict registry: empty or duplicate names are refused, unknown names list the valid ones."""

    def __init__(self, family: str) -> None:
        self.family = family
        self._factories: dict[str, Callable[..., T]] = {}
        self._docs: dict[str, str] = {}

    def register(self, name: str, doc: str = "") -> Callable[[Callable[..., T]], Callable[..., T]]:
        if not name or not name.strip():
            raise ValueError(f"{self.family}: empty policy name")

        def deco(factory: Callable[..., T]) -> Callable[..., T]:
            if name in self._factories:
                raise ValueError(f"{self.family}: duplicate policy name {name!r}")
            self._factories[name] = factory
            first_doc_line = ((factory.__doc__ or "").strip().splitlines() or [""])[0]
            self._docs[name] = doc or first_doc_line
            return factory

        return deco

    def factory(self, name: str) -> Callable[..., T]:
        """The registered factory of ``name`` (e.g. to read its parameters); unknown names are
        a ConfigError listing the valid ones."""
        try:
            return self._factories[name]
        except KeyError:
            raise ConfigError(
                f"unknown {self.family} policy {name!r}; choose one of: {', '.join(self.names())}"
            ) from None

    def create(self, name: str, **kwargs) -> T:
        """A fresh instance: policies keep no global state, so two caches never interfere."""
        return self.factory(name)(**kwargs)

    def names(self) -> list[str]:
        return sorted(self._factories)

    def describe(self) -> dict[str, str]:
        return {n: self._docs.get(n) or "" for n in self.names()}
