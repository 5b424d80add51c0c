"""The package's shape, read from its AST: layers that only import downward, no import circle, a small root.

``docs/architecture.md`` draws the same layers; a new sub-package must be placed in ``LAYERS`` (the first
test fails naming it), so the drawing and this list cannot drift apart silently.

Imports are read everywhere in a module: at module level, lazily inside functions, and under
``if TYPE_CHECKING:`` too (a type-only import still ties the two modules: a circle mypy has to untangle, a
layer that has to know the one above it). An import of a sibling module through its package
(``from topocast.app import metrics``) counts as an import of that module, not of the package.
Entry-point strings (``"topocast.aws.ssm_publish:SsmPublisher"``) count as imports: a registry that
reaches a layer above it by ``importlib`` is still an upward arrow: a registry lower down is filled from
above instead (``topocast.aws.root`` registers ``ssm`` with ``register_publisher``, as ``topocast.gcp.root``
does ``gcs``). ``publish`` sits above ``k8s``: the Kubernetes publisher drives the client, never the reverse.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "shared" / "topocast"

#: lowest first; a unit may import its own layer or any layer below, never one above
LAYERS: list[list[str]] = [
    ["errors", "registry"],  # exception types; the one lazy name -> factory registry
    ["safeio"],  # size caps, validation errors, safe YAML and file writes, the HTTP call policy, paging bounds
    ["model"],  # the graph, names, host lists, fabric inference, placement, change vocabulary
    ["renderers", "providers", "slurm"],  # scheduler formats, topology sources, Slurm's own tools
    ["config"],  # settings, read once from TOPOCAST_* (one section per concern)
    ["ports"],  # the values the ports speak (records, timer, debounce policy) and the ports themselves
    ["pipeline"],  # stored-object layout and the pure decisions over it: store, artifacts, guard, debounce
    ["app"],  # the use cases and the composition root's cloud-neutral half
    ["k8s"],  # the Kubernetes client, auth, objects, labels and node sources
    ["publish"],  # the publishers (the clouds' own are registered by their composition roots)
    ["aws", "gcp"],  # cloud adapters and composition roots
    ["agents"],  # pull agent and collectors (head node / collector host)
    ["cli"],  # the topocast command
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
#: modules the package root may hold (a handful: the rest lives in a folder that names its layer)
ROOT_MODULES = {"__init__", "errors", "registry", "config"}
#: module-level import circles that are known and must shrink, never grow (unit pairs)
KNOWN_UNIT_CYCLES: set[frozenset[str]] = set()
#: upward arrows that are known and must go (module, target)
KNOWN_UPWARD: set[tuple[str, str]] = set()

ENTRY_POINT = re.compile(r"^(topocast(?:\.[a-z_0-9]+)+):[A-Za-z_]\w*$")


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        out[".".join(rel.parts).removesuffix(".__init__")] = path
    return out


MODULES = modules()


def resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every topocast import the module names, type-only and entry-point strings included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            raise AssertionError(f"{path}:{node.lineno}: a relative import; write it absolute so this scan sees it")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            sub = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES]
            names = sub if len(sub) == len(node.names) else [node.module, *sub]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (m := ENTRY_POINT.match(node.value)):
            names = [m.group(1)]
        for name in names:
            if name.startswith("topocast.") and (target := resolve(name)):
                yield node.lineno if hasattr(node, "lineno") else 0, target


def unit(module: str) -> str:
    return module.split(".")[1] if "." in module else "topocast"


def module_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges[name] = {t for _, t in imports(path) if t != name and (name, t) not in KNOWN_UPWARD}
    return edges


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def test_every_unit_has_a_layer() -> None:
    units = {unit(m) for m in MODULES if m != "topocast"}
    assert units - RANK.keys() == set(), "place the new module or package in LAYERS (and docs/architecture.md)"
    assert RANK.keys() - units == set(), "LAYERS names a unit that no longer exists"


def test_the_package_root_holds_a_handful_of_modules() -> None:
    root = {p.stem for p in PACKAGE.glob("*.py")}
    assert root == ROOT_MODULES


@pytest.mark.parametrize("name", sorted(m for m in MODULES if m != "topocast"))
def test_no_import_runs_upward(name: str) -> None:
    mine = RANK[unit(name)]
    up = sorted(
        f"line {line}: {target} ({unit(target)} is above {unit(name)})"
        for line, target in imports(MODULES[name])
        if target != "topocast" and RANK[unit(target)] > mine and (name, target) not in KNOWN_UPWARD
    )
    assert up == [], f"{MODULES[name].relative_to(PACKAGE.parent)} imports upward: {'; '.join(up)}"


def test_no_module_import_circle() -> None:
    assert cycles(module_edges()) == []


def test_no_package_import_circle_beyond_the_known_ones() -> None:
    units: dict[str, set[str]] = {}
    for src, targets in module_edges().items():
        units.setdefault(unit(src), set()).update(unit(t) for t in targets if unit(t) != unit(src))
    found = {frozenset(c) for c in cycles(units)}
    assert found <= KNOWN_UNIT_CYCLES, f"new package circle(s): {[sorted(c) for c in found - KNOWN_UNIT_CYCLES]}"


def test_the_scan_sees_lazy_and_type_only_imports_and_entry_points(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from topocast.cli.commands import main\n"
        "def f():\n    from topocast.aws.root import AwsRuntime\n"
        "TABLE = {'ssm': 'topocast.aws.ssm_publish:SsmPublisher', 'doc': 'see topocast.gcp for more'}\n"
    )
    found = sorted(t for _, t in imports(src))
    assert found == ["topocast.aws.root", "topocast.aws.ssm_publish", "topocast.cli.commands"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    relative = tmp_path / "r.py"
    relative.write_text("from . import base\n")
    with pytest.raises(AssertionError, match="a relative import"):
        list(imports(relative))


def test_a_module_importing_its_own_package_counts_as_an_edge() -> None:
    """A package's ``__init__`` that names its modules (a registry) and a module that imports the package
    back is a circle too (the renderer registry and slinky were one)."""
    edges = module_edges()
    assert "topocast.renderers" not in edges["topocast.renderers.slinky"]
    assert "topocast.renderers.slinky" in edges["topocast.renderers"]


def test_the_architecture_drawing_shows_these_layers() -> None:
    """docs/architecture.md's layer drawing names the same units, layer by layer, as LAYERS."""
    doc = (PACKAGE.parent.parent / "docs" / "architecture.md").read_text()
    block = doc.split("<!-- layers: kept equal to LAYERS in tests/test_architecture.py -->\n```\n", 1)[1]
    drawn: dict[int, list[str]] = {}
    for line in block.split("```", 1)[0].splitlines():
        rank, units = int(line[:3]), line[3:32].split()
        drawn[rank] = units
    assert drawn == dict(enumerate(LAYERS))
