"""Fabric-health actions on Kubernetes: the ``topocast.io/fabric-degraded`` taint and a health label.

A node in the blast radius gets

* the taint ``topocast.io/fabric-degraded=<object>:NoSchedule`` (the value names the broken object, e.g.
  ``switch.leaf-1``): new pods that do not tolerate it are not scheduled there, running pods stay. It is
  also the input of Kueue's ``TASReplaceNodeOnNodeTaints``: a node with an untolerated ``NoSchedule`` or
  ``NoExecute`` taint counts as failed and Kueue moves the workload's pod set onto a replacement node in
  the same topology domain;
* the label ``topocast.io/fabric-health=<degraded|impaired>``, for selectors and dashboards.

Only topocast's own taint key and label are ever written or removed; every other taint and label of the
node is sent back as read. Each change is one merge patch carrying the ``resourceVersion`` read, so a
concurrent writer makes it fail with 409 Conflict instead of being overwritten (re-read and retried).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lightkube.core.exceptions import ApiError

from topocast.errors import TopocastError
from topocast.k8s.client import KubeClient
from topocast.model.health import NodeHealth
from topocast.model.health_plan import ApplyOutcome, HealthPlan, Holding
from topocast.model.hostlist import compact_str

__all__ = ["HEALTH_LABEL", "TAINT_KEY", "TaintedNode", "apply_plan", "holding", "read_nodes", "taint_value"]

TAINT_KEY = "topocast.io/fabric-degraded"
HEALTH_LABEL = "topocast.io/fabric-health"
EFFECT = "NoSchedule"
CONFLICT_RETRIES = 3
_NOT_LABEL_CHAR = re.compile(r"[^A-Za-z0-9._-]+")


def taint_value(health: NodeHealth) -> str:
    """The object to blame as a taint value (a label value: at most 63 of ``[A-Za-z0-9._-]``, alphanumeric
    at both ends): ``switch.leaf-1``, ``link.leaf-1.spine-1``, ``domain.nvl-a``."""
    ref = health.blame
    parts = [ref.kind, ref.id, *([ref.peer] if ref and ref.peer else [])] if ref else ["unknown"]
    text = _NOT_LABEL_CHAR.sub("_", ".".join(parts))[:63]
    return text.strip("._-") or "unknown"


@dataclass(frozen=True)
class TaintedNode:
    """What one node carries of interest: its taints and labels as read, and the version read."""

    name: str
    taints: tuple[dict[str, Any], ...]
    labels: Mapping[str, str]
    resource_version: str | None

    def our_taint(self) -> str | None:
        """The value of topocast's taint, or None when the node does not carry it."""
        for t in self.taints:
            if t.get("key") == TAINT_KEY:
                return str(t.get("value") or "")
        return None


def _node(obj: Mapping[str, Any]) -> TaintedNode:
    meta = obj.get("metadata") or {}
    return TaintedNode(
        name=meta["name"],
        taints=tuple((obj.get("spec") or {}).get("taints") or ()),
        labels=dict(meta.get("labels") or {}),
        resource_version=meta.get("resourceVersion"),
    )


def read_nodes(kc: KubeClient, page_size: int = 500) -> dict[str, TaintedNode]:
    """Every node's taints and labels (LIST, paged)."""
    params = {"limit": str(page_size)}
    out: dict[str, TaintedNode] = {}
    while True:
        page = kc.request_json("GET", "/api/v1/nodes", params=params)
        for obj in page.get("items") or []:
            node = _node(obj)
            out[node.name] = node
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return out
        params["continue"] = token


def holding(nodes: Mapping[str, TaintedNode], exclude: Iterable[str] = ()) -> Holding:
    """Nodes carrying topocast's taint (node -> its value); ``exclude``d nodes are never touched."""
    skip = set(exclude)
    ours = {n.name: v for n in nodes.values() if (v := n.our_taint()) is not None and n.name not in skip}
    return Holding(ours, frozenset(skip & nodes.keys()))


def _patch_body(node: TaintedNode, value: str | None, state: str | None) -> dict[str, Any]:
    """The merge patch that sets (``value``) or removes (None) topocast's taint and label on ``node``."""
    taints = [t for t in node.taints if t.get("key") != TAINT_KEY]
    if value is not None:
        taints.append({"key": TAINT_KEY, "value": value, "effect": EFFECT})
    # a merge patch replaces a list whole (RFC 7386): the node's other taints are sent back as read, and the
    # resourceVersion makes the server refuse it (409) if anyone changed the node since
    return {
        "metadata": {"resourceVersion": node.resource_version, "labels": {HEALTH_LABEL: state}},
        "spec": {"taints": taints or None},
    }


def _set(kc: KubeClient, node: TaintedNode, value: str | None, state: str | None) -> TaintedNode:
    path = f"/api/v1/nodes/{node.name}"
    for _ in range(CONFLICT_RETRIES):
        try:
            body = _patch_body(node, value, state)
            return _node(kc.request_json("PATCH", path, body=body, content_type="application/merge-patch+json"))
        except ApiError as exc:
            if exc.status.code != 409:
                raise
            node = _node(kc.request_json("GET", path))
    raise TopocastError(f"node {node.name} changed under every one of {CONFLICT_RETRIES} patches (409 Conflict)")


def apply_plan(kc: KubeClient, plan: HealthPlan, nodes: Mapping[str, TaintedNode]) -> ApplyOutcome:
    """Taint and label what ``plan`` marks, untaint and unlabel what it unmarks; per node, errors collected."""
    outcome = ApplyOutcome()
    failed: list[str] = []
    said: list[str] = []
    for name, value in plan.mark.items():
        try:
            after = _set(kc, nodes[name], value, plan.radius[name].state)
        except (ApiError, TopocastError) as exc:
            failed.append(name)
            said.append(_why(exc))
            continue
        (outcome.drained if after.our_taint() == value else failed).append(name)
    for name in plan.unmark:
        try:
            after = _set(kc, nodes[name], None, None)
        except (ApiError, TopocastError) as exc:
            failed.append(name)
            said.append(_why(exc))
            continue
        (outcome.resumed if after.our_taint() is None else failed).append(name)
    if failed:
        why = f" ({'; '.join(sorted(set(said)))})" if said else ""
        outcome.errors.append(f"{compact_str(failed)}: not tainted or untainted as asked{why}")
    outcome.drained.sort()
    outcome.resumed.sort()
    return outcome


def _why(exc: Exception) -> str:
    if isinstance(exc, ApiError):
        return f"{exc.status.code} {exc.status.reason}: {(exc.status.message or '')[:200]}"
    return str(exc)
