"""The publisher contract: manifest + file bytes in, "does the target now serve it?" out.

Publishers must be idempotent (publishing the same manifest twice is a no-op
the second time) and must never move a target back to an older generation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from topocast.pipeline.artifacts import Manifest


@dataclass(frozen=True)
class PublishResult:
    #: True when the target now serves this manifest's content (written now or already there)
    published: bool
    detail: str
    #: targets written by this call (parameter names, object names...)
    written: list[str] = field(default_factory=list)
    #: targets left alone, each with the reason (already current, newer generation present...)
    skipped: list[str] = field(default_factory=list)


class Publisher(Protocol):
    name: str

    def publish(self, manifest: Manifest, artifacts: Mapping[str, bytes]) -> PublishResult:
        """Push ``artifacts`` (file name -> bytes, as listed in ``manifest``) to the target."""
        ...
