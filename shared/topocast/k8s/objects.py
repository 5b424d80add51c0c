"""Server-side apply of the scheduler objects (Kueue/KAI Topology, Volcano HyperNodes) and the Slinky ConfigMap.

For each object kind with an artifact:

1. *Discovery*: ``GET /apis/<group>/<version>`` in preference order until one lists
   the kind's plural (Kueue: v1beta2, v1beta1, v1alpha1). The Kueue object is sent
   with the version the cluster serves (the spec is the same in all three). A kind
   no version serves is a warning, never a failure: the rest still publishes.
2. *Read*: one GET per named object (Topology, ConfigMap) or one LIST by
   ``app.kubernetes.io/managed-by=topocast`` (HyperNodes, which also finds the
   ones to delete).
3. *Apply* only objects whose ``topocast.dev/manifest-sha256`` annotation differs
   from the desired manifest's hash: server-side apply (field manager
   ``topocast``, ``force``) carrying the read ``resourceVersion`` as a
   precondition. A 409 means someone wrote in between: re-read, and re-apply
   unless the fresh object already matches.
4. *Delete* managed HyperNodes that are no longer desired (only those carrying the
   managed-by label; Volcano's own discovered HyperNodes are never touched).

A Topology whose levels would *grow* is applied after the node labels (Kueue
ignores nodes missing a level label), one whose levels shrink before them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType

from topocast.k8s.client import KubeClient

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "topocast"
ANN_MANIFEST_SHA = "topocast.dev/manifest-sha256"
ANN_GENERATION = "topocast.dev/generation"
ANN_UPDATED = "topocast.dev/last-updated"


@dataclass(frozen=True)
class ObjectKind:
    artifact: str  # the artifact format that carries these objects
    title: str
    group: str
    versions: tuple[str, ...]  # preference order
    kind: str
    plural: str
    namespaced: bool = False
    collect_garbage: bool = False
    has_levels: bool = False

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version


KINDS: dict[str, ObjectKind] = {
    k.artifact: k
    for k in (
        ObjectKind(
            "kueue",
            "Kueue Topology",
            "kueue.x-k8s.io",
            ("v1beta2", "v1beta1", "v1alpha1"),
            "Topology",
            "topologies",
            has_levels=True,
        ),
        ObjectKind("kai", "KAI Topology", "kai.scheduler", ("v1alpha1",), "Topology", "topologies", has_levels=True),
        ObjectKind(
            "volcano",
            "Volcano HyperNode",
            "topology.volcano.sh",
            ("v1alpha1",),
            "HyperNode",
            "hypernodes",
            collect_garbage=True,
        ),
        ObjectKind("slinky", "Slinky ConfigMap", "", ("v1",), "ConfigMap", "configmaps", namespaced=True),
    )
}


def manifest_sha(obj: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def levels(obj: Mapping[str, Any] | None) -> list[str]:
    spec = (obj or {}).get("spec") or {}
    return [lv.get("nodeLabel", "") for lv in spec.get("levels") or []]


def resource_class(kind: ObjectKind, version: str) -> Any:
    if kind.kind == "ConfigMap" and not kind.group:
        return ConfigMap
    make = create_namespaced_resource if kind.namespaced else create_global_resource
    return make(kind.group, version, kind.kind, kind.plural)


def _as_dict(obj: Any) -> dict[str, Any]:
    return obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)


def _sha_of(live: Mapping[str, Any] | None) -> str | None:
    if live is None:
        return None
    return ((live.get("metadata") or {}).get("annotations") or {}).get(ANN_MANIFEST_SHA)


def _missing_type(exc: ApiError) -> bool:
    """404 for the resource type itself (CRD gone), not for one object."""
    return exc.status.code == 404 and not (exc.status.details and exc.status.details.name)


@dataclass
class PendingObject:
    kind: ObjectKind
    version: str
    body: dict[str, Any]
    sha: str
    live: dict[str, Any] | None

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        return self.body["metadata"].get("namespace") if self.kind.namespaced else None

    @property
    def label(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind.api_version(self.version)} {self.kind.kind} {where}"

    @property
    def changed(self) -> bool:
        return _sha_of(self.live) != self.sha

    @property
    def before_labels(self) -> bool:
        """Shrinking (or unchanged-set) Topology levels go before the labels they stop using."""
        return self.kind.has_levels and self.live is not None and set(levels(self.body)) <= set(levels(self.live))


@dataclass
class ObjectReport:
    applied: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    api_versions: dict[str, str] = field(default_factory=dict)


class ObjectPublisher:
    """Discovery, read, apply and garbage collection for one publish (see module docstring)."""

    def __init__(
        self,
        kc: KubeClient,
        report: ObjectReport,
        discovery_cache: dict[str, str | None] | None = None,
        max_conflict_retries: int = 3,
        recreate_immutable: bool = True,
    ) -> None:
        self.kc = kc
        self.report = report
        self.discovery = discovery_cache if discovery_cache is not None else {}
        self.max_conflict_retries = max_conflict_retries
        self.recreate_immutable = recreate_immutable
        self.garbage: list[tuple[ObjectKind, str, str]] = []  # (kind, version, name)

    # ----- discovery and reads -------------------------------------------------------------------------
    def served_version(self, kind: ObjectKind) -> str | None:
        if not kind.group:
            return kind.versions[0]
        if kind.artifact not in self.discovery:
            found = None
            for version in kind.versions:
                resources = self.kc.get_json(f"/apis/{kind.group}/{version}")
                if resources and any(r.get("name") == kind.plural for r in resources.get("resources") or []):
                    found = version
                    break
            self.discovery[kind.artifact] = found
        return self.discovery[kind.artifact]

    def _get(self, kind: ObjectKind, version: str, name: str, namespace: str | None) -> dict[str, Any] | None:
        try:
            return _as_dict(self.kc.lk.get(resource_class(kind, version), name, namespace=namespace))
        except ApiError as exc:
            if exc.status.code == 404 and not _missing_type(exc):
                return None
            raise

    def prepare(self, kind: ObjectKind, manifests: list[dict[str, Any]], generation: str | None) -> list[PendingObject]:
        """Discover the served version and read the live objects; returns what may need applying."""
        try:
            version = self.served_version(kind)
        except (ApiError, httpx2.HTTPError) as exc:
            self.report.errors.append(f"{kind.title}: discovery of {kind.group} failed: {exc}")
            return []
        if version is None:
            tried = ", ".join(kind.api_version(v) for v in kind.versions)
            self.report.warnings.append(
                f"{kind.title}: the cluster serves no {kind.plural} resource ({tried}); "
                f"is the CRD installed? skipped {len(manifests)} object(s)"
            )
            return []
        self.report.api_versions[kind.artifact] = kind.api_version(version)
        rendered = {m.get("apiVersion") for m in manifests}
        if kind.group and rendered - {kind.api_version(version)}:
            self.report.warnings.append(
                f"{kind.title}: rendered as {', '.join(sorted(str(r) for r in rendered))}, applied as "
                f"{kind.api_version(version)} (the version this cluster serves)"
            )
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        pending = []
        try:
            live_by_name: dict[str, dict[str, Any]] | None = None
            if kind.collect_garbage:
                selector: dict[str, Any] = {MANAGED_BY_LABEL: MANAGED_BY}
                items = self.kc.lk.list(resource_class(kind, version), labels=selector)
                live_by_name = {_as_dict(o)["metadata"]["name"]: _as_dict(o) for o in items}
            for manifest in manifests:
                body = copy.deepcopy(manifest)
                body.pop("status", None)
                body["apiVersion"] = kind.api_version(version)
                meta = body.setdefault("metadata", {})
                sha = manifest_sha(body)
                annotations = meta.setdefault("annotations", {})
                annotations[ANN_MANIFEST_SHA] = sha
                annotations[ANN_UPDATED] = stamp
                if generation is not None:
                    annotations[ANN_GENERATION] = generation
                if live_by_name is not None:
                    live = live_by_name.get(meta["name"])
                else:
                    live = self._get(kind, version, meta["name"], meta.get("namespace") if kind.namespaced else None)
                pending.append(PendingObject(kind, version, body, sha, live))
            if live_by_name is not None:
                wanted = {p.name for p in pending}
                self.garbage.extend((kind, version, n) for n in sorted(set(live_by_name) - wanted))
        except ApiError as exc:
            if _missing_type(exc):
                self.report.warnings.append(
                    f"{kind.title}: {kind.api_version(version)} {kind.plural} went away "
                    f"during the publish (CRD removed?); skipped"
                )
            else:
                self.report.errors.append(f"{kind.title}: reading live objects failed: {_describe(exc)}")
            return []
        except httpx2.HTTPError as exc:
            self.report.errors.append(f"{kind.title}: reading live objects failed: {_describe(exc)}")
            return []
        return pending

    # ----- writes --------------------------------------------------------------------------------------
    def apply(self, obj: PendingObject) -> None:
        """Apply one object if its hash differs; 409 → fresh read and retry."""
        res = resource_class(obj.kind, obj.version)
        for attempt in range(self.max_conflict_retries + 1):
            if not obj.changed:
                self.report.unchanged.append(obj.label)
                return
            body = copy.deepcopy(obj.body)
            if obj.live is not None:
                body["metadata"]["resourceVersion"] = obj.live["metadata"]["resourceVersion"]
            try:
                self.kc.lk.patch(res, obj.name, body, namespace=obj.namespace, patch_type=PatchType.APPLY, force=True)
                self.report.applied.append(obj.label)
                return
            except ApiError as exc:
                if exc.status.code == 409:
                    if attempt < self.max_conflict_retries:
                        try:
                            obj.live = self._reread(obj)
                        except (ApiError, httpx2.HTTPError) as err:
                            self.report.errors.append(f"{obj.label}: fresh read after a conflict: {_describe(err)}")
                            return
                        continue
                    self.report.errors.append(
                        f"{obj.label}: still conflicting after {self.max_conflict_retries} fresh reads"
                    )
                elif exc.status.code == 422 and obj.kind.has_levels and "immutable" in (exc.status.message or ""):
                    self._recreate(obj, exc)
                elif _missing_type(exc):
                    self.report.warnings.append(
                        f"{obj.label}: the {obj.kind.plural} resource is not served (CRD removed?); skipped"
                    )
                else:
                    self.report.errors.append(f"{obj.label}: {_describe(exc)}")
                return
            except httpx2.HTTPError as exc:
                self.report.errors.append(f"{obj.label}: {_describe(exc)}")
                return

    def _reread(self, obj: PendingObject) -> dict[str, Any] | None:
        return self._get(obj.kind, obj.version, obj.name, obj.namespace)

    def _recreate(self, obj: PendingObject, exc: ApiError) -> None:
        """Kueue Topology levels are immutable: delete and create again (the ResourceFlavor keeps its name)."""
        if not self.recreate_immutable:
            self.report.errors.append(f"{obj.label}: {_describe(exc)} (set recreate_immutable to replace it)")
            return
        res = resource_class(obj.kind, obj.version)
        try:
            self.kc.lk.delete(res, obj.name)
            self.kc.lk.patch(res, obj.name, obj.body, patch_type=PatchType.APPLY, force=True)
        except (ApiError, httpx2.HTTPError) as err:
            self.report.errors.append(f"{obj.label}: recreating after '{exc.status.message}' failed: {_describe(err)}")
            return
        self.report.warnings.append(f"{obj.label}: levels are immutable; deleted and recreated the object")
        self.report.applied.append(obj.label)

    def collect_garbage(self) -> None:
        """Delete managed HyperNodes no longer desired (404 = someone was faster: fine)."""
        for kind, version, name in self.garbage:
            label = f"{kind.api_version(version)} {kind.kind} {name}"
            try:
                self.kc.lk.delete(resource_class(kind, version), name)
            except ApiError as exc:
                if exc.status.code != 404:
                    self.report.errors.append(f"deleting {label}: {_describe(exc)}")
                    continue
            except httpx2.HTTPError as exc:
                self.report.errors.append(f"deleting {label}: {_describe(exc)}")
                continue
            self.report.deleted.append(label)
        self.garbage.clear()


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApiError):
        return f"{exc.status.code} {exc.status.reason}: {exc.status.message}"
    return f"{type(exc).__name__}: {exc}"
