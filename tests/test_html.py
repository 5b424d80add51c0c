"""The HTML fabric view: one self-contained file that stays usable at 10,000 nodes.

The page data is checked directly; the ``browser`` tests open the real page in headless
Chromium, take screenshots at 256, 2,000 and 10,000 nodes, and check that it renders within
a time bound and that a search (driven by the URL fragment) finds the node, and at 10,000
nodes the switch, Slurm block and domain searches and fragments meant to break the script.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from html import unescape
from pathlib import Path

import pytest
from cli_runner import invoke

from topocast.model.graph import Node, TopologyGraph
from topocast.renderers import RenderOptions, render
from topocast.renderers.html import page_data, render_page
from topocast.renderers.slurm_block import cluster_layout

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HEADLESS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
#: Anything that could reach the network or another file.
EXTERNAL = re.compile(r"https?:|//|\bsrc=|\bhref=|url\(|@import|<link|<img|<iframe", re.IGNORECASE)


def fat_tree(n: int, per_leaf: int = 18, fanout: int = 8, domain: int = 72) -> TopologyGraph:
    """``n`` nodes gpu-000000.. under leaf-00000.. -> t1 -> t2 (root), NVLink domains of ``domain`` nodes."""
    nodes = [
        Node(
            name=f"gpu-{i:06d}",
            id=f"i-{i:08x}",
            fabric=[
                f"leaf-{i // per_leaf:05d}",
                f"t1-{i // per_leaf // fanout:04d}",
                f"t2-{i // per_leaf // fanout**2}",
            ],
            accelerator=f"nvl-{i // domain:04d}",
        )
        for i in range(n)
    ]
    return TopologyGraph(cluster="c1", provider="test", nodes=nodes)


def test_page_is_one_file_with_nothing_from_the_network() -> None:
    g = TopologyGraph(
        cluster="c1",
        provider="test",
        nodes=[*fat_tree(40).nodes, Node(name="lost-1"), Node(name="lost-2", accelerator_pending=True)],
    )
    page = render(g, "html").content
    assert page.startswith("<!DOCTYPE html>")
    assert not EXTERNAL.search(page), EXTERNAL.search(page)
    assert not re.search(r"<script[^>]*\bsrc", page)
    assert re.search(r"<b>42</b><span>nodes</span>", page)
    assert re.search(r"<b>2</b><span>nodes without topology</span>", page)
    assert "lost-[1-2]" in page  # the alert box names them without any script


def test_leaves_and_nodes_are_in_natural_name_order() -> None:
    names = ["n10", "n9", "n2", "n1"]
    g = TopologyGraph(cluster="c", provider="t", nodes=[Node(name=x, fabric=[f"leaf-{x[1:]}", "spine"]) for x in names])
    data = page_data(g)
    spine = data["switches"][data["roots"][0]]  # type: ignore[index]
    leaves = [data["switches"][k][0] for k in spine[4]]  # type: ignore[index]
    assert leaves == ["leaf-1", "leaf-2", "leaf-9", "leaf-10"]
    assert [row[0] for row in data["nodes"]] == ["n1", "n2", "n9", "n10"]  # type: ignore[index]


def test_groups_carry_counts_and_domain_fill() -> None:
    data = page_data(fat_tree(2000))
    switches = data["switches"]
    root = switches[data["roots"][0]]  # type: ignore[index]
    assert [switches[r][0] for r in data["roots"]] == ["t2-0", "t2-1"]  # type: ignore[index]
    assert root[7] == 18 * 8 * 8 and len(root[4]) == 8  # 1152 nodes under 8 t1 switches
    leaf = next(s for s in switches if s[0] == "leaf-00004")  # type: ignore[union-attr]
    # leaf 4 = gpu-000072..089: all in domain nvl-0001 (index 1), which also spans leaves 5-7
    assert leaf[7] == 18 and leaf[8] == [[1, 18]] and leaf[9] == 1 and leaf[11] == 1
    assert len(data["domains"]) == 28  # type: ignore[arg-type]


def test_previous_graph_marks_what_changed(tmp_path: Path) -> None:
    old = fat_tree(72)
    # gone: gpu-000000; moved: gpu-000001 (leaf 0 -> leaf 3); new domain: gpu-000002; new: gpu-new
    changed = {
        "gpu-000001": {"fabric": ["leaf-00003", "t1-0000", "t2-0"]},
        "gpu-000002": {"accelerator": "nvl-9999"},
    }
    kept = [n.model_copy(update=changed.get(n.name, {})) for n in old.nodes[1:]]
    extra = Node(name="gpu-new", fabric=["leaf-00000", "t1-0000", "t2-0"], accelerator="nvl-0000")
    new = TopologyGraph(cluster="c1", provider="test", nodes=[*kept, extra])
    (tmp_path / "old.json").write_text(old.model_dump_json())
    (tmp_path / "new.json").write_text(new.model_dump_json())
    result = invoke(["render", "--graph", tmp_path / "new.json", "-f", "html", "--previous", tmp_path / "old.json"])
    assert result.exit_code == 0, result.output
    page = result.stdout
    assert "Changes since the previous graph" in page and "removed 1 node(s): gpu-000000" in page
    blob = re.search(r'<script type="application/json" id="topology">(.*?)</script>', page)
    assert blob
    data = json.loads(blob.group(1))
    flags = {row[0]: row[5] for row in data["nodes"] if row[5]}
    assert flags == {"gpu-new": 1, "gpu-000001": 2, "gpu-000002": 3}  # added, moved, domain changed
    assert data["removed"] == ["gpu-000000"]
    leaf3 = next(s for s in data["switches"] if s[0] == "leaf-00003")
    assert leaf3[10] == 1  # the group counts its one changed node
    lost = {s[0]: s[12] for s in data["switches"] if s[12]}
    # leaf 0 lost gpu-000000 (removed) and gpu-000001 (moved to leaf 3, under the same t1 and t2)
    assert lost == {"leaf-00000": 2, "t1-0000": 1, "t2-0": 1}
    assert all(row[5] == 0 for row in page_data(new)["nodes"])  # type: ignore[union-attr]


def test_domains_carry_the_block_names_of_topology_block_conf() -> None:
    g = fat_tree(2000)
    for options in (RenderOptions(), RenderOptions(block_names="position")):
        conf = render(g, "slurm-block", options).content
        # "# block003=nvl-0002": the block file's own comment names a block's domain; without one, it is its name
        named = dict(re.findall(r"^# (\S+)=(\S+)$", conf, re.MULTILINE))
        named |= {b: b for b in re.findall(r"^BlockName=(\S+) ", conf, re.MULTILINE) if b not in named}
        data = page_data(g, layout=cluster_layout(g, options))
        shown = {data["blocks"][b]: data["domains"][d] for d, bs in enumerate(data["domainBlocks"]) for b in bs}  # type: ignore[index]
        # 2000 = 27 x 72 + 56: nvl-0027's 56 nodes are below the base size 72, left out for a Slurm not given
        assert shown == named and len(named) == 27
    assert named["block003"] == "nvl-0002"


def test_the_page_shows_what_validate_slurm_warns_about(tmp_path: Path) -> None:
    (tmp_path / "g.json").write_text(fat_tree(2000).model_dump_json())  # two top switches: t2-0, t2-1
    result = invoke(["render", "--graph", tmp_path / "g.json", "-f", "html"])
    assert result.exit_code == 0, result.output
    box = re.search(r'<details class="alertbox slurm" id="slurm-checks" open>(.*?)</details>', result.stdout)
    assert box, "no Slurm warnings box"
    assert "topology-tree.conf: 2 root switches (t2-0, t2-1): no switch reaches every node" in box.group(1)
    one_root = TopologyGraph(
        cluster="c", provider="t", nodes=[Node(name=f"n{i}", fabric=["leaf", "top"]) for i in range(4)]
    )
    (tmp_path / "one.json").write_text(one_root.model_dump_json())
    assert "slurm-checks" not in invoke(["render", "--graph", tmp_path / "one.json", "-f", "html"]).stdout


def slurm_box(page: str) -> list[str]:
    box = re.search(r'<details class="alertbox slurm" id="slurm-checks" open>(.*?)</details>', page)
    assert box, "no Slurm warnings box"
    return [unescape(item) for item in re.findall(r"<li>(.*?)</li>", box.group(1))]


LEFT_OUT = (
    "slurm-block: block of domain 'd2' (2 node(s): n[5,7]) left out, its nodes are in no block: it is smaller "
    "than the base block size 4, which Slurm 23.02-24.11 rejects, and no target Slurm is given "
    "(slurm_version 25.05 or later keeps it)"
)


@pytest.mark.parametrize("skeleton", [False, True])
def test_slurm_warnings_name_the_lines_of_the_files_rendered(tmp_path: Path, skeleton: bool) -> None:
    """The page's Slurm checks come from the records the files were written from, not from
    re-reading them: line numbers count the ``# name=ID`` comment lines and the synthetic leaf."""
    nodes = [Node(name=f"n{i}", fabric=["leaf-a", "top-a"], accelerator="d1") for i in range(1, 5)]
    nodes += [
        Node(name="n5", fabric=["leaf-b", "top-b"], accelerator="d2"),
        Node(name="n6", fabric=["spine-c", "top-a"]),
        Node(name="n7", fabric=["top-a"], accelerator="d2"),  # top-a also has nodes: leaf top-a.nodes
    ]
    g = TopologyGraph(cluster="c", provider="t", nodes=nodes, switch_names={"leaf-b": "rack-b", "top-b": "core-b"})
    (tmp_path / "g.json").write_text(g.model_dump_json())
    flags = ["--skeleton"] if skeleton else []
    result = invoke(["render", "--graph", tmp_path / "g.json", "-f", "html", *flags])
    assert result.exit_code == 0, result.output
    roots = (
        "topology-tree.conf: 2 root switches (top-a, core-b): no switch reaches every node, "
        "so no job can span these trees"
    )
    if not skeleton:
        # d2 (n5, n7: smaller than the base size 4) is left out for a Slurm not given, and the box says so
        assert slurm_box(result.stdout) == [roots, LEFT_OUT]
        return
    neither = "has neither Switches= nor Nodes= (slurmctld before 25.05: fatal)"
    assert slurm_box(result.stdout) == [
        roots,
        f"invalid: topology-tree.conf:4: switch 'leaf-a' {neither}",
        f"invalid: topology-tree.conf:5: switch 'spine-c' {neither}",
        f"invalid: topology-tree.conf:6: switch 'top-a.nodes' {neither}",
        f"invalid: topology-tree.conf:8: switch 'rack-b' {neither}",
        "topology-block.conf:1: block 'd1' has no nodes (Slurm before 25.05 rejects such blocks)",
        LEFT_OUT,
    ]


# ----- in a real browser ------------------------------------------------------------------

browser = pytest.mark.browser


def chromium(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"chromium not found at {CHROMIUM}")
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, *HEADLESS, f"--user-data-dir={profile}", "--window-size=1400,1000", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@browser
@pytest.mark.parametrize(
    ("n", "target"),
    [
        (256, "gpu-000200"),
        # bigger pages in the slow tier: the 10,000-node page's search is also opened in the default run by
        # test_10000_nodes_searched_by_switch_name_opens_that_switch and the other 10,000-node browser tests
        pytest.param(2000, "gpu-001234", marks=pytest.mark.slow),
        pytest.param(10_000, "gpu-009876", marks=pytest.mark.slow),
    ],
)
def test_view_renders_and_search_finds_the_node(n: int, target: str, tmp_path: Path) -> None:
    """The page draws and its search reveals the node; how fast it draws is bench/html_view.py's."""
    page = tmp_path / f"view-{n}.html"
    page.write_text(render_page(fat_tree(n)))
    url = f"{page.as_uri()}#search={target}"
    dom = chromium(["--dump-dom", url]).stdout
    body = re.search(r'<body[^>]*data-render-ms="(\d+)"[^>]*>', dom)
    assert body, "the page script did not finish"
    assert re.search(r'id="results" data-count="1"', dom)
    assert re.search(rf'<span class="n [^"]*\bhit\b[^"]*" id="n\d+" title="{target}', dom), "node not revealed"
    shot = tmp_path / f"view-{n}.png"
    chromium([f"--screenshot={shot}", url])
    assert shot.is_file() and shot.stat().st_size > 20_000  # a drawn page, not a blank one


@browser
def test_hostlist_search_lists_every_match(tmp_path: Path) -> None:
    page = tmp_path / "view.html"
    page.write_text(render_page(fat_tree(2000)))
    dom = chromium(["--dump-dom", f"{page.as_uri()}#search=gpu-[000010-000014,001999]"]).stdout
    assert re.search(r'id="results" data-count="6"', dom)
    assert "gpu-001999</a> — t2-1 &gt; t1-0013 &gt; leaf-00111 — nvl-0027 (#28)" in dom


@pytest.fixture(scope="module")
def page_10k(tmp_path_factory: pytest.TempPathFactory) -> Path:
    page = tmp_path_factory.mktemp("view") / "view-10000.html"
    page.write_text(render_page(fat_tree(10_000)))
    return page


def results_of(dom: str) -> tuple[int, int, str]:
    """(matches, unmatched terms, the results block) of a dumped page; fails when the script did not finish."""
    assert re.search(r'<body[^>]*data-ready="1"', dom), "the page script did not finish"
    m = re.search(r'<div id="results" data-count="(\d+)" data-unmatched="(\d+)">(.*?)</div><div id="legend"', dom, re.S)
    assert m, "no search results"
    return int(m.group(1)), int(m.group(2)), m.group(3)


@browser
def test_10000_nodes_searched_by_switch_name_opens_that_switch(page_10k: Path) -> None:
    dom = chromium(["--dump-dom", f"{page_10k.as_uri()}#search=leaf-00235"]).stdout
    count, unmatched, res = results_of(dom)
    assert (count, unmatched) == (18, 0)  # leaf 235 holds gpu-004230..4247
    assert "leaf-00235: switch t2-3 &gt; t1-0029 &gt; leaf-00235, 18 nodes" in res
    assert "gpu-004230</a>" in res and "gpu-004247</a>" in res
    group = r'<div class="grp hit" data-sw="\d+"><div class="hd"[^>]*><span class="tw">[^<]*</span>'
    hit = re.search(group + r'<span class="nm">([^<]+)<', dom)
    assert hit and hit.group(1) == "leaf-00235", "the switch is not revealed"


@browser
def test_10000_nodes_searched_by_block_name_lists_its_nodes(page_10k: Path) -> None:
    dom = chromium(["--dump-dom", f"{page_10k.as_uri()}#search=nvl-0002"]).stdout
    count, unmatched, res = results_of(dom)
    assert (count, unmatched) == (72, 0)  # BlockName=nvl-0002 Nodes=gpu-[000144-000215]
    assert "nvl-0002: Slurm block nvl-0002 = domain nvl-0002 (#3), 72 nodes" in res
    assert "gpu-000144</a>" in res and "gpu-000215</a>" in res and "gpu-000216</a>" not in res
    assert re.search(r'<span class="n [^"]*\bhit\b[^"]*" id="n144"', dom), "first node not revealed"


#: fragment -> (matches, unmatched terms, what the results say)
FRAGMENTS = {
    "nvl-0002": (72, 0, "nvl-0002: Slurm block nvl-0002 = domain nvl-0002 (#3), 72 nodes"),
    "%233": (72, 0, "#3: domain nvl-0002 (#3), 72 nodes"),  # %23 = '#': domain number 3
    "t1-0029": (144, 0, "t1-0029: switch t2-3 &gt; t1-0029, 144 nodes"),
    "n[0-150000][0-150000]": (0, 0, "expands to more than 200,000 names"),  # counted, never built
    "gpu-[0-99999999999999]": (0, 0, "expands to more than 200,000 names"),
    "%E0%A4%A": (0, 1, "not valid percent-encoding: searched as written"),  # decodeURIComponent throws
    "gpu-[000010-000012],nosuch-1,leaf-00001": (21, 1, "No match for <code>nosuch-1</code>"),
    "gpu-[000010-000012": (0, 1, "gpu-[000010-000012 (not a hostlist)"),
    "gpu-[9998-10001]": (0, 1, "No match for <code>gpu-[9998-10001]</code>"),
    "gpu-[009998-010001]": (2, 0, "gpu-[009998-010001]: 2 of 4 names are not in this graph"),
}


@browser
def test_10000_nodes_domain_searches_and_hostile_fragments_never_stop_the_page(page_10k: Path, tmp_path: Path) -> None:
    """Each fragment goes through the page's own load path (``fromFragment``), all in one browser run."""
    drive = (
        "<script>const OUT = [];for (const f of " + json.dumps(list(FRAGMENTS)) + ') {history.replaceState(null, "", '
        '"#search=" + f); fromFragment(); const r = document.getElementById("results");'
        "OUT.push([+r.dataset.count, +r.dataset.unmatched, r.innerHTML]);}"
        'document.getElementById("out").textContent = JSON.stringify(OUT);</script>'
    )
    page = tmp_path / "driven.html"
    page.write_text(page_10k.read_text().replace("</body>", f'<textarea id="out"></textarea>{drive}</body>'))
    run = chromium(["--dump-dom", page.as_uri()])
    assert re.search(r'<body[^>]*data-ready="1"', run.stdout), "the page script did not finish"
    out = re.search(r'<textarea id="out">(.*?)</textarea>', run.stdout, re.S)
    assert out and out.group(1), "the driver did not finish"
    for (fragment, (count, unmatched, says)), got in zip(
        FRAGMENTS.items(), json.loads(unescape(out.group(1))), strict=True
    ):
        assert (got[0], got[1]) == (count, unmatched) and says in got[2], (fragment, got[2][:400])


@browser
def test_job_fragment_outlines_the_jobs_nodes_and_says_its_spans(tmp_path: Path) -> None:
    """``#job=HOSTLIST`` (docs/score.md): 18 nodes of leaf-00000 (domain nvl-0000) and gpu-000100 (leaf-00005,
    nvl-0001): 2 domains where 1 (72 nodes) would hold 19, 2 leaves where 2 (18 + 18) are the fewest."""
    page = tmp_path / "view.html"
    page.write_text(render_page(fat_tree(256)))
    dom = chromium(["--dump-dom", f"{page.as_uri()}#job=gpu-[000000-000017],gpu-000100"]).stdout
    assert re.search(r'<body[^>]*data-ready="1"', dom), "the page script did not finish"
    assert re.search(r'id="results" data-count="19" data-unmatched="0" data-job="19"', dom)
    says = "NVLink domains: 2 spanned, fewest possible 1; leaves: 2 spanned, fewest possible 2"
    assert f"job: 19 node(s) outlined</b> — {says}" in dom
    outlined = set(re.findall(r'<span class="n [^"]*\bjob\b[^"]*" id="n\d+" title="(gpu-\d+)', dom))
    assert outlined == {f"gpu-{i:06d}" for i in [*range(18), 100]}


@browser
def test_occupancy_panel_counts_per_domain_and_marks_cells(tmp_path: Path) -> None:
    """``capacity --html``: gpu-0..9 and nvl-0001 (gpu-72..143) allocated, gpu-10 drained, the rest free."""
    from topocast.renderers.html import with_occupancy

    states = {f"gpu-{i:06d}": "free" for i in range(256)}
    states.update({f"gpu-{i:06d}": "allocated" for i in [*range(10), *range(72, 144)]})
    states["gpu-000010"] = "drained"
    page = tmp_path / "occ.html"
    page.write_text(with_occupancy(render_page(fat_tree(256)), states))
    dom = chromium(["--dump-dom", f"{page.as_uri()}#search=gpu-000010"]).stdout
    assert re.search(r'<body[^>]*data-ready="1"', dom), "the page script did not finish"
    # 256 - 10 - 72 - 1 = 173 free; nvl-0002 (gpu-144..215) is the only whole free domain; leaves hold 18
    assert "<b>Occupancy</b>: 173 free, 82 allocated, 1 drained, 0 unknown — largest free: 72 in domain nvl-0002" in dom
    assert ", 18 under leaf leaf-" in dom
    row = re.search(
        r'<tr data-dom="0"><td>nvl-0000[^<]*</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>', dom
    )
    assert row and row.groups() == ("61", "10", "1", "0")
    assert re.search(r'<span class="n [^"]*\bst-drained\b[^"]*" id="n\d+" title="gpu-000010', dom)
