"""Prometheus text exposition (format 0.0.4) of the capacity figures, for node-exporter's textfile collector.

Format rules followed (https://prometheus.io/docs/instrumenting/exposition_formats/): one ``# HELP`` and one
``# TYPE`` line per metric family before its samples, all samples of a family together; metric and label
names match ``[a-zA-Z_][a-zA-Z0-9_]*``; label values are double-quoted with ``\\``, ``"`` and newline escaped
(``\\\\``, ``\\"``, ``\\n``); HELP text escapes ``\\`` and newline; the file ends with a newline.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from topocast.model.capacity import STATES, Capacity

__all__ = ["Family", "capacity_families", "exposition"]

Sample = tuple[Mapping[str, str], float]


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    samples: Sequence[Sample]
    type: str = "gauge"


def _label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def exposition(families: Iterable[Family]) -> str:
    lines: list[str] = []
    for fam in families:
        lines.append(f"# HELP {fam.name} {_help(fam.help)}")
        lines.append(f"# TYPE {fam.name} {fam.type}")
        for labels, value in fam.samples:
            body = ",".join(f'{k}="{_label_value(v)}"' for k, v in labels.items())
            lines.append(f"{fam.name}{{{body}}} {_number(value)}" if body else f"{fam.name} {_number(value)}")
    return "\n".join(lines) + "\n"


def capacity_families(cap: Capacity) -> list[Family]:
    """The capacity figures as metric families (docs/score.md says what each means)."""
    c = cap.cluster
    families = [
        Family(
            "topocast_nodes",
            "Nodes of the topology graph by scheduler state (free, allocated, drained, unknown = not reported).",
            [({"cluster": c, "state": s}, cap.totals[s]) for s in STATES],
        ),
        Family(
            "topocast_group_nodes",
            "Nodes per topology group (level nvlink-domain, leaf or block) by scheduler state.",
            [
                ({"cluster": c, "level": d.level, "group": d.name, "state": s}, d.counts[s])
                for d in cap.domains
                for s in STATES
            ],
        ),
        Family(
            "topocast_largest_free_nodes",
            "Most free nodes in one group of the level: the largest job that fits in one NVLink domain, leaf or block.",
            [({"cluster": c, "level": level}, n) for level, n in cap.largest_free.items()],
        ),
        Family(
            "topocast_tree_fragmentation_nodes",
            "Sum of the node counts of every switch with a node that is not free (0 = no switch is partly used).",
            [({"cluster": c}, cap.tree_fragmentation)],
        ),
        Family(
            "topocast_nodes_not_in_graph",
            "Nodes the scheduler reports that the topology graph does not hold.",
            [({"cluster": c}, len(cap.not_in_graph))],
        ),
    ]
    if cap.block_fragmentation is not None:
        families.insert(
            3,
            Family(
                "topocast_block_fragmentation_nodes",
                "Slurm topology/block fragmentation as backfill computes it (sum of unavailable base and "
                "aggregate block sizes in nodes, plus unavailable nodes in blocks).",
                [({"cluster": c}, cap.block_fragmentation)],
            ),
        )
    return families
