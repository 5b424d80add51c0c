"""``--provider nebius``: InstanceService.List through the real Nebius SDK against an in-process gRPC fake.

The fake (tests/nebius_fake_server.py) answers with the SDK's own messages; the expected tiers, domains
and set-aside reasons below are written by hand from the fixture.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

pytest.importorskip("nebius", reason="the nebius extra is not installed (pip install 'topocast[nebius]')")

from nebius.api.nebius.common.v1 import ResourceMetadata
from nebius.api.nebius.compute.v1 import (
    Instance,
    InstanceGpuClusterSpec,
    InstanceSpec,
    InstanceStatus,
    InstanceStatusInfinibandTopologyPath,
    ResourcesSpec,
)
from nebius_fake_server import FakeNebius

from topocast.errors import ProviderError
from topocast.model.graph import load_graph
from topocast.providers import ProviderInputs, build_provider
from topocast.providers.nebius.sdk import connect
from topocast.renderers import RenderOptions, render

PROJECT = "project-e00cluster"


def vm(n: int, path: list[str] | None, nvl: str = "", gpu_cluster: str = "computegpucluster-e00a", **meta: Any) -> Any:
    status = InstanceStatus(state=InstanceStatus.InstanceState.RUNNING)
    if path is not None:
        status = InstanceStatus(
            state=InstanceStatus.InstanceState.RUNNING,
            infiniband_topology_path=InstanceStatusInfinibandTopologyPath(path=path),
        )
    spec = InstanceSpec(
        hostname=f"host-{n}", nvl_instance_group_id=nvl,
        resources=ResourcesSpec(platform="gpu-b200-sxm", preset="8gpu"),
        gpu_cluster=InstanceGpuClusterSpec(id=gpu_cluster) if gpu_cluster else None,
    )  # fmt: skip
    metadata = ResourceMetadata(id=f"computeinstance-e00{n:03d}", name=f"gpu-{n:02d}", parent_id=PROJECT, **meta)
    return Instance(metadata=metadata, spec=spec, status=status)


def cluster() -> list[Any]:
    return [
        vm(1, ["dc-1", "spine-1", "block-1"], nvl="computenvlinstancegroup-a"),
        vm(2, ["dc-1", "spine-1", "block-1"], nvl="computenvlinstancegroup-a"),
        vm(3, ["dc-1", "spine-1", "block-2"], nvl="computenvlinstancegroup-b"),
        vm(4, ["dc-1", "spine-2", "block-3"]),
        vm(5, ["dc-1", "block-9"]),  # two IDs: not the documented path
        vm(6, None),  # in a GPU cluster but no path yet
        vm(7, None, gpu_cluster=""),  # a CPU VM
        Instance(metadata=ResourceMetadata(id="computeinstance-e00x", name="other", parent_id="project-other")),
    ]


@pytest.fixture
def fake() -> Iterator[FakeNebius]:
    with FakeNebius(cluster()) as f:
        yield f


def inputs(fake: FakeNebius, **options: Any) -> ProviderInputs:
    base = {"project": PROJECT, "endpoint": fake.address, "insecure": True}
    return ProviderInputs("c1", {**base, **options}, {"nebius": connect}.__getitem__)


@pytest.fixture(autouse=True)
def token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEBIUS_IAM_TOKEN", "fake-token")


def test_golden_graph_path_top_down_nvl_groups_and_the_odd_instances(fake: FakeNebius) -> None:
    result = build_provider("nebius", inputs(fake, page_size=3)).discover_full(None)
    g = result.graph
    nodes = {n.name: n for n in g.nodes}
    assert sorted(nodes) == [f"gpu-{i:02d}" for i in range(1, 8)]  # "other" is another project's
    assert nodes["gpu-01"].fabric == ["block-1", "spine-1", "dc-1"] == nodes["gpu-02"].fabric
    assert nodes["gpu-03"].fabric == ["block-2", "spine-1", "dc-1"]
    assert nodes["gpu-04"].fabric == ["block-3", "spine-2", "dc-1"]
    assert nodes["gpu-01"].accelerator == "computenvlinstancegroup-a" and nodes["gpu-04"].accelerator is None
    assert nodes["gpu-01"].id == "computeinstance-e00001" and nodes["gpu-01"].instance_type == "gpu-b200-sxm/8gpu"
    assert [nodes[n].fabric for n in ("gpu-05", "gpu-06", "gpu-07")] == [[], [], []]
    assert g.unplaced == {
        "gpu-05": "infiniband_topology_path has 2 IDs ['dc-1', 'block-9'] (expected 3); kept without topology",
        "gpu-06": "in GPU cluster computegpucluster-e00a but no infiniband_topology_path; kept without topology",
    }
    assert any(w.startswith("1 instance(s) are in no GPU cluster") and "gpu-07" in w for w in result.warnings)
    assert result.api_calls == {"InstanceService.List": 3}  # 7 instances of the project, 3 a page
    assert [(r.parent_id, r.page_size, r.page_token) for r in fake.requests] == [
        (PROJECT, 3, ""), (PROJECT, 3, "3"), (PROJECT, 3, "6")
    ]  # fmt: skip


def test_name_from_hostname_and_label_selection(fake: FakeNebius) -> None:
    fake.instances.append(vm(8, ["dc-1", "spine-2", "block-3"], labels={"slurm-cluster": "c2"}))
    g = build_provider("nebius", inputs(fake, name_from="hostname", labels={"slurm-cluster": "c2"})).discover_full(None)
    assert [(n.name, n.fabric) for n in g.graph.nodes] == [("host-8", ["block-3", "spine-2", "dc-1"])]


WANTED = "topocast/wanted-name"


def named(n: int, name: str, path: list[str] | None) -> Any:
    """``vm(n, path)`` whose metadata.name is ``name`` ("" for none)."""
    inst = vm(n, path)
    inst.metadata.name = name
    return inst


def test_two_instances_with_one_name_are_named_by_id_and_wait_one_without_a_name_by_its_id(fake: FakeNebius) -> None:
    fake.instances.append(named(8, "gpu-02", ["dc-1", "spine-1", "block-1"]))  # a second gpu-02
    fake.instances.append(named(9, "", ["dc-1", "spine-2", "block-3"]))  # no metadata.name
    result = build_provider("nebius", inputs(fake)).discover_full(None)
    nodes = {n.name: n for n in result.graph.nodes}
    assert sorted(nodes) == [
        "computeinstance-e00002", "computeinstance-e00008", "computeinstance-e00009",
        "gpu-01", "gpu-03", "gpu-04", "gpu-05", "gpu-06", "gpu-07",
    ]  # fmt: skip
    assert [nodes[f"computeinstance-e0000{i}"].labels.get(WANTED) for i in (2, 8, 9)] == ["gpu-02", "gpu-02", None]
    assert nodes["computeinstance-e00002"].fabric == ["block-1", "spine-1", "dc-1"] == nodes["gpu-01"].fabric
    assert nodes["computeinstance-e00002"].accelerator == "computenvlinstancegroup-a"
    assert nodes["computeinstance-e00008"].fabric == ["block-1", "spine-1", "dc-1"]
    assert nodes["computeinstance-e00009"].fabric == ["block-3", "spine-2", "dc-1"] == nodes["gpu-04"].fabric
    assert nodes["computeinstance-e00009"].id == "computeinstance-e00009"
    assert result.graph.unplaced == {  # as in the golden graph
        "gpu-05": "infiniband_topology_path has 2 IDs ['dc-1', 'block-9'] (expected 3); kept without topology",
        "gpu-06": "in GPU cluster computegpucluster-e00a but no infiniband_topology_path; kept without topology",
    }
    assert result.warnings[:2] == [
        "1 instance(s) have no name (name_from=name): computeinstance-e00009",
        "2 instance(s) share their name with another machine; named by ID until it is free (name_from=name): "
        "computeinstance-e00002, computeinstance-e00008",
    ]


def test_the_previous_holder_of_a_contested_name_keeps_it(fake: FakeNebius) -> None:
    provider = build_provider("nebius", inputs(fake))
    before = provider.discover_full(None).graph
    fake.instances.append(named(8, "gpu-02", ["dc-1", "spine-1", "block-1"]))
    names = {n.id: (n.name, n.labels.get(WANTED)) for n in provider.discover_full(before).graph.nodes}
    assert names["computeinstance-e00002"] == ("gpu-02", None)
    assert names["computeinstance-e00008"] == ("computeinstance-e00008", "gpu-02")


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (grpc.StatusCode.UNAUTHENTICATED, "Nebius InstanceService.List: UNAUTHENTICATED (check NEBIUS_IAM_TOKEN"),
        (grpc.StatusCode.PERMISSION_DENIED, "Nebius InstanceService.List: PERMISSION_DENIED (the service account"),
    ],
)
def test_auth_errors_are_one_line(fake: FakeNebius, status: grpc.StatusCode, expected: str) -> None:
    fake.fail = (status, "denied by the fake")
    with pytest.raises(ProviderError) as info:
        build_provider("nebius", inputs(fake)).discover_full(None)
    assert str(info.value).startswith(expected) and "\n" not in str(info.value)


def test_a_fresh_token_with_the_same_items_is_refused_at_the_second_page(fake: FakeNebius) -> None:
    fake.same_items_forever = True
    with pytest.raises(ProviderError, match=r"^Nebius InstanceService.List: item '.+' came on two pages \(page 2\)"):
        build_provider("nebius", inputs(fake, page_size=3)).discover_full(None)
    assert len(fake.requests) == 2


def test_repeated_page_token_and_unreachable_endpoint(fake: FakeNebius) -> None:
    fake.repeat_token = "3"
    with pytest.raises(ProviderError, match="returned page token '3' twice"):
        build_provider("nebius", inputs(fake, page_size=3)).discover_full(None)
    dead = FakeNebius()
    with dead:
        address = dead.address
    opts = {"project": PROJECT, "endpoint": address, "insecure": True, "timeout": 1}  # gRPC waits it out
    with pytest.raises(ProviderError, match=r"^Nebius InstanceService.List: (UNAVAILABLE|DEADLINE_EXCEEDED)"):
        build_provider("nebius", ProviderInputs("c1", opts, {"nebius": connect}.__getitem__)).discover_full(None)


def test_options_are_checked(fake: FakeNebius) -> None:
    with pytest.raises(ProviderError, match=r"^provider 'nebius': option 'project' is required$"):
        build_provider("nebius", ProviderInputs("c1", {}))


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "topocast.cli", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.slow  # a subprocess that imports the SDK: several seconds
def test_discover_from_the_cli_then_render_every_format(fake: FakeNebius, tmp_path: Path) -> None:
    run = cli(
        "discover", "--provider", "nebius", "--cluster", "c1", "--option", f"project={PROJECT}",
        "--option", f"endpoint={fake.address}", "--option", "insecure=true", "--out", str(tmp_path / "g.json"),
        cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "7 node(s), 3 without topology, 2 set aside" in run.stderr
    graph = load_graph(tmp_path / "g.json")
    assert render(graph, "slurm-tree").content.splitlines() == [  # gpu-[05-07] have no topology: left out
        "SwitchName=dc-1 Switches=spine-[1-2]",
        "SwitchName=spine-1 Switches=block-[1-2]",
        "SwitchName=spine-2 Switches=block-3",
        "SwitchName=block-1 Nodes=gpu-[01-02]",
        "SwitchName=block-2 Nodes=gpu-03",
        "SwitchName=block-3 Nodes=gpu-04",
    ]
    assert render(graph, "slurm-block", RenderOptions(slurm_version="26.05")).content.splitlines() == [
        "BlockName=computenvlinstancegroup-a Nodes=gpu-[01-02]",
        "BlockName=computenvlinstancegroup-b Nodes=gpu-03",
        "BlockSizes=2,4",
    ]  # fmt: skip
    for fmt in ("slurm-yaml", "k8s-labels", "graph", "html"):
        assert render(graph, fmt).content


@pytest.mark.slurm
def test_tree_loads_in_real_slurmctld(fake: FakeNebius, slurm_controller_factory: Any) -> None:
    graph = build_provider("nebius", inputs(fake)).discover_full(None).graph
    ctl = slurm_controller_factory(graph.node_names(), render(graph, "slurm-tree").content)
    assert {"dc-1", "spine-1", "spine-2", "block-1", "block-2", "block-3"} <= set(ctl.show_topology())


@pytest.mark.slurm_current
def test_block_and_yaml_load_in_slurm_26(fake: FakeNebius, sid_controller_factory: Any) -> None:
    graph = build_provider("nebius", inputs(fake)).discover_full(None).graph
    block = render(graph, "slurm-block", RenderOptions(slurm_version="26.05")).content
    ctl = sid_controller_factory(graph.node_names(), block, topology_plugin="topology/block")
    assert {name: info.nodes for name, info in ctl.show_blocks().items()} == {
        "computenvlinstancegroup-a": ("gpu-01", "gpu-02"), "computenvlinstancegroup-b": ("gpu-03",)
    }  # fmt: skip
    ctl2 = sid_controller_factory(
        graph.node_names(), render(graph, "slurm-yaml").content, topology_file="topology.yaml"
    )
    assert ctl2.show_topology_text()
