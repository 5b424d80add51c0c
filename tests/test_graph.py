"""The graph model: what it accepts, what it rejects and how it says so."""

from __future__ import annotations

import json

import pytest

from topocast.errors import InvalidGraphError, UnsafeNameError
from topocast.fabric import NO_TOPOLOGY, build_domains, build_tree
from topocast.graph import dump_graph, graph_from_json, json_schema, load_graph

ISSUE_EXAMPLE = {
    "schema_version": 1,
    "cluster": "c1",
    "provider": "aws",
    "nodes": [
        {
            "name": "gpu-001",
            "id": "i-0abc",
            "fabric": ["leaf-7", "spine-2", "core-1"],
            "accelerator": "cb-123",
            "subdomain": None,
            "zone": "us-east-1a",
            "instance_type": "p5.48xlarge",
        }
    ],
}


def graph_json(nodes: list[dict], **top: object) -> str:
    return json.dumps({"schema_version": 1, "cluster": "c1", "provider": "test", "nodes": nodes, **top})


def test_accepts_the_documented_example_and_round_trips() -> None:
    g = graph_from_json(json.dumps(ISSUE_EXAMPLE))
    node = g.nodes[0]
    assert node.fabric == ["leaf-7", "spine-2", "core-1"]
    assert node.accelerator == "cb-123"
    again = graph_from_json(dump_graph(g))
    assert again == g
    assert again.content_hash() == g.content_hash()


def test_content_hash_ignores_node_order_but_not_content() -> None:
    a = graph_from_json(graph_json([{"name": "a", "fabric": ["l1"]}, {"name": "b", "fabric": ["l1"]}]))
    b = graph_from_json(graph_json([{"name": "b", "fabric": ["l1"]}, {"name": "a", "fabric": ["l1"]}]))
    c = graph_from_json(graph_json([{"name": "b", "fabric": ["l2"]}, {"name": "a", "fabric": ["l1"]}]))
    assert a.content_hash() == b.content_hash()
    assert a.content_hash() != c.content_hash()


def test_nodes_without_fabric_are_kept_and_reported() -> None:
    g = graph_from_json(graph_json([{"name": "a", "fabric": ["l1", "s1"]}, {"name": "cpu-1"}]))
    assert [n.name for n in g.nodes] == ["a", "cpu-1"]
    assert g.nodes_without_topology() == ["cpu-1"]
    tree = build_tree(g)
    assert tree.child_nodes[NO_TOPOLOGY] == ["cpu-1"]
    assert NO_TOPOLOGY in tree.roots


@pytest.mark.parametrize(
    ("bad_name", "what"),
    [
        ("gpu 1", "whitespace"),
        ("gpu-1\nSwitchName=evil", "a newline"),
        ("gpu=1", "'='"),
        ("gpu#1", "'#'"),
        ("gpu[1]", "'['"),
        ("gpu,1", "','"),
        ("gpu\x01", "control character"),
        ("", "empty"),
    ],
)
def test_unsafe_node_names_are_rejected_naming_the_node(bad_name: str, what: str) -> None:
    with pytest.raises(UnsafeNameError) as exc:
        graph_from_json(graph_json([{"name": bad_name, "fabric": ["l1"]}]), "cluster.json")
    assert what in str(exc.value)
    assert "cluster.json" in str(exc.value)


def test_unsafe_switch_name_error_names_the_node() -> None:
    with pytest.raises(UnsafeNameError, match="node 'gpu-7'"):
        graph_from_json(graph_json([{"name": "gpu-7", "fabric": ["leaf 1"]}]))


def test_switch_names_longer_than_slurm_allows_are_rejected() -> None:
    with pytest.raises(UnsafeNameError, match="limit 64"):
        graph_from_json(graph_json([{"name": "gpu-7", "fabric": ["s" * 65]}]))


def test_paths_that_do_not_form_a_tree_are_rejected() -> None:
    text = graph_json([{"name": "a", "fabric": ["l1", "s1"]}, {"name": "b", "fabric": ["l1", "s2"]}])
    with pytest.raises(InvalidGraphError, match="switch 'l1' has parent 's1' for node 'a' but 's2'"):
        graph_from_json(text)


def test_duplicate_nodes_and_ids_are_rejected() -> None:
    with pytest.raises(InvalidGraphError, match="appears twice"):
        graph_from_json(graph_json([{"name": "a"}, {"name": "a"}]))
    with pytest.raises(InvalidGraphError, match="instance id 'i-1' is used by nodes 'a' and 'b'"):
        graph_from_json(graph_json([{"name": "a", "id": "i-1"}, {"name": "b", "id": "i-1"}]))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "expected a JSON object"),
        ('{"schema_version": 2, "cluster": "c", "provider": "x", "nodes": []}', "schema_version 2"),
        ('{"cluster": "c", "provider": "x", "nodes": [{"fabric": []}]}', "nodes.0.name"),
        ('{"cluster": "c", "provider": "x", "nodes": [{"name": "a", "fabric": "l1"}]}', "nodes.0.fabric"),
        ('{"cluster": "c", "provider": "x", "nodes": [], "extra": 1}', "extra"),
    ],
)
def test_garbage_graphs_get_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(InvalidGraphError, match=message):
        graph_from_json(text, "g.json")


def test_load_graph_names_missing_file(tmp_path) -> None:
    with pytest.raises(InvalidGraphError, match="cannot read"):
        load_graph(tmp_path / "nope.json")


def test_domains_group_by_accelerator_and_subdomain() -> None:
    g = graph_from_json(
        graph_json(
            [
                {"name": "n2", "accelerator": "d1", "subdomain": "r1"},
                {"name": "n1", "accelerator": "d1", "subdomain": "r1"},
                {"name": "n3", "accelerator": "d1"},
                {"name": "n4"},
            ]
        )
    )
    d = build_domains(g)
    assert d.members == {"d1": {"r1": ["n1", "n2"], None: ["n3"]}}
    assert d.has_subdomains()


def test_subdomain_without_domain_is_rejected() -> None:
    with pytest.raises(InvalidGraphError, match="sub-domain but no accelerator"):
        graph_from_json(graph_json([{"name": "n1", "subdomain": "r1"}]))


def test_exported_schema_matches_the_model(tmp_path) -> None:
    from pathlib import Path

    committed = Path(__file__).resolve().parent.parent / "schemas" / "graph-v1.schema.json"
    assert json.loads(committed.read_text()) == json_schema(), "run: topocast schema --out schemas/graph-v1.schema.json"
