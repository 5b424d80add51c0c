"""Fabric-health drains through slurmrestd: the :class:`~topocast.slurm.drain.NodeControl` of a controller
reached by its REST API (a head node without ``scontrol``, or one reached only over the network).

* read: ``GET /slurm/vX/nodes/`` (each node's ``name``, ``state`` flags and ``reason``);
* drain: one bulk ``POST /slurm/vX/nodes/`` per reason, ``{"name": [...], "state": ["DRAIN"], "reason": ...}``;
* resume: ``{"name": [...], "state": ["RESUME"]}``.

The token is the pull agent's (``--token-from``); the client is :class:`topocast.slurm.rest.SlurmRest`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from topocast.model.hostlist import compact_str
from topocast.slurm.drain import SlurmNode
from topocast.slurm.rest import SlurmRest, SlurmRestError

__all__ = ["RestControl", "nodes_of"]


def nodes_of(answer: dict[str, Any]) -> dict[str, SlurmNode]:
    """``GET nodes/``'s ``nodes`` as :class:`SlurmNode` by name."""
    out: dict[str, SlurmNode] = {}
    for node in answer.get("nodes") or []:
        if isinstance(node, dict) and isinstance(node.get("name"), str):
            state = node.get("state") or []
            flags = tuple(str(f) for f in state) if isinstance(state, list) else (str(state),)
            out[node["name"]] = SlurmNode(node["name"], flags, str(node.get("reason") or "") or None)
    return out


@dataclass(frozen=True)
class RestControl:
    rest: SlurmRest

    def read(self) -> dict[str, SlurmNode]:
        return nodes_of(self.rest.call("GET", f"/slurm/{self.rest.version}/nodes/", what="GET nodes"))

    def drain(self, names: list[str], reason: str) -> list[str]:
        return self._post({"name": names, "state": ["DRAIN"], "reason": reason}, f"drain {compact_str(names)}")

    def resume(self, names: list[str]) -> list[str]:
        return self._post({"name": names, "state": ["RESUME"]}, f"resume {compact_str(names)}")

    def _post(self, body: dict[str, Any], what: str) -> list[str]:
        try:
            answer = self.rest.call("POST", f"/slurm/{self.rest.version}/nodes/", body, what=f"POST nodes ({what})")
        except SlurmRestError as exc:
            return [str(exc)]
        warnings = [w.get("description") for w in answer.get("warnings") or [] if isinstance(w, dict)]
        return [f"POST nodes ({what}): warning {w}" for w in warnings if w]
