"""Publish target ``slurmrestd``: the publish function moves nodes on the running controller itself.

For a function that can reach slurmrestd (a Lambda in the cluster's VPC, a Cloud Function with a
VPC connector). Each publish compares the manifest's Slurm file (``TOPOCAST_SLURMREST_FORMAT``,
default slurm-tree) with the one this publisher last applied, and takes the live plan of
:func:`topocast.slurm.live.plan_live` (only adds and moves, at most ``TOPOCAST_SLURMREST_MAX_SHARE``
of the nodes, 10 % by default):

* live: one bulk ``POST .../nodes/`` per destination, every moved node read back, and on any
  failure the moved nodes put back (:func:`topocast.slurm.live.apply_moves`); the publish is then
  not done and is retried;
* anything else (a switch deleted, a node removed, more than the share): nothing is sent, the
  result says why; the head-node agent (``topocast pull``, fed by the ``ssm`` / ``gcs`` target)
  installs the file and reconfigures. This publisher never writes files on the controller: list
  it *beside* ``ssm`` / ``gcs``, which keep the file for restarts.

The last applied file (the baseline) is kept in the pipeline's bucket under
``<prefix>/<cluster>/state/slurmrestd/``, with its generation, so a publish is idempotent and never
goes back a generation. The first publish records the baseline and moves nothing (it cannot know
what the controller runs). The token is read at every publish (a rotated secret is picked up).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from topocast.errors import TopocastError
from topocast.pipeline.objects import ObjectStore, cluster_base
from topocast.ports.records import Manifest, PublishResult
from topocast.publish.base import verified_content

__all__ = ["SlurmRestPublisher", "from_inputs"]


class SlurmRestPublisher:
    name = "slurmrestd"

    def __init__(
        self,
        updater: Callable[[], Any],
        objects: ObjectStore,
        state_prefix: str,
        fmt: str = "slurm-tree",
        max_share: float = 0.1,
    ) -> None:
        #: returns a connected :class:`topocast.slurm.rest.RestUpdater` (called only when there is a change)
        self._updater = updater
        self._objects = objects
        self._prefix = state_prefix.rstrip("/")
        self.format = fmt
        #: the most nodes (share of the cluster) one publish moves live
        self.max_share = max_share

    def publish(self, manifest: Manifest, artifacts: Mapping[str, bytes]) -> PublishResult:
        from topocast.slurm.live import apply_moves, placements, plan_live

        entry = next((e for e in manifest.artifacts if e.format == self.format), None)
        if entry is None:
            return PublishResult(False, f"generation {manifest.generation}: no {self.format} file in the manifest")
        key = f"{self._prefix}/{entry.file}"
        target = f"slurmrestd ({entry.file})"
        content = verified_content(entry, artifacts, target)
        stored = self._objects.get(key)
        applied_gen = int(stored.metadata.get("generation", "-1")) if stored is not None else -1
        if stored is not None and stored.data == content:
            return PublishResult(True, f"generation {manifest.generation}: already applied", [], [target])
        if applied_gen > manifest.generation:
            return PublishResult(
                False, f"generation {manifest.generation}: generation {applied_gen} is applied; kept", [], [target]
            )
        where = f"generation {manifest.generation} ({entry.file})"
        if stored is None:
            self._record(key, content, manifest.generation)
            return PublishResult(
                True, f"{where}: baseline recorded, nothing moved (the head-node agent installs the file)", [key]
            )
        text = content.decode("utf-8", "replace")
        updater = self._updater()
        plan = plan_live(
            stored.data.decode("utf-8", "replace"),
            text,
            updater.version(),
            max_share=self.max_share,
            source=entry.file,
            defined=updater.defined(),
        )
        if not plan.live or not plan.moves:
            self._record(key, content, manifest.generation)
            if not plan.live:
                return PublishResult(
                    True, f"{where}: not moved live ({plan.reason}); left to the head-node agent", [key]
                )
            return PublishResult(True, f"{where}: {plan.reason}", [key])
        known = updater.defined() or sorted(placements(text).specs)
        moved = apply_moves(plan, updater, text, known)
        if not moved.ok:
            undo = (
                f"; could not move back: {'; '.join(moved.undo_failures)}"
                if moved.undo_failures
                else "; nodes moved back"
            )
            return PublishResult(False, f"{where}: step {moved.step} failed: {moved.failure}{undo}")
        self._record(key, content, manifest.generation)
        calls = len(plan.moves)
        return PublishResult(
            True,
            f"{where}: {len(plan.changed)} node(s) moved live with {calls} slurmrestd call{'s' * (calls != 1)} "
            f"({plan.reason})",
            [target],
        )

    def _record(self, key: str, content: bytes, generation: int) -> None:
        self._objects.put(key, content, content_type="text/plain", metadata={"generation": str(generation)})


def from_inputs(inputs: Any) -> SlurmRestPublisher:
    """Registry factory (``PUBLISHERS["slurmrestd"]``): TOPOCAST_SLURMREST_URL / _TOKEN / _FORMAT."""
    from topocast.slurm.rest import RestUpdater, connect
    from topocast.slurm.rest_token import read_token

    s = inputs.settings
    if not s.slurmrest_url or not s.slurmrest_token:
        raise TopocastError("publisher slurmrestd needs TOPOCAST_SLURMREST_URL and TOPOCAST_SLURMREST_TOKEN")
    if inputs.objects is None:
        raise TopocastError("publisher slurmrestd needs the pipeline's bucket (TOPOCAST_BUCKET) for its baseline")

    def updater() -> RestUpdater:
        return RestUpdater(connect(s.slurmrest_url, read_token(s.slurmrest_token)))

    return SlurmRestPublisher(
        updater,
        inputs.objects,
        cluster_base(s.prefix, s.cluster, "state/slurmrestd"),
        s.slurmrest_format,
        s.slurmrest_max_share,
    )
