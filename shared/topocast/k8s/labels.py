"""Node labels: match cluster nodes to graph nodes, diff, and send only the patches needed.

The pure half (:func:`plan_labels`) takes the listed cluster nodes and the
``k8s-labels`` artifact objects and returns one :class:`NodePatch` per node whose
*owned* labels (or Slinky spec annotation) differ. Owned keys that are no longer
desired are removed with ``null`` in a strategic-merge patch, so a shrinking
hierarchy leaves no stale tiers; keys that ``owns_key`` does not claim are never
touched. The I/O half lists nodes once and sends the patches (a few in parallel,
all through the rate-limited transport).

Matching a cluster node to a graph node, in the configured order (default all three):

* ``provider-id``: the last path segment of ``spec.providerID`` (the EC2 instance
  ID of ``aws:///us-east-1a/i-0abc``, the instance name of
  ``gce://project/zone/name``) looked up among graph node IDs, then names;
* ``annotation``: the value of a node annotation (default ``topograph.run/instance``,
  Topograph's convention) looked up the same way;
* ``name``: the Kubernetes node name equals the graph node name.

An ``aws://`` provider ID is authoritative: a name or annotation match to a graph
node carrying a *different* instance ID is refused (a replaced instance reusing a
hostname must not inherit its predecessor's topology).

Drift: every label PATCH also sets ``topocast.dev/labels-sha256``, a short hash of
the owned labels (and Slinky annotation) it establishes. A node that needs a patch
although it still carries the hash of the desired state was edited by hand after
topocast labelled it: that is *drift* (counted, then repaired by the same single
PATCH). A node whose labels are right is never patched just to add the hash.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx2
from lightkube.core.exceptions import ApiError

from topocast.k8s.client import KubeClient, reason_for
from topocast.safeio.paging import PageGuard

MatchBy = Literal["provider-id", "annotation", "name"]
DEFAULT_MATCH: tuple[MatchBy, ...] = ("provider-id", "annotation", "name")
DEFAULT_INSTANCE_ANNOTATION = "topograph.run/instance"
LABELS_SHA_ANNOTATION = "topocast.dev/labels-sha256"


@dataclass(frozen=True)
class ClusterNode:
    """What the publisher needs to know about one Kubernetes Node."""

    name: str
    provider_id: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DesiredNode:
    """One ``k8s-labels`` object: the full owned label set of a graph node."""

    node: str
    id: str | None
    labels: Mapping[str, str]
    #: owned keys whose value is unknown right now: neither set nor removed
    keep: frozenset[str] = frozenset()
    annotations: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_object(cls, obj: Mapping[str, Any], annotations: Mapping[str, str] | None = None) -> DesiredNode:
        try:
            return cls(
                node=str(obj["node"]),
                id=obj.get("id"),
                labels=dict(obj["labels"]),
                keep=frozenset(obj.get("keep") or ()),
                annotations=dict(annotations or {}),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"k8s-labels object {obj!r} is malformed: {exc}") from None

    @property
    def sha(self) -> str:
        """Short hash of the state a PATCH establishes (owned labels set, keys kept, annotations)."""
        state = [sorted(self.labels.items()), sorted(self.keep), sorted(self.annotations.items())]
        return hashlib.sha256(json.dumps(state, separators=(",", ":")).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class NodePatch:
    """The minimal change for one cluster node."""

    node: str  # Kubernetes node name
    graph_node: str
    set_labels: Mapping[str, str]
    remove_labels: tuple[str, ...]
    set_annotations: Mapping[str, str] = field(default_factory=dict)
    #: the node still carried the hash of the desired state: someone edited it after topocast did
    drifted: bool = False

    def body(self) -> dict[str, Any]:
        """Strategic-merge patch body: values set, ``None`` (JSON null) deletes."""
        meta: dict[str, Any] = {}
        labels: dict[str, str | None] = dict(self.set_labels)
        labels.update(dict.fromkeys(self.remove_labels))
        if labels:
            meta["labels"] = labels
        if self.set_annotations:
            meta["annotations"] = dict(self.set_annotations)
        return {"metadata": meta}


@dataclass
class LabelPlan:
    patches: list[NodePatch] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)  # Kubernetes node names
    missing_in_cluster: list[str] = field(default_factory=list)  # graph node names
    missing_in_graph: list[str] = field(default_factory=list)  # Kubernetes node names
    matched_by: Counter[str] = field(default_factory=Counter)
    warnings: list[str] = field(default_factory=list)


def instance_from_provider_id(provider_id: str | None) -> str | None:
    """``aws:///us-east-1a/i-0abc`` -> ``i-0abc``; ``gce://p/z/name`` -> ``name``; no scheme -> as is."""
    if not provider_id:
        return None
    rest = provider_id.split("://", 1)[1] if "://" in provider_id else provider_id
    parts = [p for p in rest.split("/") if p]
    return parts[-1] if parts else None


def _lookup(
    key: str | None, by_id: Mapping[str, DesiredNode], by_name: Mapping[str, DesiredNode]
) -> DesiredNode | None:
    if not key:
        return None
    return by_id.get(key) or by_name.get(key)


def match_nodes(
    cluster: Iterable[ClusterNode],
    desired: Iterable[DesiredNode],
    match_by: Iterable[MatchBy] = DEFAULT_MATCH,
    annotation: str = DEFAULT_INSTANCE_ANNOTATION,
    plan: LabelPlan | None = None,
) -> tuple[list[tuple[ClusterNode, DesiredNode]], LabelPlan]:
    """Pair cluster nodes with graph nodes; unmatched ones land in the plan's missing lists."""
    plan = plan or LabelPlan()
    wanted = list(desired)
    by_id = {d.id: d for d in wanted if d.id}
    by_name = {d.node: d for d in wanted}
    order = tuple(match_by)
    claimed: dict[str, str] = {}  # graph node -> cluster node
    pairs: list[tuple[ClusterNode, DesiredNode]] = []
    for cn in sorted(cluster, key=lambda n: n.name):
        instance = instance_from_provider_id(cn.provider_id)
        found: DesiredNode | None = None
        how = ""
        for strategy in order:
            if strategy == "provider-id":
                found = _lookup(instance, by_id, by_name)
            elif strategy == "annotation":
                found = _lookup(cn.annotations.get(annotation), by_id, by_name)
            else:
                found = by_name.get(cn.name)
            if found is not None:
                how = strategy
                break
        if found is None:
            plan.missing_in_graph.append(cn.name)
            continue
        aws = (cn.provider_id or "").startswith("aws://")
        if how != "provider-id" and aws and found.id and instance and found.id != instance:
            plan.warnings.append(
                f"node {cn.name}: provider ID says instance {instance} but graph node {found.node} is instance "
                f"{found.id}; not labelled (replaced instance, stale graph?)"
            )
            plan.missing_in_graph.append(cn.name)
            continue
        if found.node in claimed:
            plan.warnings.append(
                f"nodes {claimed[found.node]} and {cn.name} both match graph node {found.node} (by {how}); "
                f"{cn.name} left alone"
            )
            plan.missing_in_graph.append(cn.name)
            continue
        claimed[found.node] = cn.name
        plan.matched_by[how] += 1
        pairs.append((cn, found))
    plan.missing_in_cluster.extend(sorted(d.node for d in wanted if d.node not in claimed))
    return pairs, plan


def diff_node(cn: ClusterNode, want: DesiredNode, owns_key: Callable[[str], bool]) -> NodePatch | None:
    """The patch that makes ``cn``'s owned labels equal ``want``, or None if they already do."""
    current = cn.labels
    to_set = {k: v for k, v in want.labels.items() if k not in want.keep and current.get(k) != v}
    to_remove = tuple(sorted(k for k in current if owns_key(k) and k not in want.labels and k not in want.keep))
    ann = {k: v for k, v in want.annotations.items() if cn.annotations.get(k) != v}
    if not (to_set or to_remove or ann):
        return None
    sha = want.sha
    drifted = cn.annotations.get(LABELS_SHA_ANNOTATION) == sha
    if not drifted:
        ann[LABELS_SHA_ANNOTATION] = sha
    return NodePatch(cn.name, want.node, to_set, to_remove, ann, drifted)


def plan_labels(
    cluster: Iterable[ClusterNode],
    desired: Iterable[DesiredNode],
    owns_key: Callable[[str], bool],
    match_by: Iterable[MatchBy] = DEFAULT_MATCH,
    annotation: str = DEFAULT_INSTANCE_ANNOTATION,
) -> LabelPlan:
    """Pure: everything the publisher will do to node labels, and what it will report."""
    pairs, plan = match_nodes(cluster, desired, match_by, annotation)
    for cn, want in pairs:
        patch = diff_node(cn, want, owns_key)
        if patch is None:
            plan.unchanged.append(cn.name)
        else:
            plan.patches.append(patch)
    return plan


# ----- I/O ------------------------------------------------------------------------------------------------


def list_cluster_nodes(
    kc: KubeClient,
    annotation_keys: Iterable[str] = (),
    selector: Mapping[str, str] | None = None,
    page_size: int | None = None,
) -> list[ClusterNode]:
    """One LIST of Nodes (paged only if ``page_size`` is set); keeps just the fields the diff needs."""
    keys = (*annotation_keys, LABELS_SHA_ANNOTATION)
    out = []
    params: dict[str, str] = {}
    if selector:
        params["labelSelector"] = ",".join(f"{k}={v}" for k, v in selector.items())
    if page_size:
        params["limit"] = str(page_size)
    # with a selector the API server may answer a page with fewer items than the limit, even none, and a
    # continue token (it filters after reading): then an empty page counts against the cap, it does not end
    guard = PageGuard("Kubernetes LIST /api/v1/nodes", page_size, empty_ends=not selector)
    while True:
        page = kc.request_json("GET", "/api/v1/nodes", params=params)
        items = page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        more = guard.more(((n.get("metadata") or {}).get("uid") or (n.get("metadata") or {}).get("name")
                           for n in items if isinstance(n, dict)), token)  # fmt: skip
        for node in items:
            meta = node.get("metadata") or {}
            ann = meta.get("annotations") or {}
            out.append(
                ClusterNode(
                    name=meta["name"],
                    provider_id=(node.get("spec") or {}).get("providerID"),
                    labels=dict(meta.get("labels") or {}),
                    annotations={k: ann[k] for k in keys if k in ann},
                )
            )
        if not more:
            return out
        params["continue"] = str(token)


#: 4xx answers that speak for the whole server (credentials, a timeout, load shedding), not for one node
OUTAGE_4XX = frozenset({401, 408, 429})
#: the longest server message kept per refused node (a Status message can carry a whole CEL expression)
MESSAGE_LIMIT = 300


def is_outage(code: int) -> bool:
    """True when an answer says the API server (or our access to it) is failing, so the next node's PATCH
    would fail the same way: 5xx, 401, 408, 429 (the transport already spent its retries on 5xx/429).
    Every other 4xx is the server's decision about *this* node (admission, validation, conflict)."""
    return code >= 500 or code in OUTAGE_4XX


@dataclass(frozen=True)
class NodeRefusal:
    """The API server's permanent answer to one node's PATCH: its Status ``code``, ``reason`` and ``message``."""

    code: int
    reason: str
    message: str

    @property
    def kind(self) -> str:
        """``403 Forbidden``: what refusals are grouped by in reports."""
        return f"{self.code} {self.reason}"


@dataclass
class PatchOutcome:
    patched: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # deleted between LIST and PATCH (404)
    #: refused by the server for that node (403, 422, 409 after resends, other 4xx); the others go on
    refused: dict[str, NodeRefusal] = field(default_factory=dict)
    #: outage answers (5xx, 401, 408, 429 after retries, connection errors): node -> what happened
    failed: dict[str, str] = field(default_factory=dict)
    not_attempted: list[str] = field(default_factory=list)  # skipped after the outage breaker tripped
    #: why the breaker tripped (None: every node was attempted)
    stopped: str | None = None


def rotated(patches: list[NodePatch], start: int) -> list[NodePatch]:
    """``patches`` in name order, starting at index ``start`` (mod their number) and wrapping around.

    A publish stopped by an outage is retried; nodes done by then drop out of the next plan, and a
    different start each attempt means a run of nodes that always fail with a server error (a broken
    webhook on one node pool answers 500 for its nodes only) cannot hold the head of every attempt."""
    ordered = sorted(patches, key=lambda p: p.node)
    if not ordered:
        return ordered
    k = start % len(ordered)
    return ordered[k:] + ordered[:k]


def send_patches(
    kc: KubeClient,
    patches: list[NodePatch],
    concurrency: int = 4,
    max_consecutive_failures: int = 5,
    dry_run: bool = False,
    max_conflict_retries: int = 3,
    progress: Callable[[int, int], None] | None = None,
) -> PatchOutcome:
    """Strategic-merge PATCH each node, in the order given.

    A node the server refuses (403, 422, ...; see :func:`is_outage`) is recorded with the server's
    Status and the others go on: one node pool's admission policy must not stop the cluster. A 409
    is resent up to ``max_conflict_retries`` times (the body holds absolute values and no
    resourceVersion, so resending is safe) before it counts as a refusal. Only outages stop the
    publish: after ``max_consecutive_failures`` of them in a row (a 401 at once: credentials are the
    same for every node) the rest are not attempted (a down API server should not take 10k x
    retries); a later publish resumes from the diff. ``dry_run`` sends them with ``dryRun=All``
    (validated and admitted by the server, not persisted), so refusals show up there too.
    ``progress(done, total)`` is called after each node (from the sending threads, one at a time)."""
    outcome = PatchOutcome()
    done = [0]
    lock = threading.Lock()
    streak = [0]
    stop = threading.Event()
    params = {"fieldManager": kc.transport.settings.field_manager, **({"dryRun": "All"} if dry_run else {})}

    def outage(node: str, what: str, unauthorized: bool = False) -> None:
        with lock:
            outcome.failed[node] = what
            streak[0] += 1
            if (unauthorized or streak[0] >= max_consecutive_failures) and not stop.is_set():
                outcome.stopped = (
                    f"{what} (credentials are the same for every node)"
                    if unauthorized
                    else f"{streak[0]} node PATCH outages in a row, the last {what}"
                )
                stop.set()

    def answered(names: list[str], node: str) -> None:
        with lock:
            names.append(node)
            streak[0] = 0  # the server is up and deciding: not an outage streak

    def one(patch: NodePatch) -> None:
        try:
            send(patch)
        finally:
            if progress is not None:
                with lock:
                    done[0] += 1
                    progress(done[0], len(patches))

    def send(patch: NodePatch) -> None:
        if stop.is_set():
            with lock:
                outcome.not_attempted.append(patch.node)
            return
        for resend in range(max_conflict_retries + 1):
            try:
                kc.request_json(
                    "PATCH",
                    f"/api/v1/nodes/{patch.node}",
                    params=params,
                    body=patch.body(),
                    content_type="application/strategic-merge-patch+json",
                )
            except ApiError as exc:
                code = int(exc.status.code or 0)
                reason = exc.status.reason or reason_for(code)
                message = (exc.status.message or "")[:MESSAGE_LIMIT]
                if code == 409 and resend < max_conflict_retries:
                    continue
                if code == 404:
                    answered(outcome.gone, patch.node)
                elif is_outage(code):
                    outage(patch.node, f"{code} {reason}: {message}", unauthorized=code == 401)
                else:
                    with lock:
                        outcome.refused[patch.node] = NodeRefusal(code, reason, message)
                        streak[0] = 0
                return
            except httpx2.HTTPError as exc:
                outage(patch.node, f"{type(exc).__name__}: {exc}")
                return
            answered(outcome.patched, patch.node)
            return

    if concurrency <= 1:
        for p in patches:
            one(p)
    else:
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="topocast-k8s") as pool:
            list(pool.map(one, patches))
    for names in (outcome.patched, outcome.gone, outcome.not_attempted):
        names.sort()
    outcome.refused = dict(sorted(outcome.refused.items()))
    outcome.failed = dict(sorted(outcome.failed.items()))
    return outcome
