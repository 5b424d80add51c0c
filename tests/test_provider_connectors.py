"""Each provider folder declares its SDK connector; ``topocast discover`` builds clients only through it.

The CLI names no provider and no service (its clients come from ``CONNECTORS``), each connector builds
the clients its provider asks for from the shell's means and says which it has when asked for another,
and the AWS provider makes no EC2 call outside :class:`~topocast.providers.aws.api.Ec2Api` (mypy checks
the other direction: boto3's ``EC2Client`` has every member of it).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from topocast.errors import ProviderError
from topocast.providers import CONNECTORS, PROVIDERS, ShellMeans, connect
from topocast.providers.aws.api import Ec2Api
from topocast.providers.aws.provider import AwsDiscoveryConfig, discover_full, discover_instances
from topocast.providers.dra.provider import Options as DraOptions
from topocast.providers.k8s_labels.provider import ClusterNodeInfo, NodeLabelsConfig

DISCOVER = Path(__file__).resolve().parent.parent / "shared" / "topocast" / "cli" / "discover.py"
PROVIDERS_DIR = DISCOVER.parent.parent / "providers"


def sdk_services() -> set[str]:
    """Every service name a provider asks its shell for: the string given to ``sdk_client(...)`` and the keys
    a connector declares with ``services(...)`` under providers/ (read from the source, so a new provider's
    services are covered without a list here)."""
    found: set[str] = set()
    for path in PROVIDERS_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called == "sdk_client" and isinstance(node.args[0].value, str):
                    found.add(node.args[0].value)
            # a connector's declaration: services("provider", {"service": factory, ...})
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "services" and len(node.args) == 2:
                table = node.args[1]
                if isinstance(table, ast.Dict):
                    found |= {k.value for k in table.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return found


def test_the_service_scan_finds_the_clouds_clients() -> None:
    assert {"ec2", "compute", "oci", "nebius", "azure-compute", "k8s-nodes", "k8s-dra"} <= sdk_services()


def test_topocast_discover_names_no_provider_and_no_service() -> None:
    tree = ast.parse(DISCOVER.read_text())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert strings & (set(PROVIDERS) | sdk_services()) == {"aws"}  # only the default of --provider
    modules |= {alias.name for n in ast.walk(tree) if isinstance(n, ast.Import) for alias in n.names}
    folders = {p.name for p in PROVIDERS_DIR.iterdir() if (p / "__init__.py").is_file()}
    assert {"aws", "gcp", "oci", "azure", "nebius", "onprem", "k8s_labels", "dra"} <= folders
    into_folders = {m for m in modules if m.split(".")[:3] in [["topocast", "providers", f] for f in folders]}
    assert into_folders == set()  # secrets and bucket uploads too: providers.secrets, the connectors' read_uploads


def test_every_provider_that_takes_clients_registers_its_folders_connector() -> None:
    assert set(CONNECTORS) <= set(PROVIDERS)
    assert {"aws", "gcp", "oci", "azure", "nebius", "k8s-labels", "dra"} <= set(CONNECTORS)
    assert "ibnetdiscover" not in CONNECTORS and "netq" not in CONNECTORS  # they read uploads and secrets only
    for name, target in CONNECTORS.items():
        folder = name.replace("-", "_")
        assert isinstance(target, str) and target.startswith(f"topocast.providers.{folder}.")


def test_the_gcp_connector_builds_its_compute_clients_at_the_shells_endpoint() -> None:
    clients = connect("gcp", ShellMeans(compute_endpoint="http://127.0.0.1:1"), {})
    compute, sub_blocks = clients("compute"), clients("compute-sub-blocks")
    assert type(compute).__name__ == "InstancesClient" and compute.api_endpoint == "http://127.0.0.1:1"
    assert type(sub_blocks).__name__ == "ReservationSubBlocksClient" and sub_blocks.api_endpoint == "http://127.0.0.1:1"


def test_a_client_a_provider_does_not_declare_is_a_one_line_error_naming_those_it_does() -> None:
    with pytest.raises(ProviderError) as gcp:
        connect("gcp", ShellMeans(), {})("ec2")
    assert str(gcp.value) == "provider 'gcp' has no 'ec2' client (it declares: compute, compute-sub-blocks)"
    with pytest.raises(ProviderError) as netq:
        connect("netq", ShellMeans(), {})("ec2")
    assert str(netq.value) == "provider 'netq' has no 'ec2' client (it declares: none)"


def test_the_azure_connector_reads_nvlink_records_through_the_shells_bucket_reads() -> None:
    asked: list[tuple[str, str]] = []
    good = b'{"kind": "topocast.nvlink/v1"}'

    def read_uploads(prefix: str, check: Any, name: str) -> dict[str, bytes]:
        asked.append((prefix, name))
        with pytest.raises(ProviderError):  # the quarantine check is discovery's own record parser
            check(b"not json", f"{prefix}/gpu-1/{name}")
        return {f"{prefix}/gpu-0/{name}": good}

    read = connect("azure", ShellMeans(read_uploads=read_uploads), {})("nvlink-uploads")
    assert read("s3://b/topocast/hpc/uploads") == {"s3://b/topocast/hpc/uploads/gpu-0/nvlink.json": good}
    assert asked == [("s3://b/topocast/hpc/uploads", "nvlink.json")]
    with pytest.raises(ProviderError) as none:
        connect("azure", ShellMeans(), {})("nvlink-uploads")
    assert str(none.value) == ("provider 'azure' reads uploads in a bucket, and this runtime supplies no bucket reads")


def test_a_secret_reference_is_resolved_by_where_it_points_not_by_the_provider(tmp_path: Path) -> None:
    from topocast.providers.secrets import read_secret

    (tmp_path / "netq.json").write_text('{"username": "u"}')
    assert read_secret(str(tmp_path / "netq.json")) == '{"username": "u"}'
    with pytest.raises(ProviderError) as missing:
        read_secret(str(tmp_path / "gone.json"))
    assert str(missing.value) == f"{tmp_path / 'gone.json'}: cannot read (No such file or directory)"
    with pytest.raises(ProviderError) as arn:  # an ARN goes to the AWS reader, which checks its form first
        read_secret("arn:aws:s3:::bucket/key")
    assert str(arn.value) == "arn:aws:s3:::bucket/key: not a Secrets Manager secret or SSM parameter ARN"


def test_a_kubernetes_provider_in_a_shell_without_kubernetes_says_so() -> None:
    with pytest.raises(ProviderError, match=r"^provider 'k8s-labels' reads Kubernetes, and this runtime supplies no"):
        connect("k8s-labels", ShellMeans(), {})("k8s-nodes")


class RecordingKube:
    """A :class:`~topocast.providers.means.KubeAccess` that records the kubeconfig each listing is for."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []

    def node_lister(self, kubeconfig: str | None) -> Any:
        self.asked.append(("nodes", kubeconfig))

        def listing(config: NodeLabelsConfig) -> tuple[list[ClusterNodeInfo], dict[str, int]]:
            return [ClusterNodeInfo("n1", {"topology.kubernetes.io/zone": "z"})], {"k8s_GET": 1}

        return listing

    def dra_lister(self, kubeconfig: str | None) -> Any:
        self.asked.append(("dra", kubeconfig))

        def listing(options: DraOptions) -> tuple[list[ClusterNodeInfo], list[Any], dict[str, int]]:
            return [], [], {}

        return listing


def test_the_kubernetes_connectors_read_the_shells_cluster_the_flag_before_the_dra_option() -> None:
    kube = RecordingKube()
    connect("k8s-labels", ShellMeans(kubeconfig="/flag", kubernetes=kube), {})("k8s-nodes")
    connect("dra", ShellMeans(kubeconfig="/flag", kubernetes=kube), {"kubeconfig": "/option"})("k8s-dra")
    connect("dra", ShellMeans(kubernetes=kube), {"kubeconfig": "/option"})("k8s-dra")
    connect("k8s-labels", ShellMeans(kubernetes=kube), {})("k8s-nodes")
    assert kube.asked == [("nodes", "/flag"), ("dra", "/flag"), ("dra", "/option"), ("nodes", None)]


class OnlyEc2Api:
    """The real (moto) EC2 client, with every attribute outside :class:`Ec2Api` refused; records what is used."""

    ALLOWED: ClassVar[set[str]] = {name for name in vars(Ec2Api) if not name.startswith("_")}

    def __init__(self, real: Any) -> None:
        self._real = real
        self.used: set[str] = set()
        self.paginators: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        if name not in self.ALLOWED:
            raise AttributeError(f"{name} is not a call of Ec2Api")
        self.used.add(name)
        if name == "get_paginator":
            return self._paginator
        return getattr(self._real, name)

    def _paginator(self, operation_name: str) -> Any:
        self.paginators.add(operation_name)
        return self._real.get_paginator(operation_name)


@pytest.fixture
def cluster(aws_env: str) -> Iterator[list[str]]:
    """Two instances in a capacity block, and a reservation with room for two more (nothing launched there)."""
    import boto3

    from topocast_sim import ec2 as sim

    sim.clear_capacity_blocks()
    sim.clear_capacity_reservations()
    sim.add_capacity_block("cb-a", {"cr-a1": 2})
    sim.add_capacity_reservation(
        "cr-0123456789abcdef0", instance_type=sim.ULTRASERVER_TYPE, network_nodes=["nn-1", "nn-2", "nn-3"]
    )
    ec2 = boto3.client("ec2")
    ids = sim.generate_cluster(ec2, 2, cluster_tag=("topocast:cluster", "c1"), name_prefix=None, block_size=None)
    for i, iid in enumerate(ids):
        tags = {"Name": f"gpu-{i}", sim.CAPACITY_RESERVATION_TAG: "cr-a1"}
        ec2.create_tags(Resources=[iid], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    yield ids
    sim.clear_capacity_blocks()
    sim.clear_capacity_reservations()


def test_the_aws_provider_calls_nothing_outside_ec2api(cluster: list[str]) -> None:
    from topocast.model.changes import InstanceChange

    ec2 = OnlyEc2Api(connect("aws", ShellMeans(), {"region": "us-east-1"})("ec2"))
    config = AwsDiscoveryConfig(
        cluster="c1", filters=["tag:topocast:cluster=c1"], name_from="tag:Name", capacity_block_health=True,
        reserved_nodes={"cr-0123456789abcdef0": "gpu-[8-9]"},
    )  # fmt: skip

    full = discover_full(ec2, config)
    again = discover_instances(ec2, config, full.graph, [InstanceChange(cluster[0], "upsert", "aws.ec2/state-change")])

    assert sorted(n.name for n in full.graph.nodes) == ["gpu-0", "gpu-1", "gpu-8", "gpu-9"]
    assert sorted(n.name for n in again.graph.nodes) == ["gpu-0", "gpu-1", "gpu-8", "gpu-9"]
    assert ec2.used == {"meta", "get_paginator", "describe_capacity_reservation_topology"}
    assert ec2.paginators == {"describe_instances", "describe_instance_topology", "describe_capacity_block_status"}


#: the modules whose every name is imported from where it is defined (the provider folders' and the clouds'
#: client modules; a package ``__init__`` such as ``topocast.providers`` is a facade and may re-export)
DEFINED_HERE = ("topocast.providers.", "topocast.aws.clients", "topocast.gcp.clients")


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_every_provider_and_client_name_is_imported_from_the_module_that_defines_it() -> None:
    repo = DISCOVER.parents[3]
    package = DISCOVER.parents[1]
    defined: dict[str, set[str]] = {}
    stale = []
    for path in [*(repo / "shared").rglob("*.py"), *(repo / "tests").rglob("*.py"), *(repo / "bench").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(DEFINED_HERE)):
                continue
            target = package.joinpath(*node.module.split(".")[1:]).with_suffix(".py")
            if not target.is_file():  # a package: its __init__ may re-export
                continue
            names = defined.setdefault(node.module, _top_level_names(target))
            stale += [f"{path.relative_to(repo)}:{node.lineno}: {a.name} from {node.module}"
                      for a in node.names if a.name not in names]  # fmt: skip
    assert stale == []
