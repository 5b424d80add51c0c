"""``--provider oci``: ListComputeHosts + ListInstances through the real OCI SDK against a wire-level fake.

The fake (tests/oci_fake_server.py) serves records built from the SDK's own model classes; the expected
tiers, domains and set-aside reasons below are written by hand from the fixture.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

oci = pytest.importorskip("oci", reason="the oci extra is not installed (pip install 'topocast[oci]')")

from oci.core.models import ComputeHost, ComputeHostSummary, Instance  # noqa: E402
from oci_fake_server import FakeOci, oci_config  # noqa: E402

from topocast.errors import ProviderError  # noqa: E402
from topocast.model.graph import load_graph  # noqa: E402
from topocast.providers import ProviderInputs, build_provider  # noqa: E402
from topocast.providers.oci.sdk import connect, imds_get  # noqa: E402
from topocast.renderers import render  # noqa: E402

COMPARTMENT = "ocid1.compartment.oc1..aaaacluster"
TENANCY = "ocid1.tenancy.oc1..aaaafake"  # oci_config's tenancy: the root compartment, where OCI keeps hosts
HPC = "ocid1.computehpcisland.oc1.us-chicago-1.anxxeljrexamplehpcisland0000000000000000000000000000001"
HPC_ID = "hpcisland-2543fe013a6f"  # sha256 of HPC, first 12 hex: an OCID is longer than a Slurm switch name
AD = "Uocm:US-CHICAGO-1-AD-1"


def host(n: int, lb: str | None, nb: str | None, fabric: str | None, instance: str | None) -> Any:
    return ComputeHostSummary(
        id=f"ocid1.computehost.oc1..h{n}", availability_domain=AD, compartment_id=TENANCY,
        local_block_id=lb, network_block_id=nb, hpc_island_id=HPC, gpu_memory_fabric_id=fabric,
        instance_id=instance, shape="BM.GPU.GB200.4", lifecycle_state="ACTIVE", health="HEALTHY",
    )  # fmt: skip


def instance(n: str, name: str, state: str = "RUNNING", tags: dict[str, str] | None = None) -> Any:
    return Instance(
        id=f"ocid1.instance.oc1..{n}", display_name=name, compartment_id=COMPARTMENT, availability_domain=AD,
        lifecycle_state=state, shape="BM.GPU.GB200.4", region="us-chicago-1",
        freeform_tags=tags or {"cluster": "c1"},
    )  # fmt: skip


def cluster() -> FakeOci:
    hosts = [
        host(1, "lb1", "nb1", "gmf-a", "ocid1.instance.oc1..i1"),
        host(2, "lb1", "nb1", "gmf-a", "ocid1.instance.oc1..i2"),
        host(3, "lb2", "nb1", "gmf-a", "ocid1.instance.oc1..i3"),
        host(4, "lb3", "nb2", "gmf-b", "ocid1.instance.oc1..i4"),
        host(5, "lb3", None, "gmf-b", "ocid1.instance.oc1..i5"),  # no network block: kept without topology
        host(6, "lb3", "nb2", None, None),  # a free host: no instance
        host(7, "lb3", "nb2", None, "ocid1.instance.oc1..other"),  # another team's instance, not listed
    ]
    instances = [
        instance("i1", "gpu-01"), instance("i2", "gpu-02"), instance("i3", "gpu-03"), instance("i4", "gpu-04"),
        instance("i5", "gpu-05"), instance("login", "login-1"), instance("old", "gpu-99", state="TERMINATED"),
    ]  # fmt: skip
    racks = {1: "R01", 2: "R01", 3: "R02", 4: "R07"}
    details = {
        f"ocid1.computehost.oc1..h{n}": ComputeHost(
            id=f"ocid1.computehost.oc1..h{n}", additional_data={"locationDetails": {"rack": rack}}
        )
        for n, rack in racks.items()
    }
    return FakeOci(hosts, instances, details)


@pytest.fixture
def fake() -> Iterator[FakeOci]:
    with cluster() as f:
        yield f


def inputs(fake: FakeOci, tmp_path: Path, **options: Any) -> ProviderInputs:
    base = {"compartment": COMPARTMENT, "config_file": str(oci_config(tmp_path)), "endpoint": fake.url}
    services = {"oci": connect, "oci-imds": imds_get}
    return ProviderInputs("c1", {**base, **options}, services.__getitem__, read_text=lambda p: Path(p).read_text())


def test_golden_graph_tiers_domains_racks_and_the_host_without_a_network_block(fake: FakeOci, tmp_path: Path) -> None:
    result = build_provider("oci", inputs(fake, tmp_path, page_size=2)).discover_full(None)
    g = result.graph
    nodes = {n.name: n for n in g.nodes}
    assert sorted(nodes) == ["gpu-01", "gpu-02", "gpu-03", "gpu-04", "gpu-05", "login-1"]
    assert nodes["gpu-01"].fabric == ["lb1", "nb1", HPC_ID] == nodes["gpu-02"].fabric
    assert nodes["gpu-03"].fabric == ["lb2", "nb1", HPC_ID]
    assert nodes["gpu-04"].fabric == ["lb3", "nb2", HPC_ID]
    assert (nodes["gpu-01"].accelerator, nodes["gpu-01"].subdomain) == ("gmf-a", "gmf-a.R01")
    assert (nodes["gpu-03"].accelerator, nodes["gpu-03"].subdomain) == ("gmf-a", "gmf-a.R02")
    assert (nodes["gpu-04"].accelerator, nodes["gpu-04"].subdomain) == ("gmf-b", "gmf-b.R07")
    assert nodes["gpu-01"].id == "ocid1.instance.oc1..i1" and nodes["gpu-01"].zone == AD
    assert nodes["gpu-01"].labels["oci.oraclecloud.com/hpc-island"] == HPC  # the full OCID stays traceable
    assert nodes["gpu-05"].fabric == [] and nodes["login-1"].fabric == []
    assert g.unplaced == {
        "gpu-05": "compute host ocid1.computehost.oc1..h5 reports no network_block_id; kept without topology"
    }
    assert any("1 instance(s) have no compute host" in w and "login-1" in w for w in result.warnings)
    assert nodes["gpu-05"].subdomain is None  # its GetComputeHost answers 404: no rack, its place stays
    assert any(w.startswith("1 host(s) without a rack (no sub-domain): OCI GetComputeHost") for w in result.warnings)
    # 7 hosts and 7 instances at 2 a page: 4 pages each; the rack of the 4 GPU-fabric hosts of listed instances
    assert result.api_calls == {"ListComputeHosts": 4, "ListInstances": 4, "GetComputeHost": 5}
    pages = [q.get("page", [None])[0] for op, q in fake.calls if op == "ListComputeHosts"]
    assert pages == [None, "2", "4", "6"]


def test_tags_select_the_cluster_and_name_from_a_tag(fake: FakeOci, tmp_path: Path) -> None:
    fake.instances.append(instance("i9", "x", tags={"cluster": "c2", "slurm": "gpu-09"}))
    fake.hosts.append(host(9, "lb9", "nb9", None, "ocid1.instance.oc1..i9"))
    opts = {"tags": {"cluster": "c2"}, "name_from": "tag:slurm", "racks": False}
    g = build_provider("oci", inputs(fake, tmp_path, **opts)).discover_full(None).graph
    assert [(n.name, n.fabric) for n in g.nodes] == [("gpu-09", ["lb9", "nb9", HPC_ID])]


WANTED = "topocast/wanted-name"


def test_two_instances_with_one_display_name_are_named_by_ocid_and_wait(fake: FakeOci, tmp_path: Path) -> None:
    fake.instances.append(instance("i6", "gpu-02"))  # a second instance calls itself gpu-02
    fake.hosts.append(host(8, "lb1", "nb1", None, "ocid1.instance.oc1..i6"))
    result = build_provider("oci", inputs(fake, tmp_path)).discover_full(None)
    nodes = {n.name: n for n in result.graph.nodes}
    assert sorted(nodes) == [
        "gpu-01", "gpu-03", "gpu-04", "gpu-05", "login-1", "ocid1.instance.oc1..i2", "ocid1.instance.oc1..i6"
    ]  # fmt: skip
    assert nodes["ocid1.instance.oc1..i2"].labels[WANTED] == "gpu-02" == nodes["ocid1.instance.oc1..i6"].labels[WANTED]
    assert nodes["ocid1.instance.oc1..i2"].fabric == ["lb1", "nb1", HPC_ID] == nodes["ocid1.instance.oc1..i6"].fabric
    assert nodes["ocid1.instance.oc1..i2"].id == "ocid1.instance.oc1..i2"
    assert (nodes["ocid1.instance.oc1..i2"].accelerator, nodes["ocid1.instance.oc1..i2"].subdomain) == (
        "gmf-a", "gmf-a.R01"
    )  # fmt: skip
    # the others as in the golden graph
    assert nodes["gpu-01"].fabric == ["lb1", "nb1", HPC_ID] and nodes["gpu-01"].subdomain == "gmf-a.R01"
    assert nodes["gpu-04"].fabric == ["lb3", "nb2", HPC_ID] and WANTED not in nodes["gpu-01"].labels
    assert result.graph.unplaced == {
        "gpu-05": "compute host ocid1.computehost.oc1..h5 reports no network_block_id; kept without topology"
    }
    assert (
        "2 instance(s) share their name with another machine; named by ID until it is free (name_from="
        "display_name): ocid1.instance.oc1..i2, ocid1.instance.oc1..i6" in result.warnings
    )


def test_the_previous_holder_keeps_its_name_and_the_newcomer_takes_it_once_it_is_gone(
    fake: FakeOci, tmp_path: Path
) -> None:
    provider = build_provider("oci", inputs(fake, tmp_path, racks=False))
    before = provider.discover_full(None).graph
    fake.instances.append(instance("i6", "gpu-02"))  # a replacement reusing the name of a running instance
    fake.hosts.append(host(8, "lb1", "nb1", None, "ocid1.instance.oc1..i6"))
    during = provider.discover_full(before).graph
    names = {n.id: (n.name, n.labels.get(WANTED)) for n in during.nodes}
    assert names["ocid1.instance.oc1..i2"] == ("gpu-02", None)
    assert names["ocid1.instance.oc1..i6"] == ("ocid1.instance.oc1..i6", "gpu-02")
    fake.instances[1] = instance("i2", "gpu-02", state="TERMINATED")
    after = provider.discover_full(during).graph
    names = {n.id: (n.name, n.labels.get(WANTED)) for n in after.nodes}
    assert names["ocid1.instance.oc1..i6"] == ("gpu-02", None) and "ocid1.instance.oc1..i2" not in names


def test_an_instance_without_its_name_tag_is_named_by_its_ocid(fake: FakeOci, tmp_path: Path) -> None:
    fake.instances.append(instance("i9", "x", tags={"cluster": "c2", "slurm": "gpu-09"}))
    fake.instances.append(instance("i10", "y", tags={"cluster": "c2"}))  # no slurm tag
    fake.hosts.append(host(9, "lb9", "nb9", None, "ocid1.instance.oc1..i9"))
    fake.hosts.append(host(10, "lb9", "nb9", None, "ocid1.instance.oc1..i10"))
    opts = {"tags": {"cluster": "c2"}, "name_from": "tag:slurm", "racks": False}
    result = build_provider("oci", inputs(fake, tmp_path, **opts)).discover_full(None)
    assert [(n.name, n.fabric, n.labels.get(WANTED)) for n in result.graph.nodes] == [
        ("ocid1.instance.oc1..i10", ["lb9", "nb9", HPC_ID], None), ("gpu-09", ["lb9", "nb9", HPC_ID], None)
    ]  # fmt: skip
    assert result.graph.unplaced == {}
    assert "1 instance(s) have no tag:slurm (name_from=tag:slurm): ocid1.instance.oc1..i10" in result.warnings


@pytest.mark.parametrize(
    ("fail", "expected"),
    [
        ({"ListComputeHosts": (401, "NotAuthenticated")}, "OCI ListComputeHosts: HTTP 401 NotAuthenticated (check"),
        ({"ListInstances": (404, "NotAuthorizedOrNotFound")}, "OCI ListInstances: HTTP 404 NotAuthorizedOrNotFound"),
    ],
)
def test_service_errors_are_one_line(fake: FakeOci, tmp_path: Path, fail: dict[str, Any], expected: str) -> None:
    fake.fail.update(fail)
    with pytest.raises(ProviderError) as info:
        build_provider("oci", inputs(fake, tmp_path)).discover_full(None)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)


def test_a_repeated_page_token_is_an_error_not_a_loop(fake: FakeOci, tmp_path: Path) -> None:
    fake.repeat_token["ListComputeHosts"] = "2"
    with pytest.raises(ProviderError, match="returned page token '2' twice"):
        build_provider("oci", inputs(fake, tmp_path, page_size=2)).discover_full(None)


def test_bad_options_and_missing_credentials_are_one_line(fake: FakeOci, tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match=r"^provider 'oci': option 'page_size' Input should be greater"):
        build_provider("oci", inputs(fake, tmp_path, page_size=0))
    with pytest.raises(ProviderError, match=r"^provider 'oci': option 'compartmnt' is not an option"):
        build_provider("oci", inputs(fake, tmp_path, compartmnt="x"))
    with pytest.raises(ProviderError, match="source api needs the option compartment"):
        build_provider("oci", ProviderInputs("c1", {}))
    missing = inputs(fake, tmp_path, config_file=str(tmp_path / "nope"))
    with pytest.raises(ProviderError, match=r"^OCI credentials \(config\): .*nope"):
        build_provider("oci", missing).discover_full(None)


def test_unreachable_endpoint_is_one_line(tmp_path: Path) -> None:
    dead = FakeOci()
    with dead:
        url = dead.url
    opts = {"compartment": COMPARTMENT, "config_file": str(oci_config(tmp_path)), "endpoint": url, "attempts": 2}
    services = {"oci": connect}
    provider = build_provider("oci", ProviderInputs("c1", opts, services.__getitem__))
    with pytest.raises(ProviderError, match="OCI ListInstances: cannot reach the endpoint"):
        provider.discover_full(None)


# ----- IMDS -----------------------------------------------------------------------------------------------


def rdma(lb: str, nb: str, island: str, fabric: str | None = None) -> str:
    data = {"customerLocalBlock": lb, "customerNetworkBlock": nb, "customerHPCIslandId": island}
    if fabric:
        data["customerGpuMemoryFabric"] = fabric
    return json.dumps(data)


def test_imds_pdsh_file_of_every_node(tmp_path: Path) -> None:
    text = "\n".join([
        f"gpu-01: {rdma('lb1', 'nb1', 'isl1', 'gmf-a')}",
        f"gpu-02: {rdma('lb2', 'nb1', 'isl1', 'gmf-a')}",
        "gpu-03: curl: (7) Failed to connect to 169.254.169.254",
        'gpu-04: {"customerLocalBlock": "lb2", "customerHPCIslandId": "isl1"}',
        "garbage without a colon",
    ])  # fmt: skip
    path = tmp_path / "rdma.txt"
    path.write_text(text + "\n")
    opts = {"source": "imds", "input": str(path)}
    g = (
        build_provider("oci", ProviderInputs("c1", opts, read_text=lambda p: Path(p).read_text()))
        .discover_full(None)
        .graph
    )
    nodes = {n.name: n for n in g.nodes}
    assert nodes["gpu-01"].fabric == ["lb1", "nb1", "isl1"] and nodes["gpu-01"].accelerator == "gmf-a"
    assert nodes["gpu-02"].fabric == ["lb2", "nb1", "isl1"]
    assert nodes["gpu-03"].fabric == [] and nodes["gpu-04"].fabric == []
    assert g.unplaced["gpu-03"].startswith("rdmaTopologyData is not JSON")
    assert g.unplaced["gpu-04"] == "rdmaTopologyData reports no customerNetworkBlock; kept without topology"
    assert g.unplaced["record 'garbage without a colon'"] == f"{path}:5: expected 'node: <rdmaTopologyData JSON>'"


def test_imds_this_node_through_the_metadata_service(tmp_path: Path) -> None:
    with FakeOci(rdma=json.loads(rdma("lb1", "nb1", "isl1", "gmf-a")), instance_id="ocid1.instance.oc1..me") as f:
        opts = {"source": "imds", "imds_url": f.url + "/opc/v2", "hostname": "gpu-07"}
        services = {"oci-imds": imds_get}
        g = build_provider("oci", ProviderInputs("c1", opts, services.__getitem__)).discover_full(None).graph
    assert [(n.name, n.id, n.fabric, n.accelerator) for n in g.nodes] == [
        ("gpu-07", "ocid1.instance.oc1..me", ["lb1", "nb1", "isl1"], "gmf-a")
    ]


def test_imds_unreachable_is_one_line() -> None:
    dead = FakeOci()
    with dead:
        url = dead.url
    services = {"oci-imds": imds_get}
    opts = {"source": "imds", "imds_url": url + "/opc/v2", "hostname": "n1"}
    with pytest.raises(ProviderError, match=r"^OCI IMDS http://127\.0\.0\.1:\d+/opc/v2/instance/id: cannot reach"):
        build_provider("oci", ProviderInputs("c1", opts, services.__getitem__)).discover_full(None)


# ----- the CLI and every format ---------------------------------------------------------------------------


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "topocast.cli", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.slow  # a subprocess that imports the SDK: several seconds
def test_discover_from_the_cli_then_render_every_format(fake: FakeOci, tmp_path: Path) -> None:
    config = oci_config(tmp_path)
    run = cli(
        "discover", "--provider", "oci", "--cluster", "c1", "--option", f"compartment={COMPARTMENT}",
        "--option", f"config_file={config}", "--option", f"endpoint={fake.url}", "--option", "page_size=3",
        "--out", str(tmp_path / "graph.json"), cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "6 node(s), 2 without topology, 1 set aside" in run.stderr
    assert "gpu-05: compute host ocid1.computehost.oc1..h5 reports no network_block_id" in run.stderr
    graph = load_graph(tmp_path / "graph.json")
    tree = render(graph, "slurm-tree").content
    assert f"SwitchName={HPC_ID} Switches=nb[1-2]" in tree
    assert "SwitchName=lb1 Nodes=gpu-[01-02]" in tree and "no-topology" not in tree  # gpu-05, login-1: left out
    # a block per rack of each GPU memory fabric (the sub-domain); gpu-05's rack is unknown: its fabric
    assert render(graph, "slurm-block").content.splitlines() == [
        "BlockName=gmf-a.R01 Nodes=gpu-[01-02]",
        "BlockName=gmf-a.R02 Nodes=gpu-03",
        "BlockName=gmf-b Nodes=gpu-05",
        "BlockName=gmf-b.R07 Nodes=gpu-04",
        "BlockSizes=2,4",
    ]  # fmt: skip
    for fmt in ("slurm-yaml", "k8s-labels", "graph", "html"):
        assert render(graph, fmt).content


def test_discover_errors_from_the_cli_are_one_line_without_traceback(fake: FakeOci, tmp_path: Path) -> None:
    fake.fail["ListComputeHosts"] = (401, "NotAuthenticated")
    run = cli(
        "discover", "--provider", "oci", "--option", f"compartment={COMPARTMENT}",
        "--option", f"config_file={oci_config(tmp_path)}", "--option", f"endpoint={fake.url}", cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        "topocast: error: OCI ListComputeHosts: HTTP 401 NotAuthenticated (check the API key / instance principal): "
        "ListComputeHosts failed (fake)"
    ]


@pytest.mark.slurm
def test_tree_loads_in_real_slurmctld(fake: FakeOci, tmp_path: Path, slurm_controller_factory: Any) -> None:
    graph = build_provider("oci", inputs(fake, tmp_path)).discover_full(None).graph
    ctl = slurm_controller_factory(graph.node_names(), render(graph, "slurm-tree").content)
    topo = ctl.show_topology()
    assert {"lb1", "lb2", "lb3", "nb1", "nb2", HPC_ID} <= set(topo)


@pytest.mark.slurm_current
def test_block_and_yaml_load_in_slurm_26(fake: FakeOci, tmp_path: Path, sid_controller_factory: Any) -> None:
    graph = build_provider("oci", inputs(fake, tmp_path)).discover_full(None).graph
    ctl = sid_controller_factory(
        graph.node_names(), render(graph, "slurm-block").content, topology_plugin="topology/block"
    )
    assert {name: info.nodes for name, info in ctl.show_blocks().items()} == {
        "gmf-a.R01": ("gpu-01", "gpu-02"), "gmf-a.R02": ("gpu-03",), "gmf-b": ("gpu-05",), "gmf-b.R07": ("gpu-04",)
    }  # fmt: skip
    yml = render(graph, "slurm-yaml").content
    ctl2 = sid_controller_factory(graph.node_names(), yml, topology_file="topology.yaml")
    assert ctl2.show_topology_text()


def test_hosts_are_listed_in_the_tenancy_per_availability_domain_not_in_the_instances_compartment(
    fake: FakeOci, tmp_path: Path
) -> None:
    fake.parents[COMPARTMENT] = TENANCY
    g = build_provider("oci", inputs(fake, tmp_path, racks=False)).discover_full(None).graph
    assert [n.name for n in g.nodes if n.fabric] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    listings = [q for op, q in fake.calls if op == "ListComputeHosts"]
    assert [(q["compartmentId"], q["availabilityDomain"], q["computeHostInSubtree"]) for q in listings] == [
        ([TENANCY], [AD], ["true"])
    ]
    assert {q["compartmentId"][0] for op, q in fake.calls if op == "ListInstances"} == {COMPARTMENT}


def test_the_fake_keeps_hosts_where_oci_does(fake: FakeOci, tmp_path: Path) -> None:
    """The rule the provider must follow: the instances' compartment lists no compute host."""
    reader = connect(build_provider("oci", inputs(fake, tmp_path)).options)
    assert reader.tenancy == TENANCY
    assert reader.compute_hosts(COMPARTMENT, AD, 100) == []
    assert len(reader.compute_hosts(TENANCY, AD, 100)) == 7


def test_a_host_compartment_option_replaces_the_tenancy(fake: FakeOci, tmp_path: Path) -> None:
    fake.parents[COMPARTMENT] = TENANCY
    for h in fake.hosts:
        h.compartment_id = "ocid1.compartment.oc1..aaaahosts"
    fake.parents["ocid1.compartment.oc1..aaaahosts"] = TENANCY
    opts = {"racks": False, "host_compartment": "ocid1.compartment.oc1..aaaahosts"}
    g = build_provider("oci", inputs(fake, tmp_path, **opts)).discover_full(None).graph
    assert [n.name for n in g.nodes if n.fabric] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
    # the default, the tenancy with its subtree, finds them too
    g = build_provider("oci", inputs(fake, tmp_path, racks=False)).discover_full(None).graph
    assert [n.name for n in g.nodes if n.fabric] == ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]


def test_compute_hosts_are_read_only_for_kept_instances(fake: FakeOci, tmp_path: Path) -> None:
    fake.instances += [
        instance("i10", "gpu-10", state="TERMINATING"),
        instance("i11", "gpu-11", tags={"cluster": "c2"}),
    ]
    fake.hosts += [host(10, "lb1", "nb1", "gmf-a", "ocid1.instance.oc1..i10"),
                   host(11, "lb1", "nb1", "gmf-a", "ocid1.instance.oc1..i11")]  # fmt: skip
    result = build_provider("oci", inputs(fake, tmp_path, tags={"cluster": "c1"})).discover_full(None)
    # h1-h5 only: not h10 (its instance is terminating) nor h11 (its instance carries another cluster's tag)
    assert result.api_calls["GetComputeHost"] == 5
    assert not {"gpu-10", "gpu-11"} & {n.name for n in result.graph.nodes}


def test_a_fresh_token_with_the_same_items_is_refused_at_the_second_page(fake: FakeOci, tmp_path: Path) -> None:
    fake.endless["ListComputeHosts"] = "same-items"
    with pytest.raises(ProviderError, match=r"^OCI ListComputeHosts: item 'ocid1\.computehost\.oc1\.\.h1' came on two "
                       r"pages \(page 2\): the listing is not advancing"):  # fmt: skip
        build_provider("oci", inputs(fake, tmp_path, page_size=2)).discover_full(None)
    assert [op for op, _ in fake.calls].count("ListComputeHosts") == 2


def test_an_empty_page_ends_the_listing_whatever_token_comes_with_it(fake: FakeOci, tmp_path: Path) -> None:
    fake.endless["ListComputeHosts"] = "empty"
    build_provider("oci", inputs(fake, tmp_path, page_size=2)).discover_full(None)
    assert [op for op, _ in fake.calls].count("ListComputeHosts") == 1


def test_fresh_items_forever_stop_at_the_listing_bound(
    fake: FakeOci, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import topocast.safeio.paging

    monkeypatch.setattr(topocast.safeio.paging, "MAX_LISTED_ITEMS", 50)
    fake.endless["ListComputeHosts"] = "fresh-items"
    with pytest.raises(ProviderError, match=r"^OCI ListComputeHosts: more than 50 items listed"):
        build_provider("oci", inputs(fake, tmp_path, page_size=2)).discover_full(None)
    assert [op for op, _ in fake.calls].count("ListComputeHosts") == 26  # 25 pages of 2 fit, the 26th does not
