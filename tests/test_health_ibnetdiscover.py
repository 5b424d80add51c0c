"""ibnetdiscover fabric health: a leaf that vanished from the dump, or lost every uplink, is an outage of that
leaf measured against the last good graph, not a new topology.

Fabric (tests/ib_fabric_gen.py, one rail): 4 leaves of 4 hosts under 2 spines; the generator knows which
hosts are cabled to which leaf, so the expected blast radius is its ground truth.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path

import pytest
from cli_runner import invoke
from ib_fabric_gen import IbFabric, fat_tree
from slurm_fixtures import ControllerFactory

from topocast.model.graph import TopologyGraph
from topocast.model.health import node_health
from topocast.providers.base import ProviderInputs
from topocast.providers.onprem.provider import ibnetdiscover_provider
from topocast.slurm.drain import parse_show_nodes


def discover(fab: IbFabric, previous: TopologyGraph | None, fabric_health: bool = True) -> TopologyGraph:
    text = fab.text()
    inputs = ProviderInputs(
        cluster="c1", options={"fabric_health": fabric_health}, uploads=lambda: {"uploads/ib-1.out": text.encode()}
    )
    return ibnetdiscover_provider(inputs).discover_full(previous).graph


def leaves(fab: IbFabric) -> list[str]:
    return sorted({leaf for cabled in fab.cabled.values() for leaf in cabled}, key=lambda s: fab.nodes[s].desc)


def hosts_of(fab: IbFabric, leaf: str) -> list[str]:
    return sorted(h for h, cabled in fab.cabled.items() if leaf in cabled)


def drop(fab: IbFabric, ids: Iterable[str]) -> None:
    """Take switches or HCAs out of the fabric (dead: the dump no longer shows them or their cables)."""
    gone = set(ids)
    for node_id in gone:
        del fab.nodes[node_id]
    for node in fab.nodes.values():
        node.ports = {p: (r, rp) for p, (r, rp) in node.ports.items() if r not in gone}


def unlink(fab: IbFabric, a: str, b: str) -> None:
    """Every cable between ``a`` and ``b`` down."""
    fab.nodes[a].ports = {p: (r, rp) for p, (r, rp) in fab.nodes[a].ports.items() if r != b}
    fab.nodes[b].ports = {p: (r, rp) for p, (r, rp) in fab.nodes[b].ports.items() if r != a}


def radius(graph: TopologyGraph) -> dict[str, str]:
    rows = [(n.name, n.fabric, n.accelerator, n.labels) for n in graph.nodes]
    return {name: str(h.blame) for name, h in node_health(rows, graph.health).items()}


def test_a_vanished_leaf_keeps_its_nodes_in_place_and_is_impaired() -> None:
    fab = fat_tree(units=4, hosts_per_unit=4, rails=1)
    good = discover(fab, None)
    dead = leaves(fab)[1]
    victims = hosts_of(fab, dead)
    hcas = [i for i, n in fab.nodes.items() if n.kind == "Ca" and n.desc.split()[0] in victims]
    drop(fab, [dead, *hcas])

    broken = discover(fab, good)
    assert {n.name: n.fabric for n in broken.nodes} == {n.name: n.fabric for n in good.nodes}  # same map
    [rec] = broken.health
    assert (rec.kind, rec.id, rec.state) == ("switch", dead, "impaired")
    assert rec.reason == "vanished from the fabric dump; 4 node(s) kept at their last place"
    assert radius(broken) == dict.fromkeys(victims, f"switch {dead}")

    # seen again (the dump unchanged): the same graph, so no new generation
    assert discover(fab, broken).content_hash() == broken.content_hash()


def test_a_leaf_that_lost_every_uplink_is_an_impaired_link_and_heals() -> None:
    fab = fat_tree(units=4, hosts_per_unit=4, rails=1)
    good = discover(fab, None)
    cut = leaves(fab)[2]
    for spine in fab.spines:
        unlink(fab, cut, spine)

    broken = discover(fab, good)
    assert {n.name: n.fabric for n in broken.nodes} == {n.name: n.fabric for n in good.nodes}
    [rec] = broken.health
    parent = next(n.fabric[1] for n in good.nodes if n.fabric[0] == cut)
    assert (rec.kind, rec.id, rec.peer, rec.state) == ("link", cut, parent, "impaired")
    assert radius(broken) == dict.fromkeys(hosts_of(fab, cut), f"link {cut}>{parent}")

    healed = discover(fat_tree(units=4, hosts_per_unit=4, rails=1), broken)
    assert healed.health == []
    assert healed.content_hash() == good.content_hash()


def test_without_the_option_a_vanished_leaf_is_a_smaller_topology() -> None:
    fab = fat_tree(units=4, hosts_per_unit=4, rails=1)
    good = discover(fab, None, fabric_health=False)
    dead = leaves(fab)[0]
    victims = hosts_of(fab, dead)
    drop(fab, [dead, *(i for i, n in fab.nodes.items() if n.kind == "Ca" and n.desc.split()[0] in victims)])
    smaller = discover(fab, good, fabric_health=False)
    assert smaller.health == [] and set(smaller.node_names()) == set(good.node_names()) - set(victims)


@pytest.mark.slurm_current
def test_from_the_command_line_a_dead_leaf_drains_its_hosts_and_healing_resumes_them(
    sid_controller_factory: ControllerFactory, tmp_path: Path
) -> None:
    fab = fat_tree(units=4, hosts_per_unit=4, rails=1)
    good_dump, bad_dump = tmp_path / "good.out", tmp_path / "bad.out"
    good_dump.write_text(fab.text())
    dead = leaves(fab)[3]
    victims = hosts_of(fab, dead)
    drop(fab, [dead, *(i for i, n in fab.nodes.items() if n.kind == "Ca" and n.desc.split()[0] in victims)])
    bad_dump.write_text(fab.text())

    def discover_cli(dump: Path, out: Path, previous: Path | None) -> None:
        args = ["discover", "--provider", "ibnetdiscover", "--cluster", "c1", "--input", dump, "--option",
                "fabric_health=true", "--out", out, *(["--previous", previous] if previous else [])]  # fmt: skip
        result = invoke(args)
        assert result.exit_code == 0, result.output

    g0, g1, g2 = tmp_path / "g0.json", tmp_path / "g1.json", tmp_path / "g2.json"
    discover_cli(good_dump, g0, None)
    discover_cli(bad_dump, g1, g0)
    discover_cli(good_dump, g2, g1)

    tree = invoke(["render", "--graph", g0, "-f", "slurm-tree"]).stdout  # 26.05 starts only with a topology
    ctl = sid_controller_factory(sorted(fab.cabled), tree)
    command = ctl.install.scontrol_command
    scontrol = command if isinstance(command, str) else shlex.join(command)
    args = ["--scontrol", scontrol, "--slurm-conf", ctl.install.inside(ctl.conf_path), "--state-file",
            tmp_path / "state.json", "--max-share", "0.5"]  # fmt: skip
    assert invoke(["health", "apply", g1, *args]).exit_code == 0
    out = ctl.scontrol("show", "node", "-o")[1]
    drained = {n.name: n.reason for n in parse_show_nodes(out).values() if n.reason}
    assert set(drained) == set(victims)
    assert all(r and r.startswith(f"topocast: switch {dead} impaired") for r in drained.values())
    assert invoke(["health", "apply", g2, *args]).exit_code == 0
    assert not any(n.reason for n in parse_show_nodes(ctl.scontrol("show", "node", "-o")[1]).values())


def test_a_leaf_short_of_its_peers_uplinks_is_degraded_and_heals() -> None:
    # every leaf of the generator has two cables to each of two spines: four up
    fab = fat_tree(units=4, hosts_per_unit=4, rails=1)
    good = discover(fab, None)
    assert good.health == []
    weak = leaves(fab)[0]
    spine = sorted(fab.spines)[0]
    port = next(p for p, (remote, _) in fab.nodes[weak].ports.items() if remote == spine)
    remote_port = fab.nodes[weak].ports[port][1]
    del fab.nodes[weak].ports[port], fab.nodes[spine].ports[remote_port]  # one cable of four down

    broken = discover(fab, good)
    [rec] = broken.health
    parent = next(n.fabric[1] for n in good.nodes if n.fabric[0] == weak)
    assert (rec.kind, rec.id, rec.peer, rec.state) == ("link", weak, parent, "degraded")
    assert rec.reason == "3 of 4 uplinks up (its peers have 4)"
    assert radius(broken) == dict.fromkeys(hosts_of(fab, weak), f"link {weak}>{parent}")
    fresh = discover(fab, None).health  # no previous graph needed to see it
    assert [(r.ref, r.state, r.reason) for r in fresh] == [(rec.ref, rec.state, rec.reason)]
    assert discover(fat_tree(units=4, hosts_per_unit=4, rails=1), broken).health == []
