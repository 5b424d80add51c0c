"""Topograph simulation models load into the graph, with Topograph's validation rules."""

from __future__ import annotations

import pytest
import yaml

from topocast.errors import InvalidGraphError
from topocast.providers.model import load_model, model_to_graph


def model(text: str):
    return model_to_graph(yaml.safe_load(text), "m.yaml", "c1")


def test_small_tree_model(conformance_dir) -> None:
    g = load_model(conformance_dir / "models" / "small-tree.yaml")
    by = {n.name: n for n in g.nodes}
    assert sorted(by) == ["I21", "I22", "I25", "I34", "I35", "I36"]
    assert by["I21"].fabric == ["S2", "S1"]
    assert by["I36"].accelerator == "nvl3"


def test_every_bundled_topograph_model_loads(conformance_dir) -> None:
    sizes = {p.stem: len(load_model(p).nodes) for p in sorted((conformance_dir / "models").glob("*.yaml"))}
    # node counts as documented in the reference (medium: 4 leaves x 2, large: 12 leaves x 8, nvl72: 72)
    assert sizes["medium"] == 8
    assert sizes["large"] == 96
    assert sizes["nvl72"] == 72


def test_labels_inherit_down_the_path_and_zone_is_set() -> None:
    g = model(
        """
switches:
  core: {labels: {topology.kubernetes.io/region: r1}, switches: [spine]}
  spine: {labels: {topology.kubernetes.io/zone: z1}, switches: [tor]}
blocks:
- {switch: tor, nodes: ["n[1-2]"], annotations: {accelerator.topology.test/domain: d1,
   accelerator.topology.test/sub-domain: d1.rack1}}
"""
    )
    n1 = g.nodes[0]
    assert n1.fabric == ["tor", "spine", "core"]
    assert n1.zone == "z1"
    assert n1.labels["topology.kubernetes.io/region"] == "r1"
    assert (n1.accelerator, n1.subdomain) == ("d1", "d1.rack1")


def test_requested_instances_select_rename_and_report_missing() -> None:
    g = model_to_graph(
        yaml.safe_load("switches: {s: {switches: [t]}}\nblocks: [{switch: t, nodes: [n11, n12]}]"),
        "m",
        "c",
        instances={"n11": "node11", "n99": "node99"},
    )
    assert {n.name: n.fabric for n in g.nodes} == {"node11": ["t", "s"], "node99": []}
    assert g.nodes_without_topology() == ["node99"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("switches: {a: {switches: [c]}, b: {switches: [c]}}\nblocks: []", "two parents"),
        ("switches: {a: {switches: [b]}, b: {switches: [a]}}\nblocks: []", "cycle"),
        ("switches: {a: {}}\nblocks: [{switch: zz, nodes: [n1]}]", "unknown switch 'zz'"),
        ("switches: {a: {name: b}}\nblocks: []", "mismatching name"),
        ("switches: {a: {}}\nblocks: [{switch: a, nodes: []}]", "no nodes"),
        ("switches: {a: {}}\nblocks: [{switch: a, nodes: [n1]}, {switch: a, nodes: [n1]}]", "two blocks"),
        ("switchez: {}", "unknown top-level"),
    ],
)
def test_invalid_models_are_rejected(text: str, message: str) -> None:
    with pytest.raises(InvalidGraphError, match=message):
        model(text)


def test_unreadable_or_bad_yaml(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("switches: [unclosed")
    with pytest.raises(InvalidGraphError, match="not valid YAML"):
        load_model(bad)
