"""NetQ provider: conformance with Topograph's samples, sessions, paging, retries, TLS, credentials.

Every HTTP test talks to ``tests/netq_fake_server.py`` on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from netq_fake_server import COMPUTE_NODES, LOGIN, SELECT, TOPOLOGY, FakeNetq
from tls_helpers import self_signed_cert

from topocast.errors import ProviderError
from topocast.model.fabric import build_tree
from topocast.model.graph import TopologyGraph
from topocast.providers.onprem import netq
from topocast.providers.onprem.netq_http import NetqClient, NetqCredentials
from topocast.renderers import render

CREDS = NetqCredentials("admin", "admin-pw")
DGX = [f"dgx-{i:02d}" for i in range(1, 9)]


def no_sleep(_: float) -> None:
    pass


@pytest.fixture(scope="module")
def samples(conformance_dir: Path) -> dict[str, Any]:
    inputs, expected = conformance_dir / "inputs" / "netq", conformance_dir / "expected"
    return {
        "topology": json.loads((inputs / "topologyGraph.json").read_text()),
        "compute": json.loads((inputs / "computeNodes.json").read_text()),
        "tree": json.loads((expected / "netq-topologyGraph__parsed-tree.json").read_text()),
        "domains": json.loads((expected / "netq-computeNodes__domains.json").read_text()),
    }


def nested(graph: TopologyGraph) -> list[dict[str, Any]]:
    """The graph in the conformance file's shape: switches {id, name, children}, hosts {id, name}."""
    roots: dict[str, dict[str, Any]] = {}
    for node in graph.nodes:
        level = roots
        for sw in reversed(node.fabric):
            entry = level.setdefault(sw, {"id": sw, "name": graph.switch_names.get(sw, sw), "children": {}})
            level = entry["children"]
        if node.fabric:
            level[node.name] = {"id": node.id, "name": node.name}

    def freeze(level: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for key in sorted(level):
            item = dict(level[key])
            if "children" in item:
                item["children"] = freeze(item["children"])
            out.append(item)
        return out

    return freeze(roots)


def sort_children(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for item in sorted(items, key=lambda i: i["id"] if "children" in i else i["name"]):
        item = dict(item)
        if "children" in item:
            item["children"] = sort_children(item["children"])
        out.append(item)
    return out


# ----- conformance ----------------------------------------------------------------------
def test_parsed_tree_matches_topograph(samples: dict[str, Any]) -> None:
    fabric = netq.parse_topology(samples["topology"])
    result = netq.build_graph([fabric], nodes=DGX)
    assert sort_children(nested(result.graph)) == sort_children(samples["tree"]["tiers"])
    assert result.warnings == []


def test_compute_nodes_give_the_domains_topograph_expects(samples: dict[str, Any]) -> None:
    domains = netq.parse_compute_nodes(samples["compute"])
    expected = {k: v for k, v in samples["domains"].items() if not k.startswith("_")}
    got: dict[str, dict[str, dict[str, str]]] = {}
    for host, d in domains.items():
        got.setdefault(d.domain, {})[host] = {"instanceId": host}
    assert got == expected


def test_discover_end_to_end_renders_named_switches(samples: dict[str, Any]) -> None:
    with FakeNetq({7: samples["topology"]}, samples["compute"]) as server:
        result = netq.discover(server.url, credentials=CREDS, nodes=[*DGX, "node1"])
    text = render(result.graph, "slurm-tree").content
    assert "# net-unit-s1=node3\nSwitchName=net-unit-s1 Switches=net-unit-l[1-2]\n" in text
    assert "SwitchName=net-unit-l1 Nodes=dgx-[01-04]\n" in text
    assert "SwitchName=net-unit-l2 Nodes=dgx-[05-08]\n" in text
    node1 = next(n for n in result.graph.nodes if n.name == "node1")
    assert node1.accelerator == "3fbfc98b-7f95-4749-ab11-bd351a2aab3e" and node1.fabric == []
    assert any("no fabric in NetQ: node1" in w for w in result.warnings)
    assert result.api_calls["login"] == 1 and result.api_calls["topology"] == 1


def test_without_a_node_list_every_netq_host_is_a_node(samples: dict[str, Any]) -> None:
    with FakeNetq({7: samples["topology"]}, samples["compute"]) as server:
        result = netq.discover(server.url, credentials=CREDS)
    assert result.graph.node_names() == DGX
    assert len(build_tree(result.graph, no_topology_switch=False).roots) == 1


# ----- CLOS fabrics through NetQ ----------------------------------------------------------
def clos_topology() -> list[dict[str, Any]]:
    """Topograph's TestParseNetq fabric: 4 hosts, 8 leaves, 8 spines, 4 cores, all doubly linked."""
    tiers = {h: -1 for h in "ABCD"} | {f"L{i}": 1 for i in range(1, 9)}
    tiers |= {f"S{i}": 2 for i in range(1, 9)} | {f"C{i}": 3 for i in range(1, 5)}
    links = [f"{h}-*-L{i}" for h, ls in (("A", "1234"), ("B", "1234"), ("C", "5678"), ("D", "5678")) for i in ls]
    links += [f"L{leaf}-*-S{s}" for leaf, ss in zip(range(1, 9), ["12", "34", "56", "78"] * 2, strict=True) for s in ss]
    links += [f"S{s}-*-C{c}" for s in range(1, 9) for c in ("12" if s % 2 else "34")]
    nodes = [{"id": k, "name": k, "tier": t} for k, t in tiers.items()]
    return [{"nodes": [{"compounded_nodes": nodes}], "links": [{"id": i} for i in links]}]


def test_clos_collapses_like_topograph_for_one_host() -> None:
    result = netq.build_graph([netq.parse_topology(clos_topology())], nodes=["A"])
    assert [n.fabric for n in result.graph.nodes] == [["L1", "S1", "C1"]]


def test_clos_gives_one_tree_for_all_hosts() -> None:
    result = netq.build_graph([netq.parse_topology(clos_topology())])
    tree = build_tree(result.graph, no_topology_switch=False)
    assert len(tree.roots) == 1
    paths = {n.name: n.fabric for n in result.graph.nodes}
    # A and B share leaves L1-L4, C and D share L5-L8: one leaf group each (named by its smallest ID)
    assert paths["A"][0] == paths["B"][0] == "L1" and paths["C"][0] == paths["D"][0] == "L5"
    # every spine reaches both leaf groups (L1 and L5 both go to S1/S2...), so the spines are one group,
    # and so are the cores above them
    assert paths["A"][1:] == paths["C"][1:] == ["S1", "C1"]


# ----- sessions, paging, retries ----------------------------------------------------------
def nmx_nodes(n: int) -> list[dict[str, Any]]:
    return [{"ID": f"id{i}", "Name": f"dgx-{i:02d}", "DomainUUID": f"nvl-{(i - 1) // 4}"} for i in range(1, n + 1)]


def test_compute_nodes_are_paged(samples: dict[str, Any]) -> None:
    with FakeNetq({1: samples["topology"]}, nmx_nodes(8)) as server:
        result = netq.discover(server.url, credentials=CREDS, page_size=3)
        assert server.count(COMPUTE_NODES) == 4  # 3 + 3 + 2 + the empty page that ends it
    assert {n.name: n.accelerator for n in result.graph.nodes} == {
        f"dgx-{i:02d}": f"nvl-{(i - 1) // 4}" for i in range(1, 9)
    }


def test_a_server_side_page_limit_below_ours_still_reads_everything(samples: dict[str, Any]) -> None:
    with FakeNetq({1: samples["topology"]}, nmx_nodes(8), page_limit=2) as server:
        result = netq.discover(server.url, credentials=CREDS, page_size=100)
        assert server.count(COMPUTE_NODES) == 5
    assert all(n.accelerator for n in result.graph.nodes)


def test_a_server_that_ignores_paging_is_read_once(samples: dict[str, Any]) -> None:
    with FakeNetq({1: samples["topology"]}, nmx_nodes(8), ignore_paging=True) as server:
        result = netq.discover(server.url, credentials=CREDS, page_size=3)
        assert server.count(COMPUTE_NODES) == 2  # the second answer repeats the first: stop
    assert len([n for n in result.graph.nodes if n.accelerator]) == 8


def test_expired_session_logs_in_again_once(samples: dict[str, Any]) -> None:
    with FakeNetq({1: samples["topology"]}) as server:
        client = NetqClient(server.url, CREDS, sleep=no_sleep)
        client.login()
        server.expire_sessions()  # the login token dies before we select the premise
        assert netq.parse_topology(client.topology(1)).hosts
        assert server.count(LOGIN) == 2
        server.expire_sessions()  # now the premise token dies too
        assert client.topology(1)
        assert server.count(LOGIN) == 3 and server.count(SELECT) == 3


def test_a_session_that_never_works_fails_after_one_fresh_login(samples: dict[str, Any]) -> None:
    with FakeNetq({1: samples["topology"]}, always_expire=True) as server:
        with pytest.raises(ProviderError, match="401 even after a fresh login"):
            netq.discover(server.url, credentials=CREDS, nvlink=False)
        assert server.count(LOGIN) == 2


def test_wrong_password_is_a_clear_error_without_the_password(samples: dict[str, Any]) -> None:
    with FakeNetq({1: samples["topology"]}) as server, pytest.raises(ProviderError) as info:
        netq.discover(server.url, credentials=NetqCredentials("admin", "wrong-pw"))
    assert "refused (HTTP 401)" in str(info.value) and "wrong-pw" not in str(info.value)
    assert "wrong-pw" not in repr(NetqCredentials("admin", "wrong-pw"))


def test_retries_honour_retry_after_then_succeed(samples: dict[str, Any]) -> None:
    slept: list[float] = []
    with FakeNetq({1: samples["topology"]}, nmx_nodes(8)) as server:
        server.fail(TOPOLOGY, 503, times=2)
        server.fail(COMPUTE_NODES, 429, retry_after="7")
        client = NetqClient(server.url, CREDS, sleep=slept.append)
        result = netq.discover(server.url, credentials=CREDS, client=client)
    assert slept == [0.5, 1.0, 7.0]  # back-off 0.5 s, 1 s, then the server's Retry-After
    assert result.api_calls["topology"] == 3 and len(result.graph.nodes) == 8


def test_retry_after_is_capped_and_attempts_run_out(samples: dict[str, Any]) -> None:
    slept: list[float] = []
    with FakeNetq({1: samples["topology"]}) as server:
        server.fail(LOGIN, 503, retry_after="3600", times=10)
        client = NetqClient(server.url, CREDS, sleep=slept.append, max_attempts=3, max_retry_after=30)
        with pytest.raises(ProviderError, match="HTTP 503 after 3 attempts"):
            client.login()
    assert slept == [30, 30]


def test_client_errors_are_not_retried(samples: dict[str, Any]) -> None:
    with FakeNetq({1: samples["topology"]}) as server:
        server.fail(TOPOLOGY, 403)
        with pytest.raises(ProviderError, match="answered HTTP 403"):
            netq.discover(server.url, credentials=CREDS, client=NetqClient(server.url, CREDS, sleep=no_sleep))
        assert server.count(TOPOLOGY) == 1


def test_unreachable_server_is_reported() -> None:
    client = NetqClient("http://127.0.0.1:9", CREDS, sleep=no_sleep, max_attempts=2, timeout=2)
    with pytest.raises(ProviderError, match=re.escape("cannot reach http://127.0.0.1:9 after 2 attempts")):
        client.login()


def test_nmx_failure_is_a_warning_unless_required(samples: dict[str, Any]) -> None:
    with FakeNetq({1: samples["topology"]}) as server:
        server.fail(COMPUTE_NODES, 404)
        result = netq.discover(server.url, credentials=CREDS)
        assert any("no NVLink domains" in w and "404" in w for w in result.warnings)
        server.fail(COMPUTE_NODES, 404)
        with pytest.raises(ProviderError, match="404"):
            netq.discover(server.url, credentials=CREDS, nvlink=True)


def test_premises_default_to_config_key_viewed_and_can_be_named(samples: dict[str, Any]) -> None:
    premises = [
        {"opid": 1, "name": "dc-a", "namespace": "x", "config_key_viewed": True},
        {"opid": 2, "name": "dc-b", "namespace": "x", "config_key_viewed": False},
    ]
    with FakeNetq({1: samples["topology"], 2: samples["topology"]}, premises=premises) as server:
        one = netq.discover(server.url, credentials=CREDS, nvlink=False)
        assert server.count(TOPOLOGY) == 1 and one.graph.nodes[0].fabric[0] in {"node0", "node9"}
        both = netq.discover(server.url, credentials=CREDS, nvlink=False, premises=["dc-a", 2])
        assert any("in several premises" in w for w in both.warnings)
        assert both.graph.nodes[0].fabric[0].startswith("p1.")  # per-premise ID prefix
        with pytest.raises(ProviderError, match=r"\['dc-z'\] not found; the account sees: dc-a \(1\), dc-b \(2\)"):
            netq.discover(server.url, credentials=CREDS, premises=["dc-z"])


def test_malformed_topology_names_the_field() -> None:
    bad = [{"nodes": [{"compounded_nodes": [{"id": "n1", "name": "h1"}]}], "links": []}]
    with pytest.raises(ProviderError, match=r"\[0\]\.nodes\[0\]\.compounded_nodes\[0\]: needs .* integer tier"):
        netq.parse_topology(bad)
    with pytest.raises(ProviderError, match="one object"):
        netq.parse_topology([{}, {}])


# ----- TLS --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    cert, key = self_signed_cert(tmp_path_factory.mktemp("tls"), "netq.test")
    return str(cert), str(key)


def test_tls_is_verified_by_default(samples: dict[str, Any], self_signed: tuple[str, str]) -> None:
    with FakeNetq({1: samples["topology"]}, tls=self_signed) as server:
        with pytest.raises(ProviderError, match=r"not trusted .*--ca-file.*--insecure"):
            netq.discover(server.url, credentials=CREDS, nvlink=False)
        trusted = netq.discover(server.url, credentials=CREDS, nvlink=False, ca_file=self_signed[0])
        insecure = netq.discover(server.url, credentials=CREDS, nvlink=False, insecure=True)
    assert trusted.graph == insecure.graph
    assert any("verification is off" in w for w in insecure.warnings)
    assert not any("verification" in w for w in trusted.warnings)


# ----- credentials ------------------------------------------------------------------------
def test_credentials_file(tmp_path: Path) -> None:
    f = tmp_path / "netq.json"
    f.write_text(json.dumps({"username": "u", "password": "p", "nmx_username": "ro-user", "nmx_password": "q"}))
    f.chmod(0o600)
    creds = netq.load_credentials(str(f))
    assert (creds.username, creds.nmx_username, creds.notes) == ("u", "ro-user", ())
    f.chmod(0o644)
    assert "readable by other users" in netq.load_credentials(str(f)).notes[0]
    f.write_text('{"username": "u"}')
    with pytest.raises(ProviderError, match="non-empty string 'password'"):
        netq.load_credentials(str(f))


def test_separate_nmx_account_is_used_for_nmx(samples: dict[str, Any]) -> None:
    creds = NetqCredentials("admin", "admin-pw", "ro-user", "ro-pw")
    with FakeNetq({1: samples["topology"]}, nmx_nodes(8), nmx_username="ro-user", nmx_password="ro-pw") as server:
        result = netq.discover(server.url, credentials=creds, nvlink=True)
    assert all(n.accelerator for n in result.graph.nodes)


def test_credentials_from_secrets_manager_and_ssm(aws_env: str) -> None:
    import boto3

    body = json.dumps({"username": "u", "password": "p"})
    arn = boto3.client("secretsmanager").create_secret(Name="topocast/netq", SecretString=body)["ARN"]
    assert netq.load_credentials(arn).username == "u"
    boto3.client("ssm").put_parameter(Name="/topocast/netq", Value=body, Type="SecureString")
    region = os.environ["AWS_DEFAULT_REGION"]
    creds = netq.load_credentials(f"arn:aws:ssm:{region}:123456789012:parameter/topocast/netq")
    assert (creds.password, creds.notes) == ("p", ())
    with pytest.raises(ProviderError, match="cannot read parameter"):
        netq.load_credentials(f"arn:aws:ssm:{region}:123456789012:parameter/missing")


def test_a_storage_host_on_a_spine_never_merges_the_spine_into_a_leaf() -> None:
    # leaf L1 carries only A, which also has a cable to spine S1 (identical children used to merge S1 into L1);
    # storage has its only cable on S1
    tiers = {"A": -1, "B": -1, "storage": -1, "L1": 1, "L2": 1, "S1": 2}
    links = ["A-*-L1", "A-*-S1", "B-*-L2", "storage-*-S1", "L1-*-S1", "L2-*-S1"]
    nodes = [{"id": k, "name": k, "tier": t} for k, t in tiers.items()]
    topology = [{"nodes": [{"compounded_nodes": nodes}], "links": [{"id": i} for i in links]}]
    with FakeNetq({7: topology}) as server:
        result = netq.discover(server.url, credentials=CREDS, nvlink=False)
    assert render(result.graph, "slurm-tree").content == (
        "SwitchName=S1 Switches=L[1-2]\n"  # storage has no leaf: left out of the tree
        "SwitchName=L1 Nodes=A\nSwitchName=L2 Nodes=B\n"
    )
    assert result.graph.unplaced == {
        "storage": "cabled only to switch(es) S1 (S1, tier 2), not to a leaf (tier 1); kept without topology"
    }
    assert (
        "2 host(s) are cabled to a switch above the leaf tier (tier 1); those cables are ignored and the tiers "
        "of the rest are unchanged: A -> S1 (S1); storage -> S1 (S1)"
    ) in result.warnings


def test_two_netq_nodes_claiming_one_name_are_set_aside_not_merged() -> None:
    tiers = {"h1": -1, "h2": -1, "h3": -1, "L1": 1, "L2": 1}
    names = {"h1": "gpu-00", "h2": "gpu-00", "h3": "gpu-03"}
    nodes = [{"id": k, "name": names.get(k, k), "tier": t} for k, t in tiers.items()]
    links = [{"id": i} for i in ("h1-*-L1", "h2-*-L2", "h3-*-L2")]
    result = netq.build_graph([netq.parse_topology([{"nodes": [{"compounded_nodes": nodes}], "links": links}])])
    assert [(n.name, n.fabric) for n in result.graph.nodes] == [("gpu-03", ["L2"])]
    assert result.graph.unplaced == {"gpu-00": "2 NetQ nodes claim the name 'gpu-00' (ids h1, h2); left out"}
