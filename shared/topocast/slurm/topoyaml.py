"""Parse a Slurm >= 25.05 ``topology.yaml`` and check each topology's structure.

Each ``- topology:`` entry becomes a :class:`~topocast.slurm.topofile.TopologyFile`
(``tree`` or ``block``) so the same structural checks as for topology.conf run on
it (duplicate or unknown switches, cycles, a node in two leaves or blocks, bad
``block_sizes``, names over 64 characters); ``flat`` entries have nothing to check.
File-level rules: a list of mappings, ``topology`` first in each (topology.yaml(5)),
unique names, exactly one of ``tree`` / ``block`` / ``flat``, known keys only,
at most one ``cluster_default: true``. Keys and values must be printable ASCII
and the file may not use YAML anchors or aliases (we never write them, and an
alias bomb expands on load). Messages start with ``file:line:``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import yaml

from topocast.model.names import check_topology_name
from topocast.safeio.limits import MAX_JSON_DEPTH
from topocast.slurm.conffile import bad_characters, describe_char
from topocast.slurm.topofile import Block, Switch, TopologyFile, check_structure, read_hostlist
from topocast.slurm.topofile import block_sizes_problems as _sizes_problems

#: libyaml's loader when PyYAML was built with it (Debian's and the wheels' are), else the pure-Python one
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

__all__ = ["TopologyYaml", "YamlTopology", "looks_like_yaml", "parse_topology_yaml"]

_TOP_KEYS = {"topology", "cluster_default", "tree", "block", "flat"}
_KINDS = ("tree", "block", "flat")


@dataclass
class YamlTopology:
    name: str
    lineno: int
    default: bool
    kind: Literal["tree", "block", "flat"]
    #: the tree or block content (None for flat)
    file: TopologyFile | None = None


@dataclass
class TopologyYaml:
    source: str
    topologies: list[YamlTopology] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def get(self, name: str) -> YamlTopology | None:
        return next((t for t in self.topologies if t.name == name), None)

    def default(self) -> YamlTopology | None:
        return next((t for t in self.topologies if t.default), self.topologies[0] if self.topologies else None)

    def node_names(self) -> list[str]:
        return list(dict.fromkeys(n for t in self.topologies if t.file for n in t.file.node_names()))

    def summary(self) -> str:
        parts = [f"{t.name} ({t.kind}{', default' if t.default else ''})" for t in self.topologies]
        return f"topology.yaml: {len(self.topologies)} topologies: {', '.join(parts) or '-'}"


def looks_like_yaml(text: str, source: str = "") -> bool:
    """A topology.yaml by name, or by content (a topology.conf never starts with ``-``)."""
    if source.endswith((".yaml", ".yml")):
        return True
    for raw in text.split("\n"):
        line = raw.strip()
        if line and not line.startswith("#"):
            if line.startswith(("-", "---", "[", "{")):
                return True
            # "key: value" (a mapping where a list belongs) is still YAML; topology.conf has Key=Value
            colon, equals = line.find(":"), line.find("=")
            return colon > 0 and (equals < 0 or colon < equals)
    return False


class _Reader:
    def __init__(self, source: str, out: TopologyYaml) -> None:
        self.source = source
        self.out = out

    def err(self, node: yaml.Node | None, message: str) -> None:
        line = f":{node.start_mark.line + 1}" if node is not None else ""
        self.out.errors.append(f"{self.source}{line}: {message}")

    def scalar(self, node: yaml.Node, what: str) -> str | None:
        if not isinstance(node, yaml.ScalarNode):
            self.err(node, f"{what} must be a single value")
            return None
        bad = bad_characters(node.value)
        if bad:
            self.err(node, f"{what}: character {describe_char(bad[0][1])} (Slurm names and values are printable ASCII)")
            return None
        return str(node.value)

    def mapping(self, node: yaml.Node, what: str) -> list[tuple[str, yaml.Node, yaml.Node]] | None:
        if not isinstance(node, yaml.MappingNode):
            self.err(node, f"{what} must be a mapping")
            return None
        pairs = []
        seen: set[str] = set()
        for k, v in node.value:
            key = self.scalar(k, f"a key of {what}")
            if key is None:
                continue
            if key in seen:
                self.err(k, f"key {key!r} is given twice in {what}")
            seen.add(key)
            pairs.append((key, k, v))
        return pairs

    def sequence(self, node: yaml.Node, what: str) -> list[yaml.Node]:
        if isinstance(node, yaml.ScalarNode) and node.value in ("", "null", "~"):
            return []
        if not isinstance(node, yaml.SequenceNode):
            self.err(node, f"{what} must be a list")
            return []
        return list(node.value)

    def boolean(self, node: yaml.Node, what: str) -> bool:
        value = self.scalar(node, what)
        if value is None:
            return False
        if value.lower() not in ("true", "false"):
            self.err(node, f"{what} must be true or false, not {value!r}")
            return False
        return value.lower() == "true"

    def topology(self, node: yaml.Node) -> YamlTopology | None:
        pairs = self.mapping(node, "a topology entry")
        if not pairs:
            if pairs is not None:
                self.err(node, "empty topology entry")
            return None
        if pairs[0][0] != "topology":
            self.err(
                pairs[0][1], f"'topology' must be the first key of each entry (topology.yaml(5)), not {pairs[0][0]!r}"
            )
        values = {key: (k, v) for key, k, v in pairs}
        for key, k, _ in pairs:
            if key not in _TOP_KEYS:
                self.err(k, f"unknown key {key!r}; known: {', '.join(sorted(_TOP_KEYS))}")
        if "topology" not in values:
            return None
        name = self.scalar(values["topology"][1], "topology")
        if not name:
            self.err(values["topology"][1], "topology name is empty")
            return None
        where = f"{self.source}:{values['topology'][1].start_mark.line + 1}"
        problem = check_topology_name(name)
        if problem:
            self.out.errors.append(f"{where}: topology {name!r}: {problem}")
        kinds = [k for k in _KINDS if k in values]
        if len(kinds) != 1:
            self.err(
                node, f"topology {name!r} needs exactly one of tree, block, flat (has {', '.join(kinds) or 'none'})"
            )
            return None
        default = (
            self.boolean(values["cluster_default"][1], "cluster_default") if "cluster_default" in values else False
        )
        kind = kinds[0]
        body = values[kind][1]
        topo = YamlTopology(name, node.start_mark.line + 1, default, kind)  # type: ignore[arg-type]
        source = f"{self.source} (topology {name!r})"
        if kind == "flat":
            if not self.boolean(body, "flat"):
                self.err(body, f"topology {name!r}: flat must be true")
        elif kind == "tree":
            topo.file = self.tree(body, source, name)
        else:
            topo.file = self.block(body, source, name)
        return topo

    def _hostlist(self, topo: TopologyFile, node: yaml.Node, what: str) -> list[str]:

        value = self.scalar(node, what)
        if value is None:
            return []
        return read_hostlist(topo, f"{self.source}:{node.start_mark.line + 1}", what, value)

    def tree(self, body: yaml.Node, source: str, name: str) -> TopologyFile:
        topo = TopologyFile(source=source, kind="tree", dynamic=True)
        pairs = self.mapping(body, f"tree of topology {name!r}") or []
        switches = None
        for key, k, v in pairs:
            if key == "switches":
                switches = v
            else:
                self.err(k, f"unknown key {key!r} in tree of topology {name!r}; known: switches")
        for item in self.sequence(switches, "switches") if switches is not None else []:
            fields = self.mapping(item, "a switch") or []
            values = {key: v for key, _, v in fields}
            for key, k, _ in fields:
                if key not in ("switch", "children", "nodes"):
                    self.err(k, f"unknown key {key!r} in a switch; known: switch, children, nodes")
            line = item.start_mark.line + 1
            where = f"{self.source}:{line}"
            sw_name = self.scalar(values["switch"], "switch") if "switch" in values else None
            if not sw_name:
                self.err(item, f"a switch of topology {name!r} has no name")
                continue
            topo.check_record_name(where, "switch name", sw_name)
            if sw_name in topo.switches:
                first = topo.switches[sw_name].lineno
                topo.errors.append(f"{where}: switch {sw_name!r} is defined twice (first on line {first})")
                continue
            sw = Switch(sw_name, line)
            if "nodes" in values:
                sw.nodes = self._hostlist(topo, values["nodes"], "nodes")
            if "children" in values:
                sw.children = self._hostlist(topo, values["children"], "children")
            topo.switches[sw_name] = sw
        if not topo.switches:
            topo.kind = "empty"
        return topo

    def block(self, body: yaml.Node, source: str, name: str) -> TopologyFile:
        topo = TopologyFile(source=source, kind="block", dynamic=True)
        pairs = self.mapping(body, f"block of topology {name!r}") or []
        for key, k, v in pairs:
            if key == "block_sizes":
                sizes = []
                for item in self.sequence(v, "block_sizes"):
                    value = self.scalar(item, "a block size")
                    if value is None or not value.isdigit():
                        self.err(item, f"block_sizes entry {value!r} is not a positive integer")
                        continue
                    sizes.append(int(value))
                topo.block_sizes = sizes
                for problem in _sizes_problems(sizes):
                    self.err(v, f"topology {name!r}: block_sizes {problem}")
            elif key == "blocks":
                for item in self.sequence(v, "blocks"):
                    fields = self.mapping(item, "a block") or []
                    values = {key2: v2 for key2, _, v2 in fields}
                    for key2, k2, _ in fields:
                        if key2 not in ("block", "nodes"):
                            self.err(k2, f"unknown key {key2!r} in a block; known: block, nodes")
                    line = item.start_mark.line + 1
                    where = f"{self.source}:{line}"
                    b_name = self.scalar(values["block"], "block") if "block" in values else None
                    if not b_name:
                        self.err(item, f"a block of topology {name!r} has no name")
                        continue
                    topo.check_record_name(where, "block name", b_name)
                    if b_name in topo.blocks:
                        topo.errors.append(f"{where}: block {b_name!r} is defined twice")
                        continue
                    nodes = self._hostlist(topo, values["nodes"], "nodes") if "nodes" in values else []
                    topo.blocks[b_name] = Block(b_name, line, nodes)
            else:
                self.err(k, f"unknown key {key!r} in block of topology {name!r}; known: block_sizes, blocks")
        if not topo.blocks:
            topo.kind = "empty"
        return topo


def parse_topology_yaml(text: str, source: str = "topology.yaml") -> TopologyYaml:
    """Read a topology.yaml and check every topology in it (problems land in ``errors``)."""
    out = TopologyYaml(source)
    depth = 0
    try:
        # one streaming pass first: aliases and runaway nesting are refused before any node is built (the
        # pure-Python composer is quadratic in the nesting depth: 3,000 '[' took 2.5 s of CPU)
        for event in yaml.parse(text, Loader=_LOADER):
            line = event.start_mark.line + 1 if event.start_mark else 0
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                out.errors.append(f"{source}:{line}: YAML anchors and aliases are not allowed in a topology.yaml")
                return out
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_JSON_DEPTH:
                    out.errors.append(f"{source}:{line}: nested deeper than {MAX_JSON_DEPTH} levels")
                    return out
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        out.errors.append(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})")
        return out
    reader = _Reader(source, out)
    if root is not None and not isinstance(root, yaml.SequenceNode):
        out.errors.append(
            f"{source}:{root.start_mark.line + 1}: a topology.yaml is a list of '- topology:' entries, "
            f"not a {'mapping' if isinstance(root, yaml.MappingNode) else 'single value'}"
        )
        return out
    if root is None or not root.value:
        out.errors.append(
            f"{source}: expected a non-empty list of '- topology:' entries; slurmctld >= 25.11 is fatal "
            "when no switch or block is defined"
        )
        return out
    for node in root.value:
        topo = reader.topology(node)
        if topo is None:
            continue
        if out.get(topo.name) is not None:
            out.errors.append(f"{source}:{topo.lineno}: topology {topo.name!r} is defined twice")
            continue
        out.topologies.append(topo)
    defaults = [t.name for t in out.topologies if t.default]
    if len(defaults) > 1:
        out.warnings.append(
            f"{source}: {len(defaults)} topologies have cluster_default: true ({', '.join(defaults)}); "
            "Slurm uses the first"
        )
    for topo in out.topologies:
        if topo.file is None:
            continue
        if topo.file.kind == "empty":
            what = "switches" if topo.kind == "tree" else "blocks"
            out.errors.append(
                f"{source}:{topo.lineno}: topology {topo.name!r} defines no {what} "
                "(slurmctld >= 25.11: fatal, no switch or block defined)"
            )
            continue
        check_structure(topo.file)
        out.errors.extend(topo.file.errors)
        out.warnings.extend(topo.file.warnings)
    return out
