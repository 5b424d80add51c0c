"""Kubernetes node labels compared with NVIDIA Topograph's asserted label sets.

Three upstream expectations (see ``shared/conformance/topograph/INDEX.md``):
the tree test set with a switch ID over 63 characters (hashed to ``x`` +
FNV-64a), the multi-IB block test set (tiers + accelerator domains), and node
``1202`` of the ``medium`` model as labelled through the test, aws-sim and
gcp-sim providers in Topograph's KWOK CI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from topograph_fixtures import graph_from_test_provider, load_graph_json, sim_graph

from topocast.model.graph import TopologyGraph, graph_from_data
from topocast.renderers import render

LONG_S3 = "S3very-very-long-id-to-check-label-value-limits-of-63-characters"


def _expected(conformance_dir: Path, name: str) -> dict[str, Any]:
    data = json.loads((conformance_dir / "expected" / name).read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _labels(graph: TopologyGraph) -> dict[str, dict[str, str]]:
    return json.loads(render(graph, "k8s-labels").content)


def _long_name_variant(graph: TopologyGraph) -> TopologyGraph:
    """Topograph's ``GetTreeTestSet(true)``: switch S3 carries a 64-character ID."""
    data = graph.model_dump()
    for node in data["nodes"]:
        node["fabric"] = [LONG_S3 if sw == "S3" else sw for sw in node["fabric"]]
    return graph_from_data(data, "tree-testset long-name variant")


def test_tree_testset_long_switch_id_is_hashed(conformance_dir: Path) -> None:
    graph = _long_name_variant(load_graph_json(conformance_dir / "graphs" / "tree-testset.json"))
    assert _labels(graph) == _expected(conformance_dir, "tree-testset-longname__k8s-labels.json")


def test_multi_ib_testset_tiers_and_domains(conformance_dir: Path) -> None:
    graph = load_graph_json(conformance_dir / "graphs" / "multi-ib-testset.json")
    assert _labels(graph) == _expected(conformance_dir, "multi-ib-testset__k8s-labels.json")


@pytest.mark.parametrize(
    ("case", "provider"),
    [
        ("provider test (values.k8s-test.yaml)", "test"),
        ("provider aws-sim (values.k8s-aws-sim.yaml)", "aws"),
        ("provider gcp-sim (values.k8s-gcp-sim.yaml)", "gcp"),
    ],
)
def test_medium_model_node_1202(conformance_dir: Path, case: str, provider: str) -> None:
    model = conformance_dir / "models" / "medium.yaml"
    graph = graph_from_test_provider(model) if provider == "test" else sim_graph(model, None, provider)
    assert _labels(graph)["1202"] == _expected(conformance_dir, "medium__k8s__node-1202-labels.json")[case]
