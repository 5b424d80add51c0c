"""What every publisher builds on: the one :class:`Publisher` port and :class:`FilePublisher`.

:class:`Publisher` and :class:`PublishResult` are declared with the use cases' other ports and records
(:mod:`topocast.ports.protocols`, :mod:`topocast.ports.records`) and re-exported here for the
publishers (:mod:`topocast.publish.kubernetes`, :mod:`topocast.publish.slurmrest`,
``topocast.aws.ssm_publish``, ``topocast.gcp.gcs_publish``). Publishers must be idempotent
(publishing the same manifest twice is a no-op the second time) and must never move a target
back to an older generation. :class:`FilePublisher` is the common shape of publishers that keep
one target per file (SSM parameters, Cloud Storage objects): they only say which files they take
and how to publish one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Literal

from topocast.errors import TopocastError
from topocast.ports.records import Manifest, ManifestEntry, PublishResult

__all__ = ["FileOutcome", "FilePublisher", "verified_content"]

#: what publishing one file did: wrote it, found it current, or found a newer generation there
FileOutcome = Literal["written", "current", "older"]


class FilePublisher:
    """A publisher with one target per manifest file that never moves a target back a generation.

    Subclasses set ``name`` and ``nothing_detail`` and implement :meth:`wants`,
    :meth:`target` and :meth:`publish_one`; :meth:`publish` checks each file's
    bytes against the manifest and sums up. A file whose target already holds a
    newer generation is not an error (a slow, older render lost the race), but
    the result is then not "published": the target does not serve this manifest.
    """

    name: str
    #: the result's detail when the manifest lists nothing this publisher takes
    nothing_detail = "no artifact for this publisher in the manifest"

    def wants(self, entry: ManifestEntry) -> bool:
        raise NotImplementedError

    def target(self, entry: ManifestEntry) -> str:
        """The target's name for messages (parameter name, object URI)."""
        raise NotImplementedError

    def publish_one(self, generation: int, entry: ManifestEntry, content: bytes) -> tuple[FileOutcome, str]:
        """Publish one verified file; (outcome, what happened, naming the target)."""
        raise NotImplementedError

    def publish(self, manifest: Manifest, artifacts: Mapping[str, bytes]) -> PublishResult:
        entries = [e for e in manifest.artifacts if self.wants(e)]
        if not entries:
            return PublishResult(False, f"generation {manifest.generation}: {self.nothing_detail}")
        done: dict[FileOutcome, list[str]] = {"written": [], "current": [], "older": []}
        for entry in entries:
            content = verified_content(entry, artifacts, self.target(entry))
            outcome, what = self.publish_one(manifest.generation, entry, content)
            done[outcome].append(what)
        detail = (
            f"generation {manifest.generation}: {len(done['written'])} written, {len(done['current'])} already current"
        )
        if done["older"]:
            detail += f", {len(done['older'])} skipped (a newer generation is published): {'; '.join(done['older'])}"
        return PublishResult(not done["older"], detail, done["written"], done["current"] + done["older"])


def verified_content(entry: ManifestEntry, artifacts: Mapping[str, bytes], where: str) -> bytes:
    """The bytes of ``entry``; a clear error when they were not passed or do not match the manifest's sha256."""
    try:
        content = artifacts[entry.file]
    except KeyError:
        raise TopocastError(f"{where}: the manifest lists {entry.file!r} but its bytes were not passed") from None
    if hashlib.sha256(content).hexdigest() != entry.sha256:
        raise TopocastError(f"{where}: {entry.file} does not match the manifest's sha256; refusing to publish")
    return content
