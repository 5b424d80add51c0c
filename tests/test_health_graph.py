"""Fabric health in the graph: records load and dump, old graphs are unchanged, each node's fabric health
is the worst object on its path or in its domain, and ``topocast diff`` reports health changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import invoke

from topocast.model.graph import dump_graph, graph_from_json
from topocast.model.health import HealthRecord, ObjectRef, carry_forward, node_health

T0 = "2026-12-04T15:00:00Z"
T1 = "2026-12-04T15:05:00Z"


def graph(health: list[dict] | None = None) -> dict:
    # two leaves under one spine; gpu-1/2 share NVLink domain nvl-a (also capacity block cb-a), gpu-3/4 nvl-b
    data: dict = {
        "schema_version": 1,
        "cluster": "c1",
        "provider": "test",
        "nodes": [
            {"name": "gpu-1", "fabric": ["leaf-1", "spine-1"], "accelerator": "nvl-a"},
            {"name": "gpu-2", "fabric": ["leaf-1", "spine-1"], "accelerator": "nvl-a"},
            {"name": "gpu-3", "fabric": ["leaf-2", "spine-1"], "accelerator": "nvl-b"},
            {
                "name": "gpu-4",
                "fabric": ["leaf-2", "spine-1"],
                "accelerator": "nvl-b",
                "labels": {"capacity-block": "cb-7"},
            },
        ],
    }
    if health is not None:
        data["health"] = health
    return data


def rec(kind: str, id_: str, state: str, reason: str = "", peer: str | None = None, at: str = T0) -> dict:
    return {
        "kind": kind,
        "id": id_,
        "peer": peer,
        "state": state,
        "source": "test",
        "reason": reason,
        "observed_at": at,
    }


def health_of(data: dict) -> dict[str, tuple[str, str]]:
    g = graph_from_json(json.dumps(data))
    out = node_health(((n.name, n.fabric, n.accelerator, n.labels) for n in g.nodes), g.health)
    return {name: (h.state, str(h.blame)) for name, h in out.items()}


def test_a_graph_without_health_dumps_and_hashes_as_before() -> None:
    g = graph_from_json(json.dumps(graph()))
    assert "health" not in dump_graph(g)
    with_empty = graph_from_json(json.dumps(graph([])))
    assert with_empty.content_hash() == g.content_hash()


def test_records_round_trip_through_the_stored_form() -> None:
    data = graph([rec("switch", "leaf-1", "impaired", "leaf vanished")])
    g = graph_from_json(json.dumps(data))
    again = graph_from_json(dump_graph(g))
    assert again.health == g.health
    assert again.health[0].ref == ObjectRef("switch", "leaf-1")
    assert again.content_hash() != graph_from_json(json.dumps(graph())).content_hash()


@pytest.mark.parametrize(
    ("record", "nodes", "state", "blame"),
    [
        (rec("switch", "leaf-1", "impaired"), [1, 2], "impaired", "switch leaf-1"),
        (rec("switch", "spine-1", "degraded"), [1, 2, 3, 4], "degraded", "switch spine-1"),
        (rec("link", "leaf-2", "impaired", peer="spine-1"), [3, 4], "impaired", "link leaf-2>spine-1"),
        (rec("link", "gpu-3", "degraded", peer="leaf-2"), [3], "degraded", "link gpu-3>leaf-2"),
        (rec("domain", "nvl-b", "degraded"), [3, 4], "degraded", "domain nvl-b"),
        (rec("capacity_block", "nvl-a", "impaired"), [1, 2], "impaired", "capacity_block nvl-a"),
        (rec("capacity_block", "cb-7", "impaired"), [4], "impaired", "capacity_block cb-7"),
        (rec("switch", "leaf-1", "ok"), [], "", ""),
        (rec("switch", "leaf-9", "impaired"), [], "", ""),
        (rec("domain", "nvl-a", "unknown"), [1, 2], "unknown", "domain nvl-a"),
    ],
)
def test_each_kind_of_object_reaches_the_nodes_that_depend_on_it(
    record: dict, nodes: list[int], state: str, blame: str
) -> None:
    assert health_of(graph([record])) == {f"gpu-{i}": (state, blame) for i in nodes}


def test_the_worst_object_is_blamed_and_ties_go_to_the_nearest() -> None:
    records = [
        rec("switch", "spine-1", "degraded"),
        rec("domain", "nvl-a", "impaired"),
        rec("switch", "leaf-2", "degraded"),
    ]
    assert health_of(graph(records)) == {
        "gpu-1": ("impaired", "domain nvl-a"),
        "gpu-2": ("impaired", "domain nvl-a"),
        "gpu-3": ("degraded", "switch leaf-2"),  # leaf-2 and spine-1 are both degraded: the leaf is nearer
        "gpu-4": ("degraded", "switch leaf-2"),
    }


@pytest.mark.parametrize(
    ("health", "words"),
    [
        ([rec("switch", "leaf-1", "broken")], "state"),
        ([rec("link", "leaf-1", "ok")], "peer"),
        ([rec("switch", "leaf-1", "ok", peer="spine-1")], "peer"),
        ([rec("switch", "leaf 1", "ok")], "health record ID"),
        ([rec("switch", "leaf-1", "ok", reason="two\nlines")], "one printable line"),
        ([rec("switch", "leaf-1", "ok"), rec("switch", "leaf-1", "impaired")], "two health records for switch leaf-1"),
        ([{**rec("switch", "leaf-1", "ok"), "observed_at": "2026-12-04T15:00:00"}], "timezone"),
    ],
)
def test_bad_records_are_refused_with_the_field_named(tmp_path: Path, health: list[dict], words: str) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(graph(health)))
    result = invoke(["diff", path, path])
    assert result.exit_code == 2
    assert result.stderr.startswith("topocast: error: ")
    assert words in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_carry_forward_keeps_the_first_time_of_an_unchanged_state_and_drops_healed_objects() -> None:
    old = [HealthRecord.model_validate(rec("switch", "leaf-1", "impaired", "gone", at=T0))]
    same = HealthRecord.model_validate(rec("switch", "leaf-1", "impaired", "gone", at=T1))
    worse = HealthRecord.model_validate(rec("switch", "leaf-1", "degraded", "2 of 4 uplinks", at=T1))
    healed = HealthRecord.model_validate(rec("switch", "leaf-1", "ok", at=T1))
    assert [r.observed_at.isoformat() for r in carry_forward(old, [same])] == ["2026-12-04T15:00:00+00:00"]
    assert [r.observed_at.isoformat() for r in carry_forward(old, [worse])] == ["2026-12-04T15:05:00+00:00"]
    assert carry_forward(old, [healed]) == []


def test_diff_reports_health_changes_with_the_nodes_affected(tmp_path: Path) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(graph([rec("switch", "leaf-2", "degraded", "3 of 4 uplinks")])))
    new.write_text(json.dumps(graph([rec("domain", "nvl-a", "impaired", "NVLink fabric down")])))
    result = invoke(["diff", old, new])
    assert result.exit_code == 1
    assert "health changed for 2 object(s):" in result.stdout
    assert "domain nvl-a: ok -> impaired (NVLink fabric down), 2 node(s): gpu-[1-2]" in result.stdout
    assert "switch leaf-2: degraded -> ok, 2 node(s): gpu-[3-4]" in result.stdout
    data = json.loads(invoke(["diff", "--json", old, new]).stdout)
    assert data["same"] is False
    assert data["health_changed"] == [
        {"object": "domain nvl-a", "kind": "domain", "id": "nvl-a", "peer": None, "old": "ok", "new": "impaired",
         "reason": "NVLink fabric down", "nodes": ["gpu-1", "gpu-2"]},
        {"object": "switch leaf-2", "kind": "switch", "id": "leaf-2", "peer": None, "old": "degraded", "new": "ok",
         "reason": "", "nodes": ["gpu-3", "gpu-4"]},
    ]  # fmt: skip


def test_diff_of_a_reworded_but_equal_state_is_the_same(tmp_path: Path) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(graph([rec("switch", "leaf-2", "degraded", "3 of 4 uplinks", at=T0)])))
    new.write_text(json.dumps(graph([rec("switch", "leaf-2", "degraded", "3 of 4 uplinks", at=T1)])))
    assert invoke(["diff", old, new]).exit_code == 0


def test_the_view_lists_each_unhealthy_object_coloured_with_the_nodes_it_affects(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text(
        json.dumps(graph([rec("switch", "leaf-2", "impaired", "gone"), rec("domain", "nvl-a", "degraded")]))
    )
    page = invoke(["render", "--graph", path, "-f", "html"]).stdout
    box = page.split('id="fabric-health"', 1)[1].split("</details>", 1)[0]
    assert "2 fabric object(s) not ok" in box
    items = box.split("<li>")[1:]  # worst first
    assert "impaired</b> <code>switch leaf-2</code>: gone (test); 2 node(s): gpu-[3-4]" in items[0]
    assert "background:#b3261e" in items[0] and "background:#b26a00" in items[1]
    assert "<b>4</b><span>nodes on unhealthy fabric</span>" in page
    healthy = tmp_path / "ok.json"
    healthy.write_text(json.dumps(graph()))
    assert "fabric-health" not in invoke(["render", "--graph", healthy, "-f", "html"]).stdout


def test_the_fast_loader_reads_health_records_as_pydantic_does() -> None:
    from topocast.errors import InvalidGraphError
    from topocast.model.decode import decode_unchecked
    from topocast.model.graph import Node, TopologyGraph, graph_from_json

    text = json.dumps(
        graph([rec("link", "leaf-1", "degraded", "3 of 4", peer="spine-1"), rec("domain", "nvl-b", "unknown")])
    )
    fast = decode_unchecked(text, TopologyGraph, Node)
    assert fast is not None and fast == TopologyGraph.model_validate_json(text)
    twice = json.dumps(graph([rec("switch", "leaf-1", "ok"), rec("switch", "leaf-1", "impaired")]))
    with pytest.raises(InvalidGraphError, match="two health records for"):  # pydantic words the broken rule
        graph_from_json(twice, "g.json")
