"""Leader election on a ``coordination.k8s.io/v1`` Lease, the way client-go's leaderelection does it.

One replica holds the Lease (``spec.holderIdentity``) and renews it (``spec.renewTime``) every
``retry_seconds``; the others watch it. Every write carries the ``resourceVersion`` that was read, so two
candidates that race get one success and one 409 Conflict: there is never a second holder.

Expiry is judged on this process's own clock, never on the timestamps in the Lease (which another
machine wrote, with its own clock): a candidate records when it last saw the Lease *change*
(``resourceVersion``), and takes it over only when it has not changed for ``lease_seconds``. A holder
that cannot renew for ``lease_seconds`` (its own clock again, from its last successful renewal) stops
acting as leader before another replica may take over, so two replicas never act at once as long as
clocks run at the same rate (client-go's assumption too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

__all__ = ["LeaderElector", "LeaseApi", "LeaseConfig"]


class LeaseApi(Protocol):
    """What the elector calls (:class:`topocast.k8s.client.KubeClient` has it)."""

    def request_json(
        self, method: str, path: str, *, params: Any = None, body: Any = None, content_type: str = ...
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class LeaseConfig:
    """One Lease: where it is and how long a holder keeps it without renewing."""

    namespace: str
    name: str
    identity: str
    lease_seconds: float = 15.0
    retry_seconds: float = 2.0


def _micro_time(now: float) -> str:
    """A Lease's MicroTime (RFC 3339 with microseconds)."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class LeaderElector:
    """``step()`` once per ``retry_seconds``: acquire or renew; ``leading`` says whether to act now."""

    api: LeaseApi
    config: LeaseConfig
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    #: the last resourceVersion seen and when (own clock) it was first seen
    _seen: tuple[str, float] | None = field(default=None, init=False)
    _renewed_at: float | None = field(default=None, init=False)
    transitions: int = field(default=0, init=False)
    last_error: str | None = field(default=None, init=False)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.config.namespace}/leases"

    @property
    def leading(self) -> bool:
        """Holding the Lease, renewed less than ``lease_seconds`` ago by this process's clock."""
        return self._renewed_at is not None and self.clock() - self._renewed_at < self.config.lease_seconds

    def step(self) -> bool:
        """Try to acquire or renew once; returns :attr:`leading`. API errors count as a failed renewal."""
        from lightkube.core.exceptions import ApiError

        try:
            self._step()
            self.last_error = None
        except ApiError as exc:
            code = getattr(exc.status, "code", None)
            self.last_error = f"lease {self.config.namespace}/{self.config.name}: HTTP {code} {exc}"[:300]
        except Exception as exc:  # connection errors: the same as a failed renewal
            self.last_error = f"lease {self.config.namespace}/{self.config.name}: {type(exc).__name__}: {exc}"[:300]
        return self.leading

    def release(self) -> None:
        """Give the Lease up (a clean shutdown): another replica takes over at its next step."""
        if not self.leading:
            return
        try:
            lease = self.api.request_json("GET", f"{self.path}/{self.config.name}")
            if lease.get("spec", {}).get("holderIdentity") == self.config.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                self.api.request_json("PUT", f"{self.path}/{self.config.name}", body=lease)
        except Exception:  # best effort: the Lease expires anyway
            pass
        self._renewed_at = None

    def _step(self) -> None:
        from lightkube.core.exceptions import ApiError

        now, c = self.clock(), self.config
        try:
            lease = self.api.request_json("GET", f"{self.path}/{c.name}")
        except ApiError as exc:
            if getattr(exc.status, "code", None) != 404:
                raise
            self._write("POST", self.path, self._body(None, acquired=True), acquired=True)
            return
        meta, spec = lease.get("metadata", {}), lease.get("spec") or {}
        version = str(meta.get("resourceVersion", ""))
        if self._seen is None or self._seen[0] != version:
            self._seen = (version, now)
        holder = spec.get("holderIdentity")
        if holder == c.identity:
            self._write("PUT", f"{self.path}/{c.name}", self._body(lease, acquired=False), acquired=False)
            return
        duration = float(spec.get("leaseDurationSeconds") or c.lease_seconds)
        if holder and now - self._seen[1] < duration:
            self._renewed_at = None  # someone else holds it and renews it
            return
        self._write("PUT", f"{self.path}/{c.name}", self._body(lease, acquired=True), acquired=True)

    def _write(self, method: str, path: str, body: dict[str, Any], *, acquired: bool) -> None:
        from lightkube.core.exceptions import ApiError

        started = self.clock()
        try:
            self.api.request_json(method, path, body=body)
        except ApiError as exc:
            if getattr(exc.status, "code", None) == 409:  # another candidate wrote first: not ours
                self._renewed_at = None
                return
            raise
        if acquired:
            self.transitions += 1
        self._renewed_at = started  # the renewal counts from before the write, never later

    def _body(self, lease: dict[str, Any] | None, *, acquired: bool) -> dict[str, Any]:
        c, now = self.config, _micro_time(self.wall())
        spec = dict((lease or {}).get("spec") or {})
        spec.update(holderIdentity=c.identity, leaseDurationSeconds=int(max(1, c.lease_seconds)), renewTime=now)
        if acquired:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (lease is not None)
        metadata: dict[str, Any] = {"name": c.name, "namespace": c.namespace}
        if lease is not None:
            metadata["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata, "spec": spec}
