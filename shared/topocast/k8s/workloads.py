"""What Kubernetes says about a workload's nodes and every node's state, read from ``kubectl get ... -o json``.

* a workload: a pod list (``kubectl get pods -l job-name=x -o json``: each pod's ``spec.nodeName``, the
  earliest ``status.startTime``), or a Kueue ``Workload`` whose admission carries a Topology Aware
  Scheduling assignment (``status.admission.podSetAssignments[].topologyAssignment``, v1beta1: ``levels``
  and ``domains[].values``; the node is the last value when the last level is ``kubernetes.io/hostname``);
* node states: a node list (``kubectl get nodes -o json``): cordoned (``spec.unschedulable``) or not
  ``Ready`` is drained; with a pod list, a node running a pod that is not a DaemonSet's is allocated; the
  rest is free.

Pure parsers; errors name the source and the field, one line.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from topocast.errors import TopocastError
from topocast.model.capacity import NodeState
from topocast.model.placement_score import JobNodes
from topocast.safeio.validation import validate

__all__ = ["HOSTNAME_LEVEL", "node_states", "node_states_of", "parse_workload"]

HOSTNAME_LEVEL = "kubernetes.io/hostname"


class KubernetesInputError(TopocastError):
    """A kubectl JSON document is not the shape expected."""


class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class _Owner(_Loose):
    kind: str = ""


class _Meta(_Loose):
    name: str = ""
    owner_references: list[_Owner] = Field(default_factory=list, alias="ownerReferences")


class _PodSpec(_Loose):
    node_name: str | None = Field(None, alias="nodeName")


class _PodStatus(_Loose):
    phase: str = ""
    start_time: datetime | None = Field(None, alias="startTime")


class _Pod(_Loose):
    metadata: _Meta = Field(default_factory=_Meta)
    spec: _PodSpec = Field(default_factory=_PodSpec)
    status: _PodStatus = Field(default_factory=_PodStatus)


class _PodList(_Loose):
    items: list[_Pod]


class _Domain(_Loose):
    values: list[str]
    count: int = 1


class _TopologyAssignment(_Loose):
    levels: list[str]
    domains: list[_Domain]


class _PodSetAssignment(_Loose):
    name: str = ""
    topology_assignment: _TopologyAssignment | None = Field(None, alias="topologyAssignment")


class _Admission(_Loose):
    pod_set_assignments: list[_PodSetAssignment] = Field(default_factory=list, alias="podSetAssignments")


class _WorkloadStatus(_Loose):
    admission: _Admission | None = None


class _Workload(_Loose):
    metadata: _Meta = Field(default_factory=_Meta)
    status: _WorkloadStatus = Field(default_factory=_WorkloadStatus)


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise KubernetesInputError(f"{where}: not valid JSON ({exc})") from None


def _from_pods(data: Any, where: str) -> JobNodes:
    pods = validate(_PodList, data, where, KubernetesInputError).items
    placed = [p for p in pods if p.spec.node_name]
    if not placed:
        raise KubernetesInputError(f"{where}: none of its {len(pods)} pod(s) is bound to a node (spec.nodeName)")
    starts = [p.status.start_time for p in placed if p.status.start_time is not None]
    names = tuple(sorted({p.spec.node_name for p in placed if p.spec.node_name}))
    return JobNodes(placed[0].metadata.name, names, min(starts) if starts else None)


def _from_workload(data: Any, where: str) -> JobNodes:
    wl = validate(_Workload, data, where, KubernetesInputError)
    if wl.status.admission is None:
        raise KubernetesInputError(f"{where}: Workload {wl.metadata.name} is not admitted (no status.admission)")
    nodes: set[str] = set()
    for i, psa in enumerate(wl.status.admission.pod_set_assignments):
        ta = psa.topology_assignment
        field = f"status.admission.podSetAssignments[{i}].topologyAssignment"
        if ta is None:
            raise KubernetesInputError(f"{where}: {field} is missing (not a TAS workload); give its pods instead")
        if not ta.levels or ta.levels[-1] != HOSTNAME_LEVEL:
            raise KubernetesInputError(
                f"{where}: {field}.levels ends at {ta.levels[-1] if ta.levels else 'nothing'!r}, not "
                f"{HOSTNAME_LEVEL!r}: it does not name nodes; give the workload's pods instead"
            )
        for j, dom in enumerate(ta.domains):
            if len(dom.values) != len(ta.levels):
                raise KubernetesInputError(f"{where}: {field}.domains[{j}].values has {len(dom.values)} value(s) "
                                           f"for {len(ta.levels)} level(s)")  # fmt: skip
            nodes.add(dom.values[-1])
    if not nodes:
        raise KubernetesInputError(f"{where}: Workload {wl.metadata.name} names no nodes")
    return JobNodes(wl.metadata.name, tuple(sorted(nodes)), None)


def parse_workload(text: str, where: str) -> JobNodes:
    """A workload's nodes from a pod list (or one pod) or a Kueue Workload, as ``kubectl ... -o json`` prints."""
    data = _loads(text, where)
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "Workload":
        return _from_workload(data, where)
    if kind == "Pod":
        data = {"items": [data]}
    return _from_pods(data, where)


class _Condition(_Loose):
    type: str
    status: str


class _NodeSpec(_Loose):
    unschedulable: bool = False


class _NodeStatus(_Loose):
    conditions: list[_Condition] = Field(default_factory=list)


class _Node(_Loose):
    metadata: _Meta
    spec: _NodeSpec = Field(default_factory=_NodeSpec)
    status: _NodeStatus = Field(default_factory=_NodeStatus)


class _NodeList(_Loose):
    items: list[_Node]


def node_states(
    nodes_text: str, where: str, pods_text: str | None = None, pods_where: str = "pods"
) -> dict[str, NodeState]:
    """Each node's state from ``kubectl get nodes -o json`` (and, for allocated, ``kubectl get pods -A -o json``)."""
    pods = None if pods_text is None else _loads(pods_text, pods_where)
    return node_states_of(_loads(nodes_text, where), where, pods, pods_where)


def node_states_of(
    nodes_list: Any, where: str = "nodes", pods_list: Any = None, pods_where: str = "pods"
) -> dict[str, NodeState]:
    """:func:`node_states` of a NodeList (and PodList) already decoded, as the API answers them."""
    nodes = validate(_NodeList, nodes_list, where, KubernetesInputError).items
    busy: set[str] = set()
    if pods_list is not None:
        pods = validate(_PodList, pods_list, pods_where, KubernetesInputError).items
        busy = {
            p.spec.node_name
            for p in pods
            if p.spec.node_name
            and p.status.phase in ("Running", "Pending")
            and not any(o.kind == "DaemonSet" for o in p.metadata.owner_references)
        }
    out: dict[str, NodeState] = {}
    for node in nodes:
        ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)
        if node.spec.unschedulable or not ready:
            out[node.metadata.name] = "drained"
        else:
            out[node.metadata.name] = "allocated" if node.metadata.name in busy else "free"
    return out
