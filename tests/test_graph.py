"""The graph model: what it accepts, what it rejects and how it says so."""

from __future__ import annotations

import json

import pytest

from topocast.errors import InvalidGraphError, UnsafeNameError
from topocast.model.fabric import NO_TOPOLOGY, build_domains, build_tree
from topocast.model.graph import dump_graph, graph_from_json, json_schema, load_graph

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


# ----- the set-level fast path must reject exactly what a node-by-node check rejects -----------------


def big_graph(n: int = 500, **changes: dict) -> str:
    nodes = [
        {
            "name": f"gpu-{i:04d}",
            "id": f"i-{i}",
            "fabric": [f"leaf-{i // 10}", f"spine-{i // 100}"],
            "accelerator": "d1",
        }
        for i in range(n)
    ]
    for name, change in changes.items():
        nodes[int(name.removeprefix("n"))].update(change)
    return graph_json(nodes)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"n321": {"name": "gpu 321"}}, UnsafeNameError, "node name 'gpu 321' of node 'gpu 321' contains whitespace"),
        ({"n321": {"name": "gpu-1\ngpu-2"}}, UnsafeNameError, "contains a newline"),  # not two names when joined
        ({"n77": {"fabric": ["leaf-7", "spine 0"]}}, UnsafeNameError, "switch name 'spine 0' of node 'gpu-0077'"),
        ({"n400": {"accelerator": "d,1"}}, UnsafeNameError, "accelerator domain 'd,1' of node 'gpu-0400'"),
        ({"n12": {"id": "i-11"}}, InvalidGraphError, "instance id 'i-11' is used by nodes 'gpu-0011' and 'gpu-0012'"),
        ({"n499": {"name": "gpu-0000"}}, InvalidGraphError, "node name 'gpu-0000' appears twice"),
        (
            {"n250": {"fabric": ["leaf-25", "spine-9"]}},
            InvalidGraphError,
            "switch 'leaf-25' has parent 'spine-9' for node 'gpu-0250' but 'spine-2'",
        ),
        ({"n3": {"fabric": ["leaf-0", "spine-0", "leaf-0"]}}, InvalidGraphError, "has a switch twice"),
        ({"n5": {"fabric": ["gpu-0006"]}}, InvalidGraphError, "'gpu-0006' is both a node and a switch"),
        ({"n6": {"subdomain": "r1", "accelerator": None}}, InvalidGraphError, "sub-domain but no accelerator"),
    ],
)
def test_one_bad_node_among_many_is_found_and_named(change: dict, error: type, message: str) -> None:
    with pytest.raises(error) as exc:
        graph_from_json(big_graph(**change), "big.json")
    assert message in str(exc.value) and str(exc.value).startswith("big.json: ")


def test_a_good_big_graph_loads_with_every_field() -> None:
    g = graph_from_json(big_graph())
    assert len(g.nodes) == 500 and g.nodes[123].fabric == ["leaf-12", "spine-1"]


def test_names_found_safe_are_remembered_but_never_beyond_their_limit() -> None:
    from topocast.model import names

    long_domain = "d" * 100  # a fine domain name, too long for a switch
    graph_from_json(graph_json([{"name": "a", "fabric": ["leaf-1"], "accelerator": long_domain}]))
    assert "leaf-1" in names._KNOWN_SAFE and long_domain not in names._KNOWN_SAFE
    with pytest.raises(UnsafeNameError, match="limit 64"):
        graph_from_json(graph_json([{"name": "a", "fabric": [long_domain]}]))


# ----- the msgspec fast path (model/decode.py) must load exactly what pydantic loads ---------------


def test_the_fast_decoder_mirrors_the_node_model_field_for_field() -> None:
    import msgspec

    from topocast.model.decode import WireNode
    from topocast.model.graph import Node

    wire = msgspec.structs.fields(WireNode)
    assert [f.name for f in wire] == list(Node.model_fields)
    for f in wire:
        field = Node.model_fields[f.name]
        default = field.default_factory() if field.default_factory else field.default  # type: ignore[call-arg]
        got = f.default_factory() if f.default_factory is not msgspec.NODEFAULT else f.default
        assert got == default or (got is msgspec.NODEFAULT and field.is_required()), f.name


ODD_NODES = [
    {"name": "gpu-1", "id": "i-1", "fabric": ["leaf-1", "spine-1"], "accelerator": "d1", "subdomain": "r1"},
    {"name": "gpu-2", "fabric": ["leaf-1", "spine-1"], "accelerator": "d1", "labels": {"k": "v"}},
    {"name": "gpu-3", "accelerator_pending": True, "zone": "z", "instance_type": None},
    {"name": "gpu-4", "fabric": [], "id": None, "accelerator": None},
]


@pytest.mark.parametrize(
    "text",
    [
        graph_json(ODD_NODES, switch_names={"spine-1": "core"}),
        graph_json(ODD_NODES).encode(),
        json.dumps({"cluster": "c1", "provider": "p", "nodes": ODD_NODES}, indent=2),
        json.dumps({"cluster": "c1", "provider": "p"}),
        # pydantic's lax values the fast path leaves to pydantic: same graph either way
        graph_json([{"name": "a", "accelerator_pending": 1}]),
        graph_json([{"name": "a", "accelerator_pending": "yes"}]),
        json.dumps({"schema_version": 1.0, "cluster": "c1", "provider": "p", "nodes": []}),
    ],
)
def test_fast_and_pydantic_loads_give_equal_graphs(text: str | bytes) -> None:
    from topocast.model.graph import TopologyGraph

    fast = graph_from_json(text)
    slow = TopologyGraph.model_validate_json(text)
    assert fast == slow and fast.model_dump_json() == slow.model_dump_json() and repr(fast) == repr(slow)
    assert fast.model_fields_set == slow.model_fields_set
    renamed = fast.nodes[0].model_copy(update={"name": "other"}) if fast.nodes else None
    assert renamed is None or (renamed.name == "other" and fast.nodes[0].name != "other")


def test_a_lax_value_the_fast_path_declines_is_still_rejected_as_before() -> None:
    with pytest.raises(InvalidGraphError, match=r"nodes\.0\.accelerator_pending: Input should be a valid boolean"):
        graph_from_json(graph_json([{"name": "a", "accelerator_pending": None}]), "g.json")
