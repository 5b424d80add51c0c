"""One registry of named components, loaded lazily: what the providers, publishers and renderers are looked up in.

A component (a provider or publisher factory, a renderer object) is registered as itself or as
``"module:attribute"``, imported on first use so
a function only imports the SDK of what it runs (NVIDIA Topograph's ``pkg/registry`` does the same for
its providers and engines). Every lookup error is one line naming the kind and what is known.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Generic, TypeVar

from topocast.errors import TopocastError

__all__ = ["Registry"]

#: what one entry is: a provider / publisher factory, a :class:`~topocast.renderers.base.Renderer`
F = TypeVar("F")


class Registry(Generic[F]):
    """``name -> component`` for one ``kind`` (``"provider"``, ``"publisher"``, ``"format"``); ``error`` is what
    lookups raise."""

    def __init__(
        self,
        kind: str,
        entries: dict[str, str | F],
        *,
        aliases: Mapping[str, str] | None = None,
        error: type[TopocastError] = TopocastError,
    ) -> None:
        self.kind = kind
        self.entries = entries  # the table itself (a module's PROVIDERS / PUBLISHERS / RENDERERS), not a copy
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
