"""One registry of named factories, loaded lazily: what the providers and the publishers are looked up in.

A factory is registered as the callable itself or as ``"module:attribute"``, imported on first use so
a function only imports the SDK of what it runs (NVIDIA Topograph's ``pkg/registry`` does the same for
its providers and engines). Every lookup error is one line naming the kind and what is known.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from topocast.errors import TopocastError

__all__ = ["Registry"]

F = TypeVar("F", bound=Callable[..., object])


class Registry(Generic[F]):
    """``name -> factory`` for one ``kind`` (``"provider"``, ``"publisher"``); ``error`` is what lookups raise."""

    def __init__(
        self,
        kind: str,
        entries: dict[str, str | F],
        *,
        aliases: Mapping[str, str] | None = None,
        error: type[TopocastError] = TopocastError,
    ) -> None:
        self.kind = kind
        self.entries = entries  # the table itself (a module's PROVIDERS / PUBLISHERS), not a copy
        self.aliases = dict(aliases or {})
        self.error = error

    def register(self, name: str, factory: str | F) -> None:
        """Add (or replace) ``name``; ``factory`` is the callable or ``"module:attribute"``."""
        self.entries[name] = factory

    def names(self) -> list[str]:
        return sorted(self.entries)

    def get(self, name: str) -> F:
        """The factory registered under ``name`` (or its alias), imported if registered by path."""
        name = self.aliases.get(name, name)
        try:
            target = self.entries[name]
        except KeyError:
            raise self.error(f"unknown {self.kind} {name!r}; known: {', '.join(self.names())}") from None
        if not isinstance(target, str):
            return target
        module, _, attr = target.partition(":")
        try:
            factory: F = getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            raise self.error(f"{self.kind} {name!r} is not available ({module}: {exc})") from None
        return factory
