"""Byte-for-byte conformance of the Slurm renderers with NVIDIA Topograph's test expectations.

Every Topograph case that exercises topology.conf (tree, block), per-partition
topology.yaml or the Slinky per-node spec strings is rendered here from the
conformance data in place (see ``shared/conformance/topograph/INDEX.md``) and
compared with Topograph's expected output. One test per case; a case that
differs on purpose is listed in ``DIVERGENCES`` (and in docs/conformance.md) and
runs as a strict xfail. ``test_conformance_summary`` prints the tally.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import CONFORMANCE
from topograph_fixtures import (
    drop_fabric,
    graph_from_test_provider,
    load_domainmap,
    load_graph_json,
    options_from_params,
    sim_graph,
)

from topocast.model.graph import TopologyGraph
from topocast.model.hostlist import expand
from topocast.renderers import render
from topocast.renderers.slurm_specs import node_specs

#: case id -> why we deliberately produce something else (each also in docs/conformance.md)
DIVERGENCES: dict[str, str] = {}


@dataclass(frozen=True)
class Case:
    id: str
    expected: str  # file name under expected/
    produce: Callable[[Path], Any]  # conformance dir -> text (or a dict for node-spec files)
    key: str | None = None  # for node-spec files holding several sub-cases


def _text(graph: Callable[[Path], TopologyGraph], fmt: str, params: dict[str, Any], skeleton: bool = False):
    return lambda c: render(graph(c), fmt, options_from_params(params, skeleton)).content


def _specs(graph: Callable[[Path], TopologyGraph], content: str, params: dict[str, Any]):
    return lambda c: node_specs(graph(c), options_from_params(params), content)


def _gjson(name: str, **kw: Any) -> Callable[[Path], TopologyGraph]:
    return lambda c: load_graph_json(c / "graphs" / name, **kw)


def _sim(model: str, ids: list[str] | dict[str, str] | None, provider: str, trim: int = 0):
    def load(c: Path) -> TopologyGraph:
        inst = ids if isinstance(ids, dict) or ids is None else {i: f"node{i.removeprefix('n')}" for i in ids}
        return sim_graph(c / "models-inline" / model, inst, provider, trim)

    return load


def _model(name: str) -> Callable[[Path], TopologyGraph]:
    return lambda c: graph_from_test_provider(c / "models" / name)


def _n(*ranges: str) -> list[str]:
    return expand(list(ranges))


TREE: dict[str, Any] = {}
BLOCK = {"plugin": "topology/block"}
MIXED = {
    "topo1": {"plugin": "topology/tree", "nodes": ["Node[201,205]"]},
    "topo2": {"plugin": "topology/tree", "nodes": ["Node[104,105]", "Node[201,205-207]", "Node[401-403]"]},
    "topo3": {"plugin": "topology/block", "nodes": ["Node[104-105,107-108]"]},
    "topo4": {"plugin": "topology/block", "nodes": ["Node[301,302,303]"], "blockSizes": [2]},
    "topo5": {"plugin": "topology/flat", "clusterDefault": True},
}
EMPTY_PARTS = {
    "topo1": {"plugin": "topology/tree", "nodes": ["Node[201,205]"]},
    "topo2": {"plugin": "topology/tree", "nodes": ["NodeIsDown"]},
    "topo3": {"plugin": "topology/block", "nodes": ["Node[104-105,107-108]"]},
    "topo4": {"plugin": "topology/block", "nodes": ["NodeIsDown"], "blockSizes": [2]},
    "topo5": {"plugin": "topology/flat", "clusterDefault": True},
}
SPEC_PARTS = {**EMPTY_PARTS, "topo3": {"plugin": "topology/block", "nodes": ["Node[104-105,107-108,205]"]}}
YAML_BLOCK = {
    "topo1": {"plugin": "topology/block", "nodes": ["Node[104,105]"], "clusterDefault": True},
    "topo2": {"plugin": "topology/block", "nodes": ["Node[301,303]"]},
}
TREE_TOPOS = {
    "topo1": {"plugin": "topology/tree", "nodes": ["Node[201,205]"]},
    "topo2": {"plugin": "topology/tree", "nodes": ["Node[304,305]"], "clusterDefault": True},
}
DRA = {"blockSizes": [8, 16, 32], "blockName": {"nodeNameRegexp": "^srv([0-9]{2})", "format": "rack${1}"}}
AUTO_NAME = {"blockName": {"nodeNameRegexp": "^Node([0-9])[0-9]{2}$", "format": "domain${1}"}}
SIM_IDS = ["n11", "n12", "n21", "n22", "n31"]
NUM_IDS = {i: f"node{i}" for i in ("11", "12", "21", "22", "31")}


def _medium(kinds: dict[str, str], nodes: list[str]) -> dict[str, Any]:
    return {"topologies": {t: {"plugin": f"topology/{k}", "nodes": nodes} for t, k in kinds.items()}}


MEDIUM = {
    "topo0-tree": (
        _medium({"topo-0": "tree"}, ["1101", "1402"]),
        "tree (topo-0=topology/tree), slurm nodes [1101,1402]",
    ),
    "topo0-block": (
        _medium({"topo-0": "block"}, ["1101", "1301"]),
        "block (topo-0=topology/block), slurm nodes [1101,1301]",
    ),
    "topo0-tree_topo1-block": (
        _medium({"topo-0": "tree", "topo-1": "block"}, ["1101", "1302"]),
        "combined (topo-0=tree, topo-1=block), slurm nodes [1101,1302]",
    ),
}


def _cases() -> list[Case]:
    cases = [
        # --- models/ (verbatim Topograph test models)
        Case(
            "small-tree/test/tree",
            "small-tree__test__slurm-tree.conf",
            _text(_model("small-tree.yaml"), "slurm-tree", TREE),
        ),
        Case(
            "large/oci-sim/slinky-tree",
            "large__oci-sim__slinky-tree.conf",
            _text(lambda c: sim_graph(c / "models" / "large.yaml", None, "oci"), "slurm-tree", TREE),
        ),
        Case(
            "large/dra/slinky-block-blockname",
            "large__dra__slinky-block-8-16-32-blockname.conf",
            _text(lambda c: drop_fabric(graph_from_test_provider(c / "models" / "large.yaml")), "slurm-block", DRA),
        ),
        Case(
            "dual-xclr-irregular/block-9-144",
            "dual-xclr-irregular__graph__slurm-block-9-144.conf",
            _text(_model("dual-xclr-irregular.yaml"), "slurm-block", {**BLOCK, "blockSizes": [9, 144]}),
        ),
    ]
    for variant, (params, key) in MEDIUM.items():
        for mode in ("full", "skeleton"):
            cases.append(
                Case(
                    f"medium/slinky-dyn/{variant}/{mode}",
                    f"medium__slinky-dyn__{variant}__{mode}.yaml",
                    _text(_model("medium.yaml"), "slurm-yaml", params, skeleton=mode == "skeleton"),
                )
            )
        cases.append(
            Case(
                f"medium/slinky-dyn/{variant}/node-specs",
                "medium__slinky-dyn__node-specs.json",
                _specs(_model("medium.yaml"), "slurm-yaml", params),
                key,
            )
        )
    cases += [
        # --- models-inline/ (provider simulators)
        Case(
            "sim-cluster-az/aws-sim/tree",
            "sim-cluster-az__aws-sim__slurm-tree.conf",
            _text(_sim("sim-cluster-az.yaml", ["n11", "n12", "n13", "n21", "n22", "n23"], "aws"), "slurm-tree", TREE),
        ),
        Case(
            "sim-cluster-az/aws-sim/block",
            "sim-cluster-az__aws-sim__slurm-block.conf",
            _text(_sim("sim-cluster-az.yaml", ["n11", "n12", "n21", "n22", "n31", "n32"], "aws"), "slurm-block", BLOCK),
        ),
        Case(
            "sim-cluster-large-az/aws-sim/block",
            "sim-cluster-large-az__aws-sim__slurm-block.conf",
            _text(_sim("sim-cluster-large-az.yaml", _n("n[101-164]", "n[201-264]"), "aws"), "slurm-block", BLOCK),
        ),
        Case(
            "sim-cluster/oci-sim/tree",
            "sim-cluster__oci-sim__slurm-tree.conf",
            _text(_sim("sim-cluster.yaml", SIM_IDS, "oci"), "slurm-tree", TREE),
        ),
        Case(
            "sim-cluster/oci-sim/block",
            "sim-cluster__oci-sim__slurm-block.conf",
            _text(_sim("sim-cluster.yaml", SIM_IDS, "oci"), "slurm-block", BLOCK),
        ),
        Case(
            "sim-cluster/nscale-sim/tree-trimTiers1",
            "sim-cluster__nscale-sim__slurm-tree-trimTiers1.conf",
            _text(_sim("sim-cluster.yaml", SIM_IDS, "nscale", trim=1), "slurm-tree", TREE),
        ),
        Case(
            "sim-cluster/lambdai-sim/block",
            "sim-cluster__lambdai-sim__slurm-block.conf",
            _text(_sim("sim-cluster.yaml", SIM_IDS, "lambdai"), "slurm-block", BLOCK),
        ),
        Case(
            "sim-cluster-numeric/gcp-sim/tree",
            "sim-cluster-numeric__gcp-sim__slurm-tree.conf",
            _text(_sim("sim-cluster-numeric.yaml", NUM_IDS, "gcp"), "slurm-tree", TREE),
        ),
        Case(
            "sim-cluster-numeric/gcp-sim/block",
            "sim-cluster-numeric__gcp-sim__slurm-block.conf",
            _text(_sim("sim-cluster-numeric.yaml", NUM_IDS, "gcp"), "slurm-block", BLOCK),
        ),
        Case(
            "sim-cluster-numeric/nebius-sim/tree",
            "sim-cluster-numeric__nebius-sim__slurm-tree.conf",
            _text(_sim("sim-cluster-numeric.yaml", NUM_IDS, "nebius"), "slurm-tree", {"plugin": "topology/tree"}),
        ),
        Case(
            "sim-node-numeric/gcp-sim/tree",
            "sim-node-numeric__gcp-sim__slurm-tree.conf",
            _text(_sim("sim-node-numeric.yaml", {"11": "node11", "12": "nodeCPU"}, "gcp"), "slurm-tree", TREE),
        ),
        # --- graphs/ (transcribed translator test sets)
        Case(
            "tree-testset/tree", "tree-testset__slurm-tree.conf", _text(_gjson("tree-testset.json"), "slurm-tree", TREE)
        ),
        Case(
            "tree-testset/node-specs",
            "tree-testset__node-specs.json",
            _specs(_gjson("tree-testset.json"), "slurm-tree", TREE),
        ),
        Case(
            "tree-testset/yaml",
            "tree-testset__yaml-topo1-topo2.yaml",
            _text(_gjson("tree-testset.json"), "slurm-yaml", {"topologies": TREE_TOPOS}),
        ),
        Case(
            "tree-testset/yaml/skeleton",
            "tree-testset__yaml-topo1-topo2__skeleton.yaml",
            _text(_gjson("tree-testset.json"), "slurm-yaml", {"topologies": TREE_TOPOS}, skeleton=True),
        ),
        Case(
            "multi-ib/block-3",
            "multi-ib-testset__slurm-block-3.conf",
            _text(_gjson("multi-ib-testset.json"), "slurm-block", {**BLOCK, "blockSizes": [3]}),
        ),
        Case(
            "multi-ib/yaml-block",
            "multi-ib-testset__yaml-block.yaml",
            _text(_gjson("multi-ib-testset.json"), "slurm-yaml", {"topologies": YAML_BLOCK}),
        ),
        Case(
            "multi-ib/yaml-block/skeleton",
            "multi-ib-testset__yaml-block__skeleton.yaml",
            _text(_gjson("multi-ib-testset.json"), "slurm-yaml", {"topologies": YAML_BLOCK}, skeleton=True),
        ),
        Case(
            "multi-ib-no-tiers/yaml-block",
            "multi-ib-testset-no-tiers__yaml-block.yaml",
            _text(lambda c: drop_fabric(_gjson("multi-ib-testset.json")(c)), "slurm-yaml", {"topologies": YAML_BLOCK}),
        ),
        Case(
            "multi-ib/yaml-mixed",
            "multi-ib-testset__yaml-mixed.yaml",
            _text(_gjson("multi-ib-testset.json"), "slurm-yaml", {"topologies": MIXED}),
        ),
        Case(
            "multi-ib/yaml-empty-partitions",
            "multi-ib-testset__yaml-empty-partitions.yaml",
            _text(_gjson("multi-ib-testset.json"), "slurm-yaml", {"topologies": EMPTY_PARTS}),
        ),
        Case(
            "multi-ib/yaml-empty-partitions/skeleton",
            "multi-ib-testset__yaml-empty-partitions__skeleton.yaml",
            _text(_gjson("multi-ib-testset.json"), "slurm-yaml", {"topologies": EMPTY_PARTS}, skeleton=True),
        ),
        Case(
            "multi-ib/yaml-node-specs",
            "multi-ib-testset__yaml-node-specs.json",
            _specs(_gjson("multi-ib-testset.json"), "slurm-yaml", {"topologies": SPEC_PARTS}),
        ),
        Case(
            "ib-testset/block-3",
            "ib-testset__slurm-block-3.conf",
            _text(_gjson("ib-testset.json"), "slurm-block", {**BLOCK, "blockSizes": [3]}),
        ),
        Case(
            "ib-testset/block-2-4-8",
            "ib-testset__slurm-block-2-4-8.conf",
            _text(_gjson("ib-testset.json"), "slurm-block", {**BLOCK, "blockSizes": [2, 4, 8]}),
        ),
        Case(
            "ib-testset/block-2-4-8/skeleton",
            "ib-testset__slurm-block-2-4-8__skeleton.conf",
            _text(_gjson("ib-testset.json"), "slurm-block", {**BLOCK, "blockSizes": [2, 4, 8]}, skeleton=True),
        ),
        Case(
            "ib-testset-without-B2/block-4-8-16",
            "ib-testset-without-B2__slurm-block-4-8-16.conf",
            _text(_gjson("ib-testset.json", drop=("B2",)), "slurm-block", {**BLOCK, "blockSizes": [4, 8, 16]}),
        ),
        Case(
            "ib-testset/yaml-partition-specs",
            "ib-testset__yaml-partition-specs.json",
            _specs(
                _gjson("ib-testset.json"),
                "slurm-yaml",
                {
                    "topologies": {
                        "topo1": {
                            "plugin": "topology/block",
                            "blockSizes": [2, 4, 8],
                            "nodes": ["Node[104-105]", "Node[201-202,205]", "Node[304]", "Node[401-403]"],
                        }
                    }
                },
            ),
        ),
        Case(
            "block-testset/block-3",
            "block-testset__slurm-block-3.conf",
            _text(_gjson("block-testset.json"), "slurm-block", {**BLOCK, "blockSizes": [3]}),
        ),
        Case(
            "block-testset/auto-blockname",
            "block-testset__slurm-block-auto-blockname.conf",
            _text(_gjson("block-testset.json"), "slurm-block", {**BLOCK, **AUTO_NAME}),
        ),
        Case(
            "block-testset/node-specs",
            "block-testset__node-specs.json",
            _specs(_gjson("block-testset.json"), "slurm-block", BLOCK),
            "plain",
        ),
        Case(
            "block-testset/node-specs/blockname",
            "block-testset__node-specs.json",
            _specs(_gjson("block-testset.json"), "slurm-block", {**BLOCK, **AUTO_NAME}),
            "with blockName {nodeNameRegexp: '^Node([0-9])[0-9]{2}$', format: 'domain${1}'}",
        ),
        Case(
            "diffnum-testset/block-auto",
            "diffnum-testset__slurm-block-auto.conf",
            _text(_gjson("diffnum-testset.json"), "slurm-block", BLOCK),
        ),
        Case(
            "dfs-testset/block-1",
            "dfs-testset__slurm-block-1.conf",
            _text(_gjson("dfs-testset.json"), "slurm-block", {**BLOCK, "blockSizes": [1]}),
        ),
        Case(
            "asymmetric-spine/block-4-16-32",
            "asymmetric-spine-testset__slurm-block-4-16-32.conf",
            _text(_gjson("asymmetric-spine-testset.json"), "slurm-block", {**BLOCK, "blockSizes": [4, 16, 32]}),
        ),
        Case(
            "shortname-testset/tree",
            "shortname-testset__slurm-tree.conf",
            _text(_gjson("shortname-testset.json"), "slurm-tree", TREE),
        ),
    ]
    # --- domainmaps/ (block complementing); the list of files is read from disk
    if (CONFORMANCE / "domainmaps").is_dir():
        for path in sorted((CONFORMANCE / "domainmaps").glob("*.json")):
            stem = path.stem

            def dm(c: Path, stem: str = stem) -> tuple[TopologyGraph, dict[str, Any]]:
                return load_domainmap(c / "domainmaps" / f"{stem}.json")

            if stem == "a123":
                for cfg, suffix in (("config_2_4", "2-4"), ("config_2", "2")):
                    cases.append(
                        Case(
                            f"domainmap/a123/yaml-block-{suffix}",
                            f"domainmap-a123__yaml-block-{suffix}.yaml",
                            lambda c, cfg=cfg, dm=dm: (
                                render(dm(c)[0], "slurm-yaml", options_from_params(dm(c)[1][cfg])).content
                            ),
                        )
                    )
            else:
                cases.append(
                    Case(
                        f"domainmap/{stem}",
                        f"domainmap-{stem}__slurm-block.conf",
                        lambda c, dm=dm: (
                            render(dm(c)[0], "slurm-block", options_from_params(dm(c)[1]["config"])).content
                        ),
                    )
                )
    return cases


CASES = _cases()


def _expected(conformance: Path, case: Case) -> Any:
    path = conformance / "expected" / case.expected
    if not path.name.endswith(".json"):
        return path.read_text()
    data = json.loads(path.read_text())
    if case.key is not None:
        data = data[case.key]
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _matches(conformance: Path, case: Case) -> tuple[bool, Any, Any]:
    want = _expected(conformance, case)
    got = case.produce(conformance)
    if isinstance(want, dict):  # node-spec files: nodes the graph lacks must get ""
        got = {node: got.get(node, "") for node in want}
    return got == want, got, want


def _param(case: Case) -> Any:
    marks = [pytest.mark.xfail(reason=DIVERGENCES[case.id], strict=True)] if case.id in DIVERGENCES else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_conformance(conformance_dir: Path, case: Case) -> None:
    ok, got, want = _matches(conformance_dir, case)
    if not ok and isinstance(want, str):
        assert got == want, f"{case.expected} differs"
    assert got == want


def test_every_expected_slurm_file_is_covered(conformance_dir: Path) -> None:
    """Adding a Slurm-relevant expected file upstream must add a case here."""
    out_of_scope = ("ibnetdiscover-", "netq-", "cluset-", "__k8s-labels", "__k8s__")
    covered = {c.expected for c in CASES}
    missing = [
        p.name
        for p in sorted((conformance_dir / "expected").iterdir())
        if p.name not in covered and not any(s in p.name for s in out_of_scope)
    ]
    assert not missing, f"expected files with no conformance case: {missing}"


def test_conformance_summary(conformance_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    matched = [c.id for c in CASES if _matches(conformance_dir, c)[0]]
    diverged = [c.id for c in CASES if c.id not in matched]
    with capsys.disabled():
        print(
            f"\nTopograph Slurm conformance: {len(matched)}/{len(CASES)} cases byte-identical, "
            f"{len(diverged)} documented divergence(s){': ' + ', '.join(diverged) if diverged else ''}"
        )
    assert set(diverged) == set(DIVERGENCES), "a divergence is neither fixed nor documented in DIVERGENCES"
