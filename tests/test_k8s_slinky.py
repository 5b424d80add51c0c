"""Slinky as slurm-operator really is: Slurm node names per naming mode, and a key that must match its file."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from slurm_fixtures import SID_ROOT

from topocast.errors import RenderError
from topocast.model.graph import Node, TopologyGraph
from topocast.renderers import render
from topocast.renderers.base import RenderOptions, SlinkyNaming, SlinkyOptions

OVERRIDE = "nodeset.slinky.slurm.net/hostname-override"


def eks_graph() -> TopologyGraph:
    """Four EKS nodes named like EKS names them (FQDNs), two leaves under one spine."""
    names = [
        "ip-10-0-0-1.ec2.internal",
        "ip-10-0-0-2.ec2.internal",
        "ip-10-0-1-1.ec2.internal",
        "ip-10-0-1-2.ec2.internal",
    ]
    return TopologyGraph(
        cluster="c1",
        provider="k8s-labels",
        nodes=[
            Node(
                name=n,
                fabric=[f"leaf-{i // 2}", "spine-0"],
                accelerator=f"nvl-{i // 2}",
                labels={OVERRIDE: f"gpu-{i}"} if i < 3 else {},
            )
            for i, n in enumerate(names)
        ],
    )


def topology_conf(graph: TopologyGraph, **slinky: Any) -> tuple[str, list[str]]:
    art = render(graph, "slinky", RenderOptions(slinky=SlinkyOptions(**slinky)))
    return art.objects[0]["data"][slinky.get("key", "topology.conf")], art.warnings


def test_default_names_slurm_nodes_after_the_first_dns_label() -> None:
    conf, warnings = topology_conf(eks_graph())
    assert "SwitchName=leaf-0 Nodes=ip-10-0-0-[1-2]" in conf
    assert "SwitchName=leaf-1 Nodes=ip-10-0-1-[1-2]" in conf
    assert "ec2.internal" not in conf and not warnings


def test_hostname_override_annotation_wins_where_present() -> None:
    conf, _ = topology_conf(eks_graph(), naming=SlinkyNaming(mode="hostname-override"))
    assert "SwitchName=leaf-0 Nodes=gpu-[0-1]" in conf
    assert "SwitchName=leaf-1 Nodes=gpu-2,ip-10-0-1-2" in conf


def test_statefulset_ordinals_name_nodes_nodeset_dash_ordinal_and_leave_out_the_rest() -> None:
    naming = SlinkyNaming(
        mode="ordinal",
        nodeset="slurm-worker-gpu",
        ordinals={"ip-10-0-0-1.ec2.internal": 3, "ip-10-0-0-2.ec2.internal": 0, "ip-10-0-1-1.ec2.internal": 1},
    )
    conf, warnings = topology_conf(eks_graph(), naming=naming)
    assert "SwitchName=leaf-0 Nodes=slurm-worker-gpu-[0,3]" in conf
    assert "SwitchName=leaf-1 Nodes=slurm-worker-gpu-1\n" in conf
    assert warnings == [
        "1 node(s) have no Slurm node name under slinky.naming.mode ordinal and are left out of the Slinky file: "
        "ip-10-0-1-2.ec2.internal"
    ]


def test_ordinal_mode_needs_the_nodeset_name() -> None:
    with pytest.raises(RenderError, match=r"needs slinky\.naming\.nodeset"):
        topology_conf(eks_graph(), naming=SlinkyNaming(mode="ordinal"))


def test_explicit_map() -> None:
    names = {"ip-10-0-0-1.ec2.internal": "a1", "ip-10-0-0-2.ec2.internal": "a2", "ip-10-0-1-1.ec2.internal": "b1"}
    conf, warnings = topology_conf(eks_graph(), naming=SlinkyNaming(mode="map", names=names))
    assert "SwitchName=leaf-0 Nodes=a[1-2]" in conf and "SwitchName=leaf-1 Nodes=b1\n" in conf
    assert "ip-10-0-1-2.ec2.internal" in warnings[0]


def test_two_nodes_with_one_slurm_name_are_an_error_naming_both() -> None:
    graph = TopologyGraph(
        cluster="c",
        provider="x",
        nodes=[Node(name="gpu-1.zone-a.internal", fabric=["l1"]), Node(name="gpu-1.zone-b.internal", fabric=["l2"])],
    )
    with pytest.raises(
        RenderError, match=r"'gpu-1.zone-a.internal' and 'gpu-1.zone-b.internal' both map to Slurm node"
    ):
        topology_conf(graph)


def test_a_slurm_name_that_is_no_hostname_is_refused() -> None:
    with pytest.raises(RenderError, match=r"Slurm node name for ip-10-0-0-1\.ec2\.internal"):
        topology_conf(eks_graph(), naming=SlinkyNaming(mode="map", names={"ip-10-0-0-1.ec2.internal": "Bad_Name"}))


@pytest.mark.parametrize(
    ("key", "content", "message"),
    [
        ("topology.conf", "slurm-yaml", "names a conf file but slinky.content is slurm-yaml"),
        ("topology.yaml", "slurm-tree", "names a yaml file but slinky.content is slurm-tree"),
        ("topology.yaml", "slurm-block", "names a yaml file but slinky.content is slurm-block"),
        ("topology.txt", "slurm-tree", "slurmctld reads topology.conf or topology.yaml"),
    ],
)
def test_a_key_that_contradicts_its_content_is_an_error(key: str, content: str, message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render(eks_graph(), "slinky", RenderOptions(slinky=SlinkyOptions(key=key, content=content)))


@pytest.mark.parametrize(
    ("key", "content", "first_line"),
    [
        ("topology.conf", "slurm-tree", "SwitchName="),
        ("topology.conf", "slurm-block", "BlockName="),
        ("topology.yaml", "slurm-yaml", "- topology:"),
    ],
)
def test_matching_keys_and_contents_render(key: str, content: str, first_line: str) -> None:
    art = render(eks_graph(), "slinky", RenderOptions(slinky=SlinkyOptions(key=key, content=content)))
    text = art.objects[0]["data"][key]
    assert any(line.startswith(first_line) for line in text.splitlines()), text
    assert art.objects[0]["metadata"]["annotations"]["topocast.dev/node-naming"] == "hostname"


# ----- the per-node spec annotation against a real Slurm 26.05 controller ----------------------------------

#: the Debian sid chroot with slurmctld 26.05, where slurm_fixtures finds it (``TOPOCAST_SLURM_SID`` overrides)
SID = SID_ROOT


def _sid_problem() -> str | None:
    if not (SID / "usr/sbin/slurmctld").exists():
        return f"no Slurm 26.05 chroot at {SID}"
    if os.geteuid() != 0:
        return "chroot needs root"
    if not (SID / "proc/self").exists():
        return f"mount -t proc proc {SID}/proc first"
    return None


@pytest.mark.slurm_current
@pytest.mark.parametrize(
    ("content", "key", "plugin"),
    [
        ("slurm-tree", "topology.conf", "topology/tree"),
        ("slurm-block", "topology.conf", "topology/block"),
        ("slurm-yaml", "topology.yaml", None),  # topology.yaml replaces TopologyPlugin
    ],
)
def test_slinky_spec_annotations_are_accepted_by_a_real_26_05_controller(
    content: str, key: str, plugin: str | None
) -> None:
    """``scontrol update NodeName=... Topology=<spec>`` with every spec topocast annotates, against the
    ConfigMap's own topology.conf; an unknown switch is refused, so the check can fail."""
    problem = _sid_problem()
    if problem:
        pytest.skip(problem)
    from topocast.renderers.slinky import SPEC_ANNOTATION, node_annotations
    from topocast.slurm.controller import free_port, render_slurm_conf

    graph = TopologyGraph(
        cluster="c",
        provider="x",
        nodes=[Node(name=f"n{i}", fabric=[f"leaf{i // 2}", "spine0"], accelerator=f"nvl{i // 2}") for i in range(4)],
    )
    options = RenderOptions(slinky=SlinkyOptions(content=content, key=key))
    topology = render(graph, "slinky", options).objects[0]["data"][key]
    specs = {n: a[SPEC_ANNOTATION] for n, a in node_annotations(graph, options).items()}
    assert sorted(specs) == ["n0", "n1", "n2", "n3"]
    work = Path(tempfile.mkdtemp(dir=SID / "tmp", prefix="topocast-k8s-"))
    inside = Path("/") / work.relative_to(SID)
    (work / "state").mkdir()
    conf = render_slurm_conf(inside, list(specs), free_port(), free_port(), topology_plugin=plugin or "-")
    (work / "slurm.conf").write_text(conf.replace("TopologyPlugin=-\n", ""))
    (work / key).write_text(topology)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURM_CONF": str(inside / "slurm.conf")}

    def scontrol(*args: str) -> tuple[int, str]:
        done = subprocess.run(
            ["chroot", str(SID), "scontrol", *args], env=env, capture_output=True, text=True, timeout=30
        )
        return done.returncode, (done.stdout + done.stderr).strip()

    ctld = subprocess.Popen(
        ["chroot", str(SID), "slurmctld", "-D", "-i", "-f", str(inside / "slurm.conf")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while "UP" not in scontrol("ping")[1]:
            assert ctld.poll() is None and time.monotonic() < deadline, (work / "slurmctld.log").read_text()[-2000:]
            time.sleep(0.1)
        assert "26.05" in subprocess.run(["chroot", str(SID), "slurmctld", "-V"], capture_output=True, text=True).stdout
        for node, spec in specs.items():
            assert scontrol("update", f"NodeName={node}", f"Topology={spec}") == (0, ""), (node, spec)
            assert f"Topology={spec}" in scontrol("show", "node", node)[1]
        rc, out = scontrol("update", "NodeName=n0", "Topology=default:no-such-unit")
        assert rc != 0 and "not available" in out
    finally:
        ctld.kill()
        ctld.wait()
        shutil.rmtree(work, ignore_errors=True)
