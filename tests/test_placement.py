"""One odd record is set aside with its reason; every other node is placed as if it were not there."""

from __future__ import annotations

from topocast.model.graph import Node, dump_graph, graph_from_json
from topocast.model.placement import place_nodes


def _rack(n: int) -> list[Node]:
    # gpu-00..03 under leaf-a, gpu-04..07 under leaf-b, both under spine-1
    return [
        Node(
            name=f"gpu-{i:02d}",
            id=f"i-{i:02d}",
            fabric=["leaf-a" if i < 4 else "leaf-b", "spine-1"],
            accelerator="nvl-1",
        )
        for i in range(n)
    ]


def test_a_good_graph_passes_unchanged() -> None:
    graph = place_nodes("c1", "test", _rack(8))
    assert graph.unplaced == {}
    assert [n.fabric for n in graph.nodes][:2] == [["leaf-a", "spine-1"], ["leaf-a", "spine-1"]]
    assert '"unplaced"' not in dump_graph(graph)  # files of good graphs are what they always were


def test_a_contradicting_path_loses_its_topology_not_the_cluster() -> None:
    nodes = [*_rack(8), Node(name="liar", id="i-99", fabric=["leaf-a", "spine-9"])]
    graph = place_nodes("c1", "test", nodes)
    by_name = {n.name: n for n in graph.nodes}
    assert by_name["liar"].fabric == []
    assert by_name["gpu-00"].fabric == ["leaf-a", "spine-1"]
    assert graph.unplaced == {
        "liar": "fabric path spine-9/leaf-a contradicts 4 other node(s): switch 'leaf-a' is under 'spine-1' there "
        "(height 1), under 'spine-9' here; kept without topology"
    }


def test_unnameable_and_doubly_claimed_nodes_are_left_out_with_reasons() -> None:
    nodes = [
        *_rack(4),
        Node(name="gpu-03=x", id="i-50", fabric=["leaf-a", "spine-1"]),
        Node(name="twin", id="i-60", fabric=["leaf-a", "spine-1"]),
        Node(name="twin", id="i-61", fabric=["leaf-b", "spine-1"]),
        Node(name="spine-1", id="i-70", fabric=["leaf-b", "spine-1"]),
    ]
    graph = place_nodes("c1", "test", nodes)
    assert sorted(n.name for n in graph.nodes) == ["gpu-00", "gpu-01", "gpu-02", "gpu-03"]
    assert set(graph.unplaced) == {"record 'gpu-03=x'", "twin", "spine-1"}
    assert graph.unplaced["twin"] == "2 machines claim the name 'twin' (ids i-60, i-61); left out"
    assert graph.unplaced["spine-1"] == "node name 'spine-1' is also a switch of the fabric; left out"
    assert "contains '='" in graph.unplaced["record 'gpu-03=x'"]


def test_an_unsafe_domain_is_dropped_and_the_path_kept() -> None:
    nodes = [*_rack(2), Node(name="gpu-09", id="i-09", fabric=["leaf-a", "spine-1"], accelerator="nvl 1")]
    graph = place_nodes("c1", "test", nodes)
    node = next(n for n in graph.nodes if n.name == "gpu-09")
    assert (node.fabric, node.accelerator) == (["leaf-a", "spine-1"], None)
    assert graph.unplaced["gpu-09"].startswith("accelerator domain dropped: ")


def test_what_was_set_aside_survives_the_store_round_trip() -> None:
    graph = place_nodes("c1", "test", _rack(2), unplaced={"record 'x\\ty'": "line 7: no port"})
    again = graph_from_json(dump_graph(graph))
    assert again.unplaced == {"record 'x\\ty'": "line 7: no port"}
    assert again.content_hash() == graph.content_hash()
