"""The publisher contract the publish stage calls: manifest + file bytes in, "does the target serve it?" out.

Implementations live outside the core (``topocast.publish``, ``topocast.aws.ssm_publish``,
``topocast.gcp.gcs_publish``, ``topocast.k8s``); they must be idempotent (publishing the same
manifest twice is a no-op the second time, so a retried publish redoes only what is not done)
and must never move a target back to an older generation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from topocast.pipeline.artifacts import Manifest

__all__ = ["PublishResult", "Publisher"]


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
