"""The ``azure`` provider through the real azure-mgmt-compute client against a fake ARM built from its models.

Fixture: resource group ``rg-hpc`` with scale set ``gpu`` (gpu-000..007; placement groups pg-a: 0-3,
pg-b: 4-7), scale set ``cpu`` (cpu-000, cpu-001 in pg-c) and two availability-set VMs (legacy-001,
-002 in avset-a); NVLink records from ``nvidia-smi -q`` text: gpu-000..003 in clique 1, gpu-004..007
in clique 2, except gpu-005 whose GPUs report cliques 2 and 3. Every expectation below is written by
hand from that description.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

pytest.importorskip("azure.mgmt.compute", reason="the 'azure' extra is not installed")

from azure_fake_arm import FakeArm, availability_set_vm, scale_set_vm
from cli_runner import invoke

from topocast.errors import ProviderError
from topocast.providers import ProviderInputs, build_provider
from topocast.providers.azure.sdk import compute_client
from topocast.providers.nvlink import build_record, host_domains
from topocast.providers.sharp import parse_sharp_topology
from topocast.renderers import RENDERERS, RenderOptions, render, render_many

UUID = "4f0c5b7e-1111-4c6a-9e55-0a1b2c3d4e5f"
GPU = """GPU 0000000{bus}:01:00.0
    Product Name                          : NVIDIA GB200
    Fabric
        State                             : Completed
        Status                            : Success
        CliqueId                          : {clique}
        ClusterUUID                       : {uuid}
"""
IBSTAT = """CA 'mlx5_ib0'
	CA type: MT4129
	Number of ports: 1
	Port 1:
		State: Active
		Port GUID: 0x00155dfffd34{n:04x}
		Link layer: InfiniBand
"""
OPTIONS = {"subscription_id": "sub-1", "resource_group": "rg-hpc"}


def smi(*cliques: int) -> str:
    head = "==============NVSMI LOG==============\n\nDriver Version : 570.124.06\n"
    return head + "".join(GPU.format(bus=i, clique=c, uuid=UUID) for i, c in enumerate(cliques))


def record(host: str, n: int, *cliques: int) -> bytes:
    return json.dumps(build_record(host, smi(*cliques), IBSTAT.format(n=n)).model_dump()).encode()


def records() -> dict[str, bytes]:
    out = {f"r/gpu-{i:03d}.json": record(f"gpu-{i:03d}", i, 1, 1) for i in range(4)}
    out |= {f"r/gpu-{i:03d}.json": record(f"gpu-{i:03d}", i, 2, 2) for i in (4, 6, 7)}
    out["r/gpu-005.json"] = record("gpu-005", 5, 2, 3)
    out["r/ghost-001.json"] = record("ghost-001", 99, 1)
    out["r/bad.json"] = b"{not json"
    return out


SHARP = (
    "SwitchName=ibsw1 Nodes=" + ",".join(f"0x155dfffd34{i:04x}" for i in range(4)) + "\n"
    "SwitchName=ibsw2 Nodes=" + ",".join(f"0x155dfffd34{i:04x}" for i in range(4, 8)) + "\n"
    "SwitchName=ibsw9 Switches=ibsw1,ibsw2\n"
)


@pytest.fixture
def arm(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeArm]:
    monkeypatch.setenv("AZURE_ACCESS_TOKEN", "fake-token")
    fake = FakeArm(page_size=2)
    fake.scale_sets["rg-hpc"] = {
        "gpu": [scale_set_vm("gpu", i, f"gpu-{i:03d}", "pg-a" if i < 4 else "pg-b") for i in range(8)],
        "cpu": [scale_set_vm("cpu", i, f"cpu-{i:03d}", "pg-c", size="Standard_HB176rs_v4") for i in range(2)],
    }
    fake.vms["rg-hpc"] = [availability_set_vm(f"legacy-{i}", f"legacy-00{i}", "avset-a") for i in (1, 2)]
    with fake:
        yield fake


def discover(arm: FakeArm, uploads: dict[str, bytes], texts: dict[str, str] | None = None, **options: Any) -> Any:
    client = compute_client("sub-1", arm.url)
    inputs = ProviderInputs("hpc", {**OPTIONS, **options}, lambda service: lambda options: client, lambda: uploads,
                            lambda uri: (texts or {})[uri])  # fmt: skip
    return build_provider("azure", inputs).discover_full(None)


def shape(result: Any) -> dict[str, tuple[str | None, list[str], str | None]]:
    return {n.name: (n.id, n.fabric, n.accelerator) for n in result.graph.nodes}


A1, A2 = f"{UUID}.1", f"{UUID}.2"
GOLDEN = {
    **{f"gpu-{i:03d}": (f"gpu_{i}", ["pg-a", "gpu"], A1) for i in range(4)},
    **{f"gpu-{i:03d}": (f"gpu_{i}", ["pg-b", "gpu"], A2) for i in (4, 6, 7)},
    "gpu-005": ("gpu_5", ["pg-b", "gpu"], None),
    "cpu-000": ("cpu_0", ["pg-c", "cpu"], None),
    "cpu-001": ("cpu_1", ["pg-c", "cpu"], None),
    "legacy-001": ("legacy-1", ["avset-a"], None),
    "legacy-002": ("legacy-2", ["avset-a"], None),
}


def test_golden_graph_from_placement_groups_and_nvlink_records(arm: FakeArm) -> None:
    result = discover(arm, records())
    assert shape(result) == GOLDEN
    unplaced = result.graph.unplaced
    assert set(unplaced) == {"gpu-005", "record 'r/bad.json'"}
    assert "2 NVLink domains" in unplaced["gpu-005"] and "kept without a domain" in unplaced["gpu-005"]
    assert "not JSON" in unplaced["record 'r/bad.json'"]
    assert any("ghost-001" in w for w in result.warnings)
    # page size 2: 2 scale sets = 1 page; gpu 8 VMs = 4 pages, cpu 1; 2 standalone VMs = 1
    assert result.api_calls == {"VirtualMachineScaleSets.List": 1, "VirtualMachineScaleSetVMs.List": 5,
                                "VirtualMachines.List": 1}  # fmt: skip
    assert {n.name: n.instance_type for n in result.graph.nodes}["cpu-000"] == "Standard_HB176rs_v4"
    assert {n.name: n.zone for n in result.graph.nodes}["gpu-000"] == "eastus-1"
    listings = [unquote(r) for r in arm.requests if r.split("?")[0].endswith("virtualMachines")]
    # the scale-set VM lists carry $expand; the plain VM list may not (ARM: only with a $filter)
    assert [("$expand=instanceView" in r, "virtualMachineScaleSets/" in r) for r in listings] == [(True, True)] * 5 + [
        (False, False)
    ]


def test_an_unsafe_or_flexible_vm_costs_only_itself(arm: FakeArm) -> None:
    from azure.mgmt.compute import models as m

    arm.scale_sets["rg-hpc"]["gpu"].append(scale_set_vm("gpu", 8, "gpu 008;reboot", "pg-b"))
    flex = availability_set_vm("flex-1", "flex-001", None)
    flex.properties.virtual_machine_scale_set = m.SubResource(
        id="/subscriptions/sub-1/resourceGroups/rg-hpc/providers/Microsoft.Compute/virtualMachineScaleSets/f"
    )
    arm.vms["rg-hpc"].append(flex)
    arm.flexible["rg-hpc"] = {"f"}
    result = discover(arm, records())
    assert {k: v for k, v in shape(result).items() if k != "flex-001"} == GOLDEN
    assert shape(result)["flex-001"] == ("flex-1", [], None)
    assert "left out" in result.graph.unplaced["record 'gpu 008;reboot'"]
    assert any(w.startswith("1 VM(s) of flexible scale sets") for w in result.warnings)


WANTED = "topocast/wanted-name"


def test_two_vms_with_one_computer_name_are_named_by_vm_name_and_wait_one_without_by_its_vm_name(
    arm: FakeArm,
) -> None:
    arm.scale_sets["rg-hpc"]["spare"] = [scale_set_vm("spare", 0, "gpu-001", "pg-d")]  # a second gpu-001
    arm.scale_sets["rg-hpc"]["gpu"].append(scale_set_vm("gpu", 8, "", "pg-b"))  # no computerName
    result = discover(arm, records())
    got = shape(result)
    assert {k: v for k, v in got.items() if k not in ("gpu_1", "spare_0", "gpu_8")} == {
        k: v for k, v in GOLDEN.items() if k != "gpu-001"
    }
    # the record uploaded as gpu-001 cannot tell the two apart: neither gets its NVLink domain
    assert got["gpu_1"] == ("gpu_1", ["pg-a", "gpu"], None)
    assert got["spare_0"] == ("spare_0", ["pg-d", "spare"], None)
    assert got["gpu_8"] == ("gpu_8", ["pg-b", "gpu"], None)
    labels = {n.name: n.labels.get(WANTED) for n in result.graph.nodes}
    assert [labels[n] for n in ("gpu_1", "spare_0", "gpu_8", "gpu-000")] == ["gpu-001", "gpu-001", None, None]
    assert set(result.graph.unplaced) == {"gpu-005", "record 'r/bad.json'"}
    assert "1 VM(s) have no computerName (name_from=computer-name): gpu_8" in result.warnings
    assert (
        "2 VM(s) share their name with another machine; named by ID until it is free (name_from=computer-name): "
        "gpu_1, spare_0" in result.warnings
    )
    assert [w for w in result.warnings if "does not list" in w] == [
        "1 NVLink record(s) for hosts the compute API does not list: ghost-001"
    ]


def test_the_previous_holder_of_a_computer_name_keeps_it(arm: FakeArm) -> None:
    client = compute_client("sub-1", arm.url)
    provider = build_provider("azure", ProviderInputs("hpc", OPTIONS, lambda service: lambda options: client, dict))
    before = provider.discover_full(None).graph
    arm.scale_sets["rg-hpc"]["spare"] = [scale_set_vm("spare", 0, "gpu-001", "pg-d")]
    names = {n.id: (n.name, n.labels.get(WANTED)) for n in provider.discover_full(before).graph.nodes}
    assert names["gpu_1"] == ("gpu-001", None) and names["spare_0"] == ("spare_0", "gpu-001")


def test_sharp_tree_replaces_the_placement_tiers_for_the_hosts_it_knows(arm: FakeArm) -> None:
    result = discover(arm, records(), {"sharp.txt": SHARP}, sharp_uri="sharp.txt")
    got = shape(result)
    assert {h: got[h][1] for h in got if h.startswith("gpu")} == {
        **{f"gpu-{i:03d}": ["ibsw1", "ibsw9"] for i in range(4)},
        **{f"gpu-{i:03d}": ["ibsw2", "ibsw9"] for i in range(4, 8)},
    }
    assert got["cpu-000"][1] == ["pg-c", "cpu"] and got["gpu-004"][2] == A2
    assert any("SHARP topology placed 8 of 12" in w for w in result.warnings)


def test_a_broken_sharp_file_fails_in_one_line(arm: FakeArm) -> None:
    with pytest.raises(ProviderError, match=r"^sharp.txt:2: expected 'SwitchName=NAME Nodes=...\|Switches=...', got"):
        discover(arm, records(), {"sharp.txt": "SwitchName=ibsw1 Nodes=0x1\nnonsense here\n"}, sharp_uri="sharp.txt")


def test_sharp_parser_rules() -> None:
    topo = parse_sharp_topology("SwitchName=a Nodes=0x1,0x2\nSwitchName=b Nodes=0x2\nSwitchName=s Switches=a,b\n")
    assert topo.paths == {"0x1": ["a", "s"]} and "0x2" in topo.ambiguous
    with pytest.raises(ProviderError, match=r"^f:3: switch 'a' has two parents \('s' and 't'\)$"):
        parse_sharp_topology("SwitchName=a Nodes=0x1\nSwitchName=s Switches=a\nSwitchName=t Switches=a\n", "f")
    with pytest.raises(ProviderError, match=r"^f:2: switch 'a' is defined twice"):
        parse_sharp_topology("SwitchName=a Nodes=0x1\nSwitchName=a Nodes=0x2\n", "f")


def test_records_that_disagree_for_one_host_set_it_aside() -> None:
    got = host_domains(
        {"new": record("gpu-001", 1, 1), "old": record("gpu-001", 1, 2), "other": record("gpu-002", 2, 2)}
    )
    assert got.domains == {"gpu-002": A2}
    assert got.set_aside["gpu-001"].startswith(f"records disagree: new says '{A1}', old says '{A2}'")


@pytest.mark.parametrize(
    ("token", "group", "endpoint", "message"),
    [
        (
            "wrong",
            "rg-hpc",
            None,
            "authentication failed (401 InvalidAuthenticationToken: The access token is invalid.)",
        ),
        (
            "fake-token",
            "rg-missing",
            None,
            "resource group 'rg-missing' of subscription sub-1 not found (404 ResourceGroupNotFound",
        ),
        ("fake-token", "rg-hpc", "http://example.com", "plain http is allowed only for a loopback address"),
    ],
)
def test_errors_are_one_line(arm: FakeArm, monkeypatch: pytest.MonkeyPatch, token: str, group: str,
                             endpoint: str | None, message: str) -> None:  # fmt: skip
    monkeypatch.setenv("AZURE_ACCESS_TOKEN", token)
    with pytest.raises(ProviderError) as info:
        client = compute_client("sub-1", endpoint or arm.url)
        build_provider(
            "azure", ProviderInputs("hpc", {**OPTIONS, "resource_group": group}, lambda s: lambda o: client)
        ).discover_full(None)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_fresh_next_link_with_the_same_items_is_refused_at_the_second_page(arm: FakeArm) -> None:
    arm.same_items_forever = True
    # the item is named by its ARM resource ID (the scale set cpu's), cut to the line's bound
    with pytest.raises(ProviderError, match=r"^azure: VirtualMachineScaleSets\.List: item '/subscriptions/sub-1/"
                       r"resourceGroups/rg-hpc/providers/Microsoft\.Compute/virtualMa' came on two pages "
                       r"\(page 2\): the listing is not advancing"):  # fmt: skip
        discover(arm, records())
    assert len(arm.requests) == 2


def test_options_are_validated_in_one_line() -> None:
    with pytest.raises(ProviderError, match=r"^provider 'azure': option 'subscription_id' is required$"):
        build_provider("azure", ProviderInputs("hpc", {"resource_group": "rg"}))
    unknown = r"^provider 'azure': option 'colour' is not an option of this provider \(options: endpoint, "
    with pytest.raises(ProviderError, match=unknown):
        build_provider("azure", ProviderInputs("hpc", {**OPTIONS, "colour": "blue"}))


def test_renders_to_every_format(arm: FakeArm) -> None:
    graph = discover(arm, records()).graph
    artifacts = render_many(graph, list(RENDERERS))
    assert [a.format for a in artifacts] == list(RENDERERS)
    assert all(a.content and a.node_count for a in artifacts if a.format != "slurm-block")
    # two NVLink domains of 4 and 3 hosts (gpu-005 lost its domain); hosts without a domain get no block
    assert render(graph, "slurm-block", RenderOptions(slurm_version="26.05")).content == (
        f"BlockName={A1} Nodes=gpu-[000-003]\nBlockName={A2} Nodes=gpu-[004,006-007]\nBlockSizes=4,8\n"
    )


@pytest.mark.slurm
def test_tree_is_loaded_by_slurmctld_22_05(arm: FakeArm, slurm_controller_factory: Any) -> None:
    graph = discover(arm, records()).graph
    tree = render(graph, "slurm-tree").content
    ctl = slurm_controller_factory([n.name for n in graph.nodes], tree)
    shown = ctl.show_topology()
    leaves = {sw: sorted(info.nodes) for sw, info in shown.items() if info.level == 0}
    assert leaves == {
        "pg-a": [f"gpu-00{i}" for i in range(4)],
        "pg-b": [f"gpu-00{i}" for i in range(4, 8)],
        "pg-c": ["cpu-000", "cpu-001"],
        "avset-a": ["legacy-001", "legacy-002"],
    }


@pytest.mark.slurm_current
def test_block_is_loaded_by_slurmctld_26_05(arm: FakeArm, sid_controller_factory: Any) -> None:
    graph = discover(arm, records()).graph
    block = render(graph, "slurm-block", RenderOptions(slurm_version="26.05")).content
    ctl = sid_controller_factory([n.name for n in graph.nodes], block, topology_plugin="topology/block")
    shown = sorted(sorted(b.nodes) for b in ctl.show_blocks().values() if b.nodes)
    assert [f"gpu-00{i}" for i in range(4)] in shown and ["gpu-004", "gpu-006", "gpu-007"] in shown


def test_cli_discover_against_the_fake(arm: FakeArm, tmp_path: Path) -> None:
    files = []
    for uri, data in records().items():
        path = tmp_path / Path(uri).name
        path.write_bytes(data)
        files += ["--input", path]
    args = ["discover", "--provider", "azure", "--cluster", "hpc", "--option", "subscription_id=sub-1",
            "--option", "resource_group=rg-hpc", "--option", f"endpoint={arm.url}", *files]  # fmt: skip
    res = invoke(args, {"AZURE_ACCESS_TOKEN": "fake-token"})
    assert res.exit_code == 0, res.output
    graph = json.loads(res.stdout)
    assert len(graph["nodes"]) == 12 and "gpu-005" in graph["unplaced"]
    assert "topocast: 12 node(s)" in res.stderr
    bad = invoke(args, {"AZURE_ACCESS_TOKEN": "wrong"})
    assert bad.exit_code != 0 and "Traceback" not in bad.output
    assert bad.stderr.strip().count("\n") == 0 and "authentication failed" in bad.stderr


SUB_A, SUB_B = "7a1e0c3e-0000-4000-8000-00000000000a", "7a1e0c3e-0000-4000-8000-00000000000b"


def gb300(arm: FakeArm) -> None:
    """A Flexible scale set ``nd`` of 4 GB300 VMs in Interconnect Group ``ig-1``: subgroups A (nd-0, nd-1), B."""
    from azure_fake_arm import interconnect_vm

    arm.flexible["rg-hpc"] = {"nd"}
    arm.vms["rg-hpc"] += [
        interconnect_vm(f"nd-vm{i}", f"nd-{i}", "nd", "ig-1", SUB_A if i < 2 else SUB_B) for i in range(4)
    ]


def test_a_flexible_scale_set_is_read_through_the_vm_api_with_its_interconnect_subgroups(arm: FakeArm) -> None:
    gb300(arm)
    result = discover(arm, records())
    got = shape(result)
    assert {k: v for k, v in got.items() if not k.startswith("nd-")} == GOLDEN
    assert {k: v for k, v in got.items() if k.startswith("nd-")} == {
        "nd-0": ("nd-vm0", ["ig-1"], SUB_A),
        "nd-1": ("nd-vm1", ["ig-1"], SUB_A),
        "nd-2": ("nd-vm2", ["ig-1"], SUB_B),
        "nd-3": ("nd-vm3", ["ig-1"], SUB_B),
    }
    paths = [unquote(r).split("api-version")[0] for r in arm.requests]
    assert not any("virtualMachineScaleSets/nd/" in p for p in paths)  # the Uniform-only API is never asked
    filtered = [unquote(r) for r in arm.requests if "$filter" in r]
    assert len(filtered) == 1 and "virtualMachineScaleSets/nd'" in filtered[0] and "$expand=instanceView" in filtered[0]


def test_the_interconnect_subgroup_wins_over_a_disagreeing_nvlink_record_and_the_disagreement_is_noted(
    arm: FakeArm,
) -> None:
    gb300(arm)
    uploads = {
        **records(),
        "r/nd-0.json": record("nd-0", 20, 5, 5),
        "r/nd-1.json": record("nd-1", 21, 6, 6),  # the same subgroup as nd-0, another NVLink clique
    }
    result = discover(arm, uploads)
    nodes = {n.name: n for n in result.graph.nodes}
    assert nodes["nd-0"].accelerator == SUB_A == nodes["nd-1"].accelerator
    assert set(result.graph.notes) == {"nd-0", "nd-1"}
    assert "holds hosts of 2 NVLink record domains" in result.graph.notes["nd-1"]
    assert f"{UUID}.6" in result.graph.notes["nd-1"]


def test_one_scale_set_that_cannot_be_read_sets_only_its_own_vms_aside(arm: FakeArm) -> None:
    first = discover(arm, records())
    arm.forbidden.add("cpu")
    client = compute_client("sub-1", arm.url)
    inputs = ProviderInputs("hpc", OPTIONS, lambda service: lambda options: client, records, lambda uri: "")
    result = build_provider("azure", inputs).discover_full(first.graph)
    got = shape(result)
    assert {k: v for k, v in got.items() if not k.startswith("cpu")} == {
        k: v for k, v in GOLDEN.items() if not k.startswith("cpu")
    }
    assert got["cpu-000"] == ("cpu_0", [], None) and got["cpu-001"] == ("cpu_1", [], None)
    why = result.graph.unplaced["cpu-000"]
    assert why.startswith("scale set cpu: azure: VirtualMachineScaleSetVMs.List") and "403" in why
    assert why.endswith("kept without topology")
    # with no previous graph the scale set itself is named
    fresh = discover(arm, records())
    assert "cpu-000" not in shape(fresh)
    assert fresh.graph.unplaced["record 'scale set cpu'"].startswith("scale set cpu: azure:")


def test_the_fake_refuses_what_arm_refuses(arm: FakeArm) -> None:
    gb300(arm)
    client = compute_client("sub-1", arm.url)
    with pytest.raises(ProviderError, match="can only be specified if a valid"):
        client._list("VirtualMachines.List", "rg-hpc",
                     lambda: client.client.virtual_machines.list("rg-hpc", expand="instanceView",
                                                                 enforce_https=False))  # fmt: skip
    with pytest.raises(ProviderError, match="OperationNotAllowed"):
        client.scale_set_vms("rg-hpc", "nd")
