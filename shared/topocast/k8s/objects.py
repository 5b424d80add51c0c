"""Server-side apply of the scheduler objects (Kueue/KAI Topology, Volcano HyperNodes) and the Slinky ConfigMap.

For each object kind with an artifact:

1. *Discovery*: ``GET /apis/<group>/<version>`` in preference order until one lists
   the kind's plural (Kueue: v1beta2, v1beta1, v1alpha1). The Kueue object is sent
   with the version the cluster serves (the spec is the same in all three). A kind
   no version serves is a warning, never a failure: the rest still publishes.
2. *Read*: one GET per named object (Topology, ConfigMap) or one LIST of all
   HyperNodes (which also finds the ones to delete).
3. *Compare* the live object with the desired one, field by field over what
   topocast renders (``spec``, ``data``, its labels and annotations; other
   owners' fields, such as other keys of a Helm-managed ConfigMap, are not
   looked at). The ``topocast.dev/manifest-sha256`` annotation is *not trusted*:
   an object whose hash matches but whose content was edited by hand is
   *drift*; it is counted (``ObjectReport.drifted``, the ``Drift`` metric) and
   repaired like any other change.
4. *Apply* only objects that differ: server-side apply (field manager
   ``topocast``, ``force``, so hand edits lose their field ownership) carrying
   the read ``resourceVersion`` as a precondition. A 409 means someone wrote in
   between: re-read, and re-apply unless the fresh object already matches.
5. *Delete* managed HyperNodes that are no longer desired. No label selector is
   trusted for this (a server or proxy may ignore one): HyperNodes are listed
   unfiltered, and each candidate is checked on the listed object and again on
   a fresh GET right before the DELETE; only one carrying both the
   ``app.kubernetes.io/managed-by=topocast`` label and topocast's manifest
   annotation is deleted. Volcano's own discovered HyperNodes are never touched.

``dry_run`` ``client`` sends no write at all (the report lists what would be
written); ``server`` sends every write with ``dryRun=All`` so the API server
validates it without persisting anything.

A Topology whose levels would *grow* is applied after the node labels (Kueue
ignores nodes missing a level label), one whose levels shrink before them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

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
#: annotations that record *when* topocast wrote, not *what*: never compared
STAMP_ANNOTATIONS = frozenset({ANN_UPDATED, ANN_GENERATION})
DryRun = Literal["off", "client", "server"]


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


def differences(desired: Any, live: Any, path: str = "") -> list[str]:
    """Paths where ``live`` does not carry ``desired``: maps are compared over the desired keys only
    (fields other managers own are not topocast's business), lists and scalars exactly."""
    if isinstance(desired, Mapping):
        if not isinstance(live, Mapping):
            return [path or "."]
        out: list[str] = []
        for key, value in desired.items():
            out += differences(value, live.get(key), f"{path}.{key}")
        return out
    return [] if desired == live else [path or "."]


def desired_content(body: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a desired object a publish must find on the live one (identity and stamps left out)."""
    out = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    meta = body.get("metadata") or {}
    out["metadata"] = {
        "labels": dict(meta.get("labels") or {}),
        "annotations": {k: v for k, v in (meta.get("annotations") or {}).items() if k not in STAMP_ANNOTATIONS},
    }
    return out


def is_managed(obj: Mapping[str, Any] | None) -> bool:
    """True when the object itself says topocast made it (label *and* manifest annotation)."""
    meta = (obj or {}).get("metadata") or {}
    return (meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY and ANN_MANIFEST_SHA in (
        meta.get("annotations") or {}
    )


#: kube-apiserver's message for a path no resource type serves (a CRD that is not installed)
NO_SUCH_RESOURCE = "could not find the requested resource"


def _missing_type(exc: ApiError) -> bool:
    """404 for the resource type itself (CRD gone), not for one object. kube-apiserver names the object in
    ``details`` of an object's 404 and says "the server could not find the requested resource" for a
    type's; other servers (kmock) give neither, and their 404 after a successful discovery is the object's."""
    if exc.status.code != 404 or (exc.status.details and exc.status.details.name):
        return False
    return NO_SUCH_RESOURCE in (exc.status.message or "")


def collection_path(kind: ObjectKind, version: str, namespace: str | None) -> str:
    """``/apis/<group>/<version>[/namespaces/<ns>]/<plural>`` (``/api/v1/...`` for the core group)."""
    base = f"/apis/{kind.group}/{version}" if kind.group else f"/api/{version}"
    return f"{base}/namespaces/{namespace}/{kind.plural}" if namespace else f"{base}/{kind.plural}"


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
    def drift(self) -> list[str]:
        """Fields of the live object that differ from the desired one (empty when absent or equal)."""
        if self.live is None:
            return []
        return differences(desired_content(self.body), self.live)

    @property
    def changed(self) -> bool:
        return self.live is None or _sha_of(self.live) != self.sha or bool(self.drift)

    @property
    def drifted(self) -> bool:
        """Published in this very state before (hash matches) and edited since."""
        return self.live is not None and _sha_of(self.live) == self.sha and bool(self.drift)

    @property
    def before_labels(self) -> bool:
        """Shrinking (or unchanged-set) Topology levels go before the labels they stop using."""
        return self.kind.has_levels and self.live is not None and set(levels(self.body)) <= set(levels(self.live))


@dataclass
class ObjectReport:
    applied: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    #: objects whose live content had been edited away from what topocast last wrote (label -> fields)
    drifted: dict[str, list[str]] = field(default_factory=dict)
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
        dry_run: DryRun = "off",
    ) -> None:
        self.kc = kc
        self.dry_run = dry_run
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
                # One LIST of *all* objects of the kind: finds desired ones whatever labels someone left on
                # them, and the garbage candidates are judged by what each object says, not by a selector.
                items = [_as_dict(o) for o in self.kc.lk.list(resource_class(kind, version))]
                live_by_name = {o["metadata"]["name"]: o for o in items}
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
                gone = sorted(n for n, o in live_by_name.items() if n not in wanted and is_managed(o))
                self.garbage.extend((kind, version, n) for n in gone)
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
        """Apply one object if the live one differs; 409 → fresh read and retry."""
        res = resource_class(obj.kind, obj.version)
        for attempt in range(self.max_conflict_retries + 1):
            if not obj.changed:
                self.report.unchanged.append(obj.label)
                return
            if obj.drifted:
                self.report.drifted[obj.label] = obj.drift
            if self.dry_run == "client":
                self.report.applied.append(obj.label)
                return
            body = copy.deepcopy(obj.body)
            version = ((obj.live or {}).get("metadata") or {}).get("resourceVersion")
            if version:  # a precondition: a concurrent writer makes this a 409 (servers without versions: none)
                body["metadata"]["resourceVersion"] = version
            try:
                self.kc.lk.patch(
                    res,
                    obj.name,
                    body,
                    namespace=obj.namespace,
                    patch_type=PatchType.APPLY,
                    force=True,
                    dry_run=self.dry_run == "server",
                )
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
                elif exc.status.code == 404 and obj.live is None and not _missing_type(exc):
                    self._create(obj)
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

    def apply_all(self, objects: list[PendingObject], concurrency: int = 1) -> None:
        """:meth:`apply` each, ``concurrency`` at a time; the report lists stay sorted either way."""
        if concurrency <= 1 or len(objects) <= 1:
            for obj in objects:
                self.apply(obj)
        else:
            with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="topocast-apply") as pool:
                list(pool.map(self.apply, objects))
            self.report.applied.sort()
            self.report.unchanged.sort()

    def _create(self, obj: PendingObject) -> None:
        """POST the object: for a server that, unlike kube-apiserver, does not create on apply (kmock)."""
        params = {"fieldManager": self.kc.transport.settings.field_manager}
        if self.dry_run == "server":
            params["dryRun"] = "All"
        try:
            self.kc.request_json(
                "POST", collection_path(obj.kind, obj.version, obj.namespace), params=params, body=obj.body
            )
        except (ApiError, httpx2.HTTPError) as exc:
            self.report.errors.append(f"{obj.label}: the apply answered 404 and creating it failed: {_describe(exc)}")
            return
        self.report.applied.append(obj.label)

    def _reread(self, obj: PendingObject) -> dict[str, Any] | None:
        return self._get(obj.kind, obj.version, obj.name, obj.namespace)

    def _recreate(self, obj: PendingObject, exc: ApiError) -> None:
        """Kueue Topology levels are immutable: delete and create again (the ResourceFlavor keeps its name)."""
        if not self.recreate_immutable:
            self.report.errors.append(f"{obj.label}: {_describe(exc)} (set recreate_immutable to replace it)")
            return
        if obj.live is not None and not is_managed(obj.live):
            self.report.errors.append(
                f"{obj.label}: {_describe(exc)}; not deleting and recreating it: the object does not carry "
                f"{MANAGED_BY_LABEL}={MANAGED_BY} and {ANN_MANIFEST_SHA}, so topocast did not create it"
            )
            return
        if self.dry_run != "off":  # a dry-run delete leaves the object, so a dry-run create cannot follow
            self.report.warnings.append(f"{obj.label}: levels are immutable; a publish would delete and recreate it")
            self.report.applied.append(obj.label)
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
        """Delete managed HyperNodes no longer desired, each re-checked on a fresh GET first
        (404 = someone was faster: fine; not ours = left alone with a warning)."""
        for kind, version, name in self.garbage:
            label = f"{kind.api_version(version)} {kind.kind} {name}"
            res = resource_class(kind, version)
            try:
                live = self._get(kind, version, name, None)
                if live is None:
                    self.report.deleted.append(label)
                    continue
                if not is_managed(live):
                    self.report.warnings.append(
                        f"{label}: not deleted: the object does not carry {MANAGED_BY_LABEL}={MANAGED_BY} and "
                        f"{ANN_MANIFEST_SHA}, so topocast did not create it"
                    )
                    continue
                if self.dry_run != "client":
                    self.kc.lk.delete(res, name, dry_run=self.dry_run == "server")
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
