"""S3 implementation of :class:`topocast.pipeline.store.GraphStore`.

Layout under ``s3://<bucket>/<prefix>/<cluster>/graphs/``::

    000000000001.json   immutable, one per generation (the graph's pretty JSON, readable
    000000000002.json   by ``topocast render --graph``); metadata: generation, sha256
    latest.json         small pointer {generation, sha256, key, written_at}

How a write stays correct with concurrent writers and retries, using S3
conditional writes only (no lock service):

1. Read the pointer (remember its ETag); :func:`plan_write` decides unchanged /
   stale / write generation N+1.
2. Create ``N+1.json`` with ``If-None-Match: *``. This is the commit point:
   exactly one writer can create a generation. A loser whose content differs gets
   :class:`StaleGenerationError` and re-reads; a loser with identical content (or
   our own earlier attempt whose response was lost) treats the object as its own.
3. Move the pointer with ``If-Match: <etag>``. Anyone may do this for an existing
   generation object, so a writer that crashed between 2 and 3 cannot wedge the
   store: the next writer that collides on N+1 rolls the pointer forward first.

Transient S3 failures are retried a bounded number of times (:mod:`.retry`);
after that the error propagates and the caller's input is retried by the platform.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from topocast.aws.retry import error_code, with_retries
from topocast.errors import InvalidGraphError, StaleGenerationError
from topocast.graph import TopologyGraph, dump_graph, graph_from_json
from topocast.pipeline.store import GenerationNotFoundError, StoredGraph, WriteResult, plan_write

_LOST_RACE = {"PreconditionFailed"}
_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3GraphStore:
    """Graph generations for one cluster in one S3 bucket (see module docstring)."""

    def __init__(
        self, bucket: str, prefix: str, cluster: str, s3_client: Any, *, attempts: int = 4, base_delay: float = 0.1
    ) -> None:
        self.bucket = bucket
        self.cluster = cluster
        self.s3 = s3_client
        self._attempts = attempts
        self._base_delay = base_delay
        self.base_key = "/".join(p for p in (prefix.strip("/"), cluster, "graphs") if p)
        self.pointer_key = f"{self.base_key}/latest.json"

    # ----- keys ---------------------------------------------------------------------
    def generation_key(self, generation: int) -> str:
        return f"{self.base_key}/{generation:012d}.json"

    def _uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        return with_retries(lambda: fn(**kwargs), what=what, attempts=self._attempts, base_delay=self._base_delay)

    # ----- reads --------------------------------------------------------------------
    def _read_pointer(self) -> tuple[dict[str, Any], str] | None:
        """(pointer, etag) or None when the store is empty."""
        try:
            resp = self._call("read graph pointer", self.s3.get_object, Bucket=self.bucket, Key=self.pointer_key)
        except Exception as exc:
            if error_code(exc) in _MISSING:
                return None
            raise
        raw = resp["Body"].read()
        where = self._uri(self.pointer_key)
        try:
            pointer = json.loads(raw)
            generation = pointer["generation"]
            if not isinstance(generation, int) or generation < 1 or not isinstance(pointer["sha256"], str):
                raise ValueError(f"bad generation/sha256 {generation!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidGraphError(f"{where}: corrupt latest-generation pointer ({exc})") from None
        return pointer, resp["ETag"]

    def latest(self) -> StoredGraph | None:
        current = self._read_pointer()
        if current is None:
            return None
        pointer = current[0]
        return self._read_generation(pointer["generation"], pointer["sha256"])

    def get(self, generation: int) -> StoredGraph:
        return self._read_generation(generation, None)

    def _read_generation(self, generation: int, expected_hash: str | None) -> StoredGraph:
        key = self.generation_key(generation)
        where = self._uri(key)
        try:
            resp = self._call(f"read {where}", self.s3.get_object, Bucket=self.bucket, Key=key)
        except Exception as exc:
            if error_code(exc) in _MISSING:
                raise GenerationNotFoundError(f"{where}: graph generation {generation} not found") from None
            raise
        graph = graph_from_json(resp["Body"].read(), source=where)
        if graph.cluster != self.cluster:
            raise InvalidGraphError(f"{where}: graph is for cluster {graph.cluster!r}, expected {self.cluster!r}")
        content_hash = graph.content_hash()
        recorded = expected_hash or resp.get("Metadata", {}).get("sha256")
        if recorded and recorded != content_hash:
            raise InvalidGraphError(
                f"{where}: content sha256 {content_hash[:12]}… does not match the recorded {recorded[:12]}… "
                "(object altered or corrupt)"
            )
        written_at = resp.get("LastModified") or datetime.now(UTC)
        return StoredGraph(generation, graph, content_hash, written_at)

    # ----- writes -------------------------------------------------------------------
    def write_if_changed(self, graph: TopologyGraph, *, expected_generation: int | None) -> WriteResult:
        if graph.cluster != self.cluster:
            raise InvalidGraphError(f"graph is for cluster {graph.cluster!r} but this store holds {self.cluster!r}")
        new_hash = graph.content_hash()
        current = self._read_pointer()
        pointer = current[0] if current else None
        plan = plan_write(
            pointer["generation"] if pointer else None,
            pointer["sha256"] if pointer else None,
            new_hash,
            expected_generation,
        )
        if plan.action == "unchanged":
            return WriteResult(plan.generation, changed=False)
        if plan.action == "stale":
            raise StaleGenerationError(f"{self._uri(self.pointer_key)}: {plan.reason}")
        generation = plan.generation
        if not self._create_generation(generation, graph, new_hash):
            theirs = self._object_hash(generation)
            if theirs != new_hash:
                # Someone else committed this generation. Make sure the pointer shows it
                # (its writer may have died before moving it), then tell the caller to re-read.
                self._advance_pointer(current, generation, theirs)
                raise StaleGenerationError(
                    f"{self._uri(self.generation_key(generation))}: another writer stored generation "
                    f"{generation} first; re-read and retry"
                )
        self._advance_pointer(current, generation, new_hash)
        return WriteResult(generation, changed=True)

    def _create_generation(self, generation: int, graph: TopologyGraph, content_hash: str) -> bool:
        """Create the immutable object; False if it already exists."""
        key = self.generation_key(generation)
        try:
            self._call(
                f"write {self._uri(key)}",
                self.s3.put_object,
                Bucket=self.bucket,
                Key=key,
                Body=dump_graph(graph).encode(),
                ContentType="application/json",
                Metadata={"generation": str(generation), "sha256": content_hash},
                IfNoneMatch="*",
            )
        except Exception as exc:
            if error_code(exc) in _LOST_RACE:
                return False
            raise
        return True

    def _object_hash(self, generation: int) -> str:
        """Content hash of an existing generation (metadata first; fall back to reading it)."""
        key = self.generation_key(generation)
        head = self._call(f"head {self._uri(key)}", self.s3.head_object, Bucket=self.bucket, Key=key)
        recorded = head.get("Metadata", {}).get("sha256")
        return recorded or self._read_generation(generation, None).content_hash

    def _advance_pointer(self, current: tuple[dict[str, Any], str] | None, generation: int, sha: str) -> None:
        """Point latest.json at ``generation`` unless someone already moved it there or beyond."""
        body = json.dumps(
            {
                "generation": generation,
                "sha256": sha,
                "key": self.generation_key(generation),
                "written_at": datetime.now(UTC).isoformat(),
            }
        ).encode()
        for _ in range(5):
            condition = {"IfMatch": current[1]} if current else {"IfNoneMatch": "*"}
            try:
                self._call(
                    f"write {self._uri(self.pointer_key)}",
                    self.s3.put_object,
                    Bucket=self.bucket,
                    Key=self.pointer_key,
                    Body=body,
                    ContentType="application/json",
                    **condition,
                )
                return
            except Exception as exc:
                if error_code(exc) not in _LOST_RACE:
                    raise
            current = self._read_pointer()
            if current is not None and current[0]["generation"] >= generation:
                return
        raise StaleGenerationError(f"{self._uri(self.pointer_key)}: pointer kept changing; re-read and retry")
