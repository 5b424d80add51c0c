"""Render stage: graph generation -> files + manifest, in memory and on S3 (moto server)."""

from __future__ import annotations

import hashlib
import json

import pytest
from memory_stores import MemoryArtifactStore, MemoryGraphStore
from pipeline_helpers import client, graph, make_bucket

from topocast.app.render import render_generation
from topocast.aws.s3_artifacts import S3ArtifactStore
from topocast.aws.s3_store import S3GraphStore
from topocast.errors import InvalidGraphError, RenderError
from topocast.model.graph import TopologyGraph
from topocast.ports.records import Manifest
from topocast.renderers import RENDERERS, render, slurm_tree

FORMATS = ["slurm-tree", "graph"]


def _with_zone(g: TopologyGraph, zone: str) -> TopologyGraph:
    data = g.model_dump()
    for node in data["nodes"]:
        node["zone"] = zone
    return TopologyGraph.model_validate(data)


def test_render_writes_files_and_manifest_and_detects_no_change() -> None:
    store, artifacts = MemoryGraphStore(), MemoryArtifactStore()
    g1 = graph("c1", 12)
    store.write_if_changed(g1, expected_generation=None)
    first = render_generation(store, artifacts, None, FORMATS)
    assert first.changed and first.generation == 1
    conf = artifacts.get_artifact(1, slurm_tree.FILENAME)
    assert conf.decode() == render(g1, "slurm-tree").content
    entries = {e.format: e for e in first.manifest.artifacts}
    assert set(entries) == set(FORMATS)
    for e in entries.values():
        stored = artifacts.get_artifact(1, e.file)
        assert e.sha256 == hashlib.sha256(stored).hexdigest() and e.size == len(stored) and e.node_count == 12
    assert first.manifest.graph_sha256 == g1.content_hash()
    assert artifacts.latest_manifest() == first.manifest

    again = render_generation(store, artifacts, 1, FORMATS)
    assert not again.changed and again.manifest == first.manifest

    # a change the Slurm file does not show (zones) is not a change for a slurm-only render...
    store.write_if_changed(_with_zone(g1, "use1-az1"), expected_generation=1)
    slurm_only = render_generation(store, MemoryArtifactStore(), None, ["slurm-tree"])
    assert slurm_only.changed  # fresh store: first render
    quiet = MemoryArtifactStore()
    render_generation(store, quiet, 1, ["slurm-tree"])
    assert not render_generation(store, quiet, 2, ["slurm-tree"]).changed
    # ...but it is for the graph format
    assert render_generation(store, artifacts, 2, FORMATS).changed


def test_render_errors_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    store, artifacts = MemoryGraphStore(), MemoryArtifactStore()
    with pytest.raises(RenderError, match="graph store is empty"):
        render_generation(store, artifacts, None, FORMATS)
    store.write_if_changed(graph("c1", 4), expected_generation=None)
    with pytest.raises(RenderError, match="unknown format 'nope'"):
        render_generation(store, artifacts, None, ["graph", "nope"])
    monkeypatch.setitem(RENDERERS, "graph-again", RENDERERS["graph"])
    with pytest.raises(RenderError, match=r"'graph' and 'graph-again' both write 'graph\.json'"):
        render_generation(store, artifacts, None, ["graph", "graph-again"])
    assert artifacts.files == {} and artifacts.latest_manifest() is None


def test_older_generation_never_moves_latest_back() -> None:
    store, artifacts = MemoryGraphStore(), MemoryArtifactStore()
    store.write_if_changed(graph("c1", 4), expected_generation=None)
    store.write_if_changed(graph("c1", 8), expected_generation=1)
    assert render_generation(store, artifacts, 2, FORMATS).changed
    late = render_generation(store, artifacts, 1, FORMATS)
    assert not late.changed and artifacts.latest_manifest().generation == 2


# ----- S3 --------------------------------------------------------------------------------------


def _s3(moto_server):
    bucket = make_bucket(moto_server)
    s3 = client(moto_server, "s3")
    return s3, bucket, S3GraphStore(bucket, "tc", "c1", s3), S3ArtifactStore(bucket, "tc", "c1", s3)


def test_s3_layout_and_manifest(moto_server) -> None:
    s3, bucket, store, artifacts = _s3(moto_server)
    store.write_if_changed(graph("c1", 10), expected_generation=None)
    result = render_generation(store, artifacts, None, FORMATS)
    assert result.changed
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="tc/c1/rendered/")["Contents"]}
    assert keys == {
        f"tc/c1/rendered/000000000001/{slurm_tree.FILENAME}",
        "tc/c1/rendered/000000000001/graph.json",
        "tc/c1/rendered/000000000001/manifest.json",
        "tc/c1/rendered/latest.json",
    }
    raw = json.loads(s3.get_object(Bucket=bucket, Key="tc/c1/rendered/latest.json")["Body"].read())
    assert raw["generation"] == 1 and {a["file"] for a in raw["artifacts"]} == {slurm_tree.FILENAME, "graph.json"}
    conf = s3.get_object(Bucket=bucket, Key=f"tc/c1/rendered/000000000001/{slurm_tree.FILENAME}")["Body"].read()
    assert hashlib.sha256(conf).hexdigest() == Manifest.from_json(raw).entry("slurm-tree").sha256
    assert not render_generation(store, artifacts, None, FORMATS).changed


def test_corrupt_graph_in_s3_keeps_the_last_manifest(moto_server) -> None:
    s3, bucket, store, artifacts = _s3(moto_server)
    store.write_if_changed(graph("c1", 10), expected_generation=None)
    good = render_generation(store, artifacts, None, FORMATS).manifest
    store.write_if_changed(graph("c1", 20), expected_generation=1)
    s3.put_object(
        Bucket=bucket, Key="tc/c1/graphs/000000000002.json", Body=b'{"cluster": "c1", "provider": "aws", "nodes": 7}'
    )
    with pytest.raises(InvalidGraphError) as err:
        render_generation(store, artifacts, None, FORMATS)
    assert "tc/c1/graphs/000000000002.json" in str(err.value) and "nodes" in str(err.value)
    assert artifacts.latest_manifest() == good
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="tc/c1/rendered/000000000002/")
    assert listed.get("KeyCount", 0) == 0


def test_renderer_failure_writes_nothing(moto_server) -> None:
    s3, bucket, store, artifacts = _s3(moto_server)
    store.write_if_changed(graph("c1", 6), expected_generation=None)
    good = render_generation(store, artifacts, None, FORMATS).manifest
    # a valid but empty graph: the graph format renders it, slurm-tree refuses (an empty
    # topology.conf silently disables topology-aware scheduling)
    empty = TopologyGraph.model_validate({"cluster": "c1", "provider": "test", "nodes": []})
    store.write_if_changed(empty, expected_generation=1)
    with pytest.raises(RenderError, match=r"generation 2: format 'slurm-tree' failed"):
        render_generation(store, artifacts, None, ["graph", "slurm-tree"])
    assert artifacts.latest_manifest() == good
    assert s3.list_objects_v2(Bucket=bucket, Prefix="tc/c1/rendered/000000000002/").get("KeyCount", 0) == 0


def test_s3_latest_manifest_never_goes_back(moto_server) -> None:
    _, _, store, artifacts = _s3(moto_server)
    store.write_if_changed(graph("c1", 4), expected_generation=None)
    store.write_if_changed(graph("c1", 8), expected_generation=1)
    assert render_generation(store, artifacts, 2, FORMATS).changed
    late = render_generation(store, artifacts, 1, FORMATS)  # a slow render of the older generation
    assert not late.changed and artifacts.latest_manifest().generation == 2
    assert artifacts.get_manifest(1).generation == 1  # its own manifest is still kept


def test_a_format_the_graph_cannot_express_is_skipped_with_a_warning() -> None:
    """A p5 cluster without capacity blocks has no NVLink domains: block topology is skipped, tree ships."""
    store, artifacts = MemoryGraphStore(), MemoryArtifactStore()
    data = graph("c1", 8).model_dump()
    for node in data["nodes"]:
        node["accelerator"] = None
    g = TopologyGraph.model_validate(data)
    store.write_if_changed(g, expected_generation=None)
    result = render_generation(store, artifacts, None, ["slurm-tree", "slurm-block"])
    assert [e.format for e in result.manifest.artifacts] == ["slurm-tree"]
    assert any(w.startswith("slurm-block: skipped") and "accelerator" in w for w in result.warnings)
    with pytest.raises(RenderError, match="no configured format applies"):
        render_generation(store, MemoryArtifactStore(), None, ["slurm-block"])
