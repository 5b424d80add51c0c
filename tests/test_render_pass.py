"""Several formats of one graph share one pass: same bytes as rendering each alone, derived views built once."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import invoke

from topocast.model import fabric
from topocast.model.graph import Node, TopologyGraph
from topocast.renderers import RENDERERS, render, render_many
from topocast.renderers.base import RenderOptions


def cluster() -> TopologyGraph:
    nodes = [
        Node(name=f"gpu-{i:03d}", id=f"i-{i:04x}", fabric=[f"leaf-{i // 8}", f"spine-{i // 32}", "core"],
             accelerator=f"nvl-{i // 16}")
        for i in range(64)
    ]  # fmt: skip
    return TopologyGraph(cluster="c1", provider="test", nodes=[*nodes, Node(name="login-1")])


def test_one_pass_gives_the_same_bytes_as_each_format_alone() -> None:
    g, options = cluster(), RenderOptions(block_sizes=[16, 32])
    together = render_many(g, list(RENDERERS), options)
    for art in together:
        alone = render(g, art.format, options)
        assert (art.content, art.warnings) == (alone.content, alone.warnings), art.format


def test_the_tree_and_domains_are_built_once_per_render_call(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    build_tree, build_domains = fabric._build_tree, fabric._build_domains
    monkeypatch.setattr(fabric, "_build_tree", lambda g, bare: calls.append(f"tree {bare}") or build_tree(g, bare))
    monkeypatch.setattr(fabric, "_build_domains", lambda g: calls.append("domains") or build_domains(g))
    render_many(cluster(), ["slurm-tree", "slurm-block", "slurm-yaml", "slinky", "volcano", "html"])
    # one tree with the no-topology switch (Slurm), one without (Volcano, HTML), one domain map
    assert sorted(calls) == ["domains", "tree False", "tree True"]
    calls.clear()
    render_many(cluster(), ["slurm-tree"])
    assert calls == ["tree True"]  # a new call builds afresh: nothing is cached across calls


def test_render_help_lists_every_format() -> None:
    result = invoke(["render", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for fmt in RENDERERS:
        assert fmt in result.stdout, fmt


@pytest.mark.parametrize("target", ["/proc/topocast-cannot-write", "{file}/sub"])
def test_unwritable_out_is_one_line_without_a_traceback(target: str, tmp_path: Path) -> None:
    graph = tmp_path / "g.json"
    graph.write_text(cluster().model_dump_json())
    (tmp_path / "file").write_text("not a directory")
    out = target.format(file=tmp_path / "file")
    result = invoke(["render", "--graph", graph, "-f", "all", "--out", out])
    assert result.exit_code == 2
    errors = [ln for ln in result.stderr.splitlines() if not ln.startswith("topocast: warning:")]
    assert len(errors) == 1 and errors[0].startswith(f"topocast: error: --out {out}: cannot "), result.stderr
    if target.startswith("{file}"):  # the cause, named before anything is rendered
        assert errors[0].endswith(f"{tmp_path / 'file'} is a file, not a directory"), result.stderr
        assert not [ln for ln in result.stderr.splitlines() if ln.startswith("topocast: warning:")]
    assert "Traceback" not in result.stderr


def test_file_only_rendering_drops_api_objects_but_not_content() -> None:
    g = cluster()
    with_objects = render_many(g, ["k8s-labels", "volcano"])
    files_only = render_many(g, ["k8s-labels", "volcano"], objects=False)
    assert all(a.objects for a in with_objects) and not any(a.objects for a in files_only)
    assert [a.content for a in files_only] == [a.content for a in with_objects]
