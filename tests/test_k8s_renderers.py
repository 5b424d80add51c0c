"""Behaviour of the Kubernetes-side renderers: node labels, Kueue/KAI Topology,
Volcano HyperNodes, the Slinky ConfigMap and the HTML picture.

The scheduler objects are checked against the rules of the real CRDs
(kueue.x-k8s.io_topologies.yaml, kai.scheduler_topologies.yaml,
topology.volcano.sh_hypernodes.yaml and Volcano's admission webhook), restated
below as small validators: structure, required fields, enums, patterns and
the CEL rules (unique levels, hostname last, exactly one member selector).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import types
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from topocast.errors import RenderError
from topocast.model.graph import Node, TopologyGraph
from topocast.renderers import render
from topocast.renderers.base import LabelScheme, RenderOptions, SlinkyOptions, TopologySpec
from topocast.renderers.k8s_labels import owns_key

TIER = "fabric.topograph.run/tier-"
DOMAIN = "accelerator.topograph.run/domain"
SUBDOMAIN = "accelerator.topograph.run/sub-domain"
HOSTNAME = "kubernetes.io/hostname"


def graph(*nodes: Node, switch_names: dict[str, str] | None = None) -> TopologyGraph:
    return TopologyGraph(cluster="c1", provider="test", nodes=list(nodes), switch_names=switch_names or {})


def three_tier() -> TopologyGraph:
    """core -> spine-a -> leaf-1 (n1, n2 in nvl-1 rack r1/r2), leaf-2 (n3, n4 in nvl-2)."""
    return graph(
        Node(name="n1", id="i-1", fabric=["leaf-1", "spine-a", "core"], accelerator="nvl-1", subdomain="r1"),
        Node(name="n2", id="i-2", fabric=["leaf-1", "spine-a", "core"], accelerator="nvl-1", subdomain="r2"),
        Node(name="n3", id="i-3", fabric=["leaf-2", "spine-a", "core"], accelerator="nvl-2"),
        Node(name="n4", id="i-4", fabric=["leaf-2", "spine-a", "core"], accelerator="nvl-2"),
    )


def labels_of(g: TopologyGraph, options: RenderOptions | None = None) -> dict[str, dict[str, str]]:
    return json.loads(render(g, "k8s-labels", options).content)


def fnv64a(text: str) -> str:
    """Reference FNV-1a 64 (the published algorithm), printed like Go's %x."""
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) % 2**64
    return f"x{h:x}"


# ----- labels -----------------------------------------------------------------------


def test_default_keys_carry_raw_switch_ids_closest_first() -> None:
    g = graph(*three_tier().nodes, switch_names={"leaf-1": "pretty-leaf"})
    labels = labels_of(g)
    assert labels["n1"] == {
        f"{TIER}0": "leaf-1",  # the ID, not the display name
        f"{TIER}1": "spine-a",
        f"{TIER}2": "core",
        DOMAIN: "nvl-1",
        SUBDOMAIN: "r1",
    }
    assert labels["n3"] == {f"{TIER}0": "leaf-2", f"{TIER}1": "spine-a", f"{TIER}2": "core", DOMAIN: "nvl-2"}


def test_content_is_sorted_indented_json_and_objects_carry_ids() -> None:
    art = render(three_tier(), "k8s-labels")
    data = json.loads(art.content)
    assert art.content == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert art.filename == "labels.json" and art.node_count == 4
    assert [o["node"] for o in art.objects] == ["n1", "n2", "n3", "n4"]
    assert art.objects[0]["id"] == "i-1" and art.objects[0]["labels"] == data["n1"]


@pytest.mark.parametrize(
    "labels",
    [
        {"n1": {"k": "v"}, "n2": {}, "n3": {"b": "2", "a": "1"}},
        {'n"1': {"k": "v\u00e9"}, "n\u00e92": {}},  # names the JSON encoder has to escape
        {"only": {}},
    ],
)
def test_the_labels_file_writer_prints_what_json_dumps_prints(labels: dict[str, dict[str, str]]) -> None:
    from topocast.renderers.k8s_labels import _json

    names = sorted(labels)
    assert _json(names, [labels[n] for n in names]) == json.dumps(labels, indent=2, sort_keys=True) + "\n"


def test_labels_of_a_graph_not_sorted_by_name_are_still_written_by_name() -> None:
    nodes = [Node(name=n, fabric=[f"leaf-{n}"]) for n in ("n3", "n1", "n2")]
    art = render(TopologyGraph(cluster="c", provider="p", nodes=nodes), "k8s-labels")
    assert list(json.loads(art.content)) == ["n1", "n2", "n3"]
    assert json.loads(art.content)["n3"] == {f"{TIER}0": "leaf-n3"}
    assert [o["node"] for o in art.objects] == ["n1", "n2", "n3"]
    assert [o["labels"][f"{TIER}0"] for o in art.objects] == ["leaf-n1", "leaf-n2", "leaf-n3"]


def test_custom_scheme_explicit_keys_omit_deeper_tiers() -> None:
    scheme = LabelScheme(
        fabric_keys=["example.com/leaf", "example.com/spine"],
        accelerator_key="example.com/nvlink",
        subdomain_key="example.com/rack",
    )
    labels = labels_of(three_tier(), RenderOptions(labels=scheme))
    assert labels["n2"] == {
        "example.com/leaf": "leaf-1",
        "example.com/spine": "spine-a",
        "example.com/nvlink": "nvl-1",
        "example.com/rack": "r2",
    }


def test_custom_tier_prefix() -> None:
    labels = labels_of(three_tier(), RenderOptions(labels=LabelScheme(tier_prefix="net.example.com/t")))
    assert {k for k in labels["n4"] if k.startswith("net.")} == {
        "net.example.com/t0",
        "net.example.com/t1",
        "net.example.com/t2",
    }


@pytest.mark.parametrize(
    ("scheme", "message"),
    [
        (LabelScheme(accelerator_key="Bad Key"), "accelerator_key"),
        (LabelScheme(subdomain_key=DOMAIN), "unique"),
        (LabelScheme(accelerator_key=f"{TIER}3"), "collides"),
        (LabelScheme(tier_prefix="Example.COM/tier-"), "tier_prefix"),
        (LabelScheme(fabric_keys=["a.io/x", "a.io/x"]), "unique"),
        (LabelScheme(fabric_keys=[HOSTNAME]), "identifies the node"),
        (LabelScheme(tier_prefix="example.com/" + "t" * 63), "63"),
        # every scheme key is owned (removed when not set): Kubernetes' own namespaces are never ours
        (LabelScheme(accelerator_key="node-role.kubernetes.io/control-plane"), "accelerator_key .* reserves"),
        (LabelScheme(fabric_keys=["topology.kubernetes.io/zone"]), r"fabric_keys\[0\] .* reserves"),
        (LabelScheme(tier_prefix="node-role.kubernetes.io/t"), "tier_prefix .* reserves"),
        (LabelScheme(subdomain_key="k8s.io/rack"), "subdomain_key .* reserves"),
    ],
)
def test_bad_schemes_are_refused_with_the_field_named(scheme: LabelScheme, message: str) -> None:
    with pytest.raises(RenderError, match=message):
        render(three_tier(), "k8s-labels", RenderOptions(labels=scheme))


def test_long_and_invalid_values_are_hashed_like_topograph() -> None:
    long_id = "s" * 64
    g = graph(
        Node(name="a", fabric=[long_id, "spine"], accelerator="cb@123"),
        Node(name="b", fabric=["leaf+1", "spine"], accelerator="_rack"),
        Node(name="c", fabric=["x" * 63, "spine"], accelerator="ok.domain-1"),
    )
    art = render(g, "k8s-labels")
    labels = json.loads(art.content)
    assert labels["a"][f"{TIER}0"] == fnv64a(long_id)
    assert labels["a"][DOMAIN] == fnv64a("cb@123")
    assert labels["b"][f"{TIER}0"] == fnv64a("leaf+1")
    assert labels["b"][DOMAIN] == fnv64a("_rack")
    assert labels["c"] == {f"{TIER}0": "x" * 63, f"{TIER}1": "spine", DOMAIN: "ok.domain-1"}  # valid: kept
    assert any("hashed" in w and "leaf+1" in w for w in art.warnings)
    for node in labels.values():
        for value in node.values():
            assert len(value) <= 63 and re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", value)


def test_two_values_with_one_label_value_are_a_render_error_not_a_warning() -> None:
    long_id = "s" * 64
    g = graph(
        Node(name="a", fabric=[long_id, "spine"]),
        Node(name="b", fabric=[fnv64a(long_id), "spine"]),  # a literal leaf ID equal to a's hashed value
    )
    with pytest.raises(RenderError, match="both become the label value 'x"):
        render(g, "k8s-labels")


def test_shrinking_fabric_drops_tier_keys_that_owns_key_claims() -> None:
    before = labels_of(three_tier())["n1"]
    after = labels_of(graph(Node(name="n1", fabric=["leaf-1", "spine-a"])))["n1"]
    stale = set(before) - set(after)
    assert stale == {f"{TIER}2", DOMAIN, SUBDOMAIN}
    assert all(owns_key(k, LabelScheme()) for k in stale)  # so a publisher removes them


def test_owns_key_claims_only_topocast_keys() -> None:
    default = LabelScheme()
    for key in (f"{TIER}0", f"{TIER}17", DOMAIN, SUBDOMAIN):
        assert owns_key(key, default), key
    for key in (
        f"{TIER}",
        f"{TIER}x",
        f"{TIER}1a",
        f"{TIER}-1",
        HOSTNAME,
        "topology.kubernetes.io/zone",
        "nvidia.com/gpu.clique",
    ):
        assert not owns_key(key, default), key
    custom = LabelScheme(fabric_keys=["example.com/leaf"], accelerator_key="example.com/nvl")
    assert owns_key("example.com/leaf", custom) and owns_key("example.com/nvl", custom)
    assert owns_key(f"{TIER}3", custom)  # old tier labels are cleaned up after a scheme change
    assert not owns_key(DOMAIN, custom) and not owns_key("example.com/spine", custom)


def test_nodes_without_topology() -> None:
    g = graph(*three_tier().nodes, Node(name="bare"), Node(name="dra-only", accelerator="clique-1"))
    art = render(g, "k8s-labels")
    labels = json.loads(art.content)
    assert labels["bare"] == {f"{TIER}0": "no-topology"}
    assert labels["dra-only"] == {DOMAIN: "clique-1"}  # a known domain is topology: no marker
    assert any("no topology" in w and "bare" in w for w in art.warnings)


def test_pending_domain_is_kept_not_removed() -> None:
    g = graph(Node(name="new", fabric=["leaf-1"], accelerator_pending=True), Node(name="old", fabric=["leaf-1"]))
    art = render(g, "k8s-labels")
    by_node = {o["node"]: o for o in art.objects}
    assert DOMAIN not in by_node["new"]["labels"]
    assert set(by_node["new"]["keep"]) == {DOMAIN, SUBDOMAIN} and by_node["old"]["keep"] == []
    assert any("new" in w for w in art.warnings)


# ----- CRD rules (restated from the CRD YAML and Volcano's webhook) ------------------------

QUALIFIED = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])"
)
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def check_topology_crd(obj: dict[str, Any], group_version: str) -> list[str]:
    """Kueue / KAI ``Topology``: cluster-scoped, spec.levels 1..16, nodeLabel pattern,
    maxLength 316, CEL ``must be unique`` and ``hostname only at the lowest level``."""
    assert obj["apiVersion"] == group_version and obj["kind"] == "Topology"
    assert DNS_SUBDOMAIN.fullmatch(obj["metadata"]["name"]) and "namespace" not in obj["metadata"]
    levels = obj["spec"]["levels"]
    assert 1 <= len(levels) <= 16
    labels = [level["nodeLabel"] for level in levels]
    assert all(set(level) == {"nodeLabel"} for level in levels)
    assert all(1 <= len(k) <= 316 and QUALIFIED.fullmatch(k) for k in labels)
    assert len(set(labels)) == len(labels)
    assert HOSTNAME not in labels or labels[-1] == HOSTNAME
    return labels


def check_hypernode_crd(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] == "topology.volcano.sh/v1alpha1" and obj["kind"] == "HyperNode"
    name = obj["metadata"]["name"]
    # metadata.name: DNS subdomain; parents refer to it by exactMatch (qualified name: <= 63)
    assert len(name) <= 63 and DNS_SUBDOMAIN.fullmatch(name), name
    spec = obj["spec"]
    assert isinstance(spec["tier"], int) and spec["tier"] >= 0
    assert len(spec.get("tierName", "")) <= 253
    assert len(spec["members"]) >= 1
    for member in spec["members"]:
        assert member["type"] in ("Node", "HyperNode")
        selector = member["selector"]
        chosen = [k for k in ("exactMatch", "regexMatch", "labelMatch") if k in selector]
        assert len(chosen) == 1, selector  # CEL: one of them, and only one
        if "exactMatch" in selector:
            n = selector["exactMatch"]["name"]
            assert 1 <= len(n) <= 253 and DNS_SUBDOMAIN.fullmatch(n)
            assert len(n) <= 63 and QUALIFIED.fullmatch(n)  # webhook: IsQualifiedName
        if "regexMatch" in selector:
            re.compile(selector["regexMatch"]["pattern"])


# ----- Kueue and KAI ------------------------------------------------------------------


def test_kueue_levels_coarsest_first_with_hostname_last() -> None:
    art = render(three_tier(), "kueue")
    (doc,) = list(yaml.safe_load_all(art.content))
    assert doc == art.objects[0]
    assert check_topology_crd(doc, "kueue.x-k8s.io/v1beta2") == [f"{TIER}2", f"{TIER}1", f"{TIER}0", DOMAIN, HOSTNAME]
    assert doc["metadata"]["name"] == "topocast" and art.filename == "kueue-topology.yaml"
    assert art.content.startswith("---\n")


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1", "v1alpha1"])
def test_kueue_api_versions(version: str) -> None:
    art = render(three_tier(), "kueue", RenderOptions(kueue_api_version=version, topology_object_name="gpu-fabric"))
    doc = yaml.safe_load(art.content)
    check_topology_crd(doc, f"kueue.x-k8s.io/{version}")
    assert doc["metadata"]["name"] == "gpu-fabric"


def test_kueue_unknown_api_version_is_refused() -> None:
    with pytest.raises(ValidationError):
        RenderOptions(kueue_api_version="v2")  # type: ignore[arg-type]


def test_kueue_omits_accelerator_level_when_a_node_has_no_domain_and_warns() -> None:
    g = graph(*three_tier().nodes, Node(name="n5", fabric=["leaf-2", "spine-a", "core"]))
    art = render(g, "kueue")
    levels = check_topology_crd(art.objects[0], "kueue.x-k8s.io/v1beta2")
    assert DOMAIN not in levels
    short = graph(*three_tier().nodes, Node(name="n9", fabric=["leaf-9"], accelerator="nvl-9"))
    art = render(short, "kueue")
    assert any("n9" in w and "ignore" in w for w in art.warnings)


def test_kueue_refuses_more_than_16_levels_unless_keys_are_limited() -> None:
    chain = [f"sw{i}" for i in range(16)]
    g = graph(Node(name="deep", fabric=chain))
    with pytest.raises(RenderError, match="16"):
        render(g, "kueue")
    limited = RenderOptions(labels=LabelScheme(fabric_keys=["x.io/leaf", "x.io/spine"]))
    assert check_topology_crd(render(g, "kueue", limited).objects[0], "kueue.x-k8s.io/v1beta2") == [
        "x.io/spine",
        "x.io/leaf",
        HOSTNAME,
    ]


def test_topology_object_name_must_be_a_dns_name() -> None:
    with pytest.raises(RenderError, match="topology_object_name"):
        render(three_tier(), "kai", RenderOptions(topology_object_name="Bad_Name"))


def test_kai_topology_has_the_same_levels_as_kueue() -> None:
    art = render(three_tier(), "kai")
    doc = yaml.safe_load(art.content)
    assert check_topology_crd(doc, "kai.scheduler/v1alpha1") == check_topology_crd(
        render(three_tier(), "kueue").objects[0], "kueue.x-k8s.io/v1beta2"
    )
    assert art.filename == "kai-topology.yaml"


# ----- Volcano ------------------------------------------------------------------------


def test_volcano_hypernodes_tiers_members_and_labels() -> None:
    art = render(three_tier(), "volcano")
    docs = list(yaml.safe_load_all(art.content))
    assert docs == art.objects
    for doc in docs:
        check_hypernode_crd(doc)
        assert doc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "topocast"
    by_name = {d["metadata"]["name"]: d for d in docs}
    assert set(by_name) == {"leaf-1", "leaf-2", "spine-a", "core"}
    leaf = by_name["leaf-1"]["spec"]
    assert (leaf["tier"], leaf["tierName"]) == (1, "tier-0")
    assert leaf["members"] == [
        {"type": "Node", "selector": {"exactMatch": {"name": "n1"}}},
        {"type": "Node", "selector": {"exactMatch": {"name": "n2"}}},
    ]
    spine = by_name["spine-a"]["spec"]
    assert (spine["tier"], spine["tierName"]) == (2, "tier-1")
    assert [m["selector"]["exactMatch"]["name"] for m in spine["members"]] == ["leaf-1", "leaf-2"]
    assert {m["type"] for m in spine["members"]} == {"HyperNode"}
    assert by_name["core"]["spec"]["tier"] == 3


def test_volcano_maps_ids_to_dns_names_without_collisions() -> None:
    long_leaf = "Leaf-" + "x" * 59  # 64 characters: too long for a HyperNode name
    g = graph(
        Node(name="a", fabric=["S1", "Core_1"]),
        Node(name="b", fabric=["s1", "Core_1"]),
        Node(name="c", fabric=[long_leaf, "Core_1"]),
    )
    docs = render(g, "volcano").objects
    names = [d["metadata"]["name"] for d in docs]
    assert len(set(names)) == 4
    for doc in docs:
        check_hypernode_crd(doc)
    ids = {d["metadata"]["annotations"]["topocast.dev/switch-id"]: d["metadata"]["name"] for d in docs}
    assert ids["s1"] == "s1" and ids["S1"] != "s1" and ids["S1"].startswith("s1-")
    core = next(d for d in docs if d["metadata"]["annotations"]["topocast.dev/switch-id"] == "Core_1")
    assert sorted(m["selector"]["exactMatch"]["name"] for m in core["spec"]["members"]) == sorted(
        ids[x] for x in ("S1", "s1", long_leaf)
    )


def test_volcano_node_names_that_kubernetes_rejects_are_left_out_with_a_warning() -> None:
    long_ok = "gpu-" + "a" * 70 + ".example.com"
    g = graph(
        Node(name="Node201", fabric=["leaf"]),
        Node(name="gpu-1", fabric=["leaf"]),
        Node(name=long_ok, fabric=["leaf"]),
        Node(name="Upper", fabric=["other"]),
    )
    art = render(g, "volcano")
    (leaf,) = art.objects  # 'other' had no valid node left: no empty HyperNode
    check_hypernode_crd(leaf)
    selectors = [m["selector"] for m in leaf["spec"]["members"]]
    assert {"exactMatch": {"name": "gpu-1"}} in selectors
    (regex,) = [s["regexMatch"]["pattern"] for s in selectors if "regexMatch" in s]
    assert re.fullmatch(regex, long_ok) and not re.fullmatch(regex, long_ok.replace(".", "x"))
    assert any("Node201" in w and "Upper" in w for w in art.warnings)


def test_volcano_switch_with_nodes_and_switches_gets_a_tier_above_its_children() -> None:
    g = graph(Node(name="a", fabric=["leaf", "spine"]), Node(name="b", fabric=["spine"]))
    art = render(g, "volcano")
    spine = next(d for d in art.objects if d["metadata"]["name"] == "spine")
    assert spine["spec"]["tier"] == 2
    assert {m["type"] for m in spine["spec"]["members"]} == {"Node", "HyperNode"}
    assert any("mix" in w for w in art.warnings)


def test_object_yaml_is_exactly_what_pyyaml_prints() -> None:
    # Names that YAML would read back as numbers, booleans or null must come out quoted.
    tricky = ["1101", "1e3", "yes", "null", "on", "0x1f", "gpu-1"]
    g = graph(*(Node(name=n, fabric=["leaf", "spine"], accelerator="nvl") for n in tricky))
    for fmt in ("volcano", "kueue", "kai"):
        art = render(g, fmt)
        assert art.content == yaml.safe_dump_all(art.objects, sort_keys=False, explicit_start=True), fmt
    members = yaml.safe_load_all(render(g, "volcano").content)
    names = {m["selector"]["exactMatch"]["name"] for d in members for m in d["spec"]["members"] if m["type"] == "Node"}
    assert names == set(tricky)


# ----- Slinky -------------------------------------------------------------------------


def test_slinky_configmap_holds_the_slurm_artifact() -> None:
    options = RenderOptions(slinky=SlinkyOptions(namespace="hpc", configmap="slurm-config-extra", key="topology.conf"))
    art = render(three_tier(), "slinky", options)
    doc = yaml.safe_load(art.content)
    assert doc == art.objects[0]
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "ConfigMap")
    assert (doc["metadata"]["namespace"], doc["metadata"]["name"]) == ("hpc", "slurm-config-extra")
    tree = render(three_tier(), "slurm-tree", options).content
    assert doc["data"] == {"topology.conf": tree}
    ann = doc["metadata"]["annotations"]
    assert ann["topocast.dev/managed-by"] == "topocast"
    assert ann["topocast.dev/sha256"] == hashlib.sha256(tree.encode()).hexdigest()
    assert ann["topocast.dev/plugin"] == "topology/tree"
    assert "last-updated" not in art.content
    assert render(three_tier(), "slinky", options).content == art.content  # reproducible


def test_slinky_block_content_reports_block_sizes() -> None:
    options = RenderOptions(block_sizes=[2], slinky=SlinkyOptions(content="slurm-block", key="topology.conf"))
    doc = render(three_tier(), "slinky", options).objects[0]
    assert doc["metadata"]["annotations"]["topocast.dev/plugin"] == "topology/block"
    assert doc["metadata"]["annotations"]["topocast.dev/block-sizes"] == "2"
    assert "BlockName=" in doc["data"]["topology.conf"]


@pytest.mark.parametrize(
    ("slinky", "field"),
    [
        (SlinkyOptions(namespace="Slurm_NS"), "slinky.namespace"),
        (SlinkyOptions(configmap="bad name"), "slinky.configmap"),
        (SlinkyOptions(key="topo/conf"), "slinky.key"),
    ],
)
def test_slinky_bad_names_are_refused(slinky: SlinkyOptions, field: str) -> None:
    with pytest.raises(RenderError, match=field):
        render(three_tier(), "slinky", RenderOptions(slinky=slinky))


_YAML_SLINKY = SlinkyOptions(content="slurm-yaml", key="topology.yaml")


def test_slinky_spec_names_the_topology_of_the_options() -> None:
    from topocast.renderers.slinky import SPEC_ANNOTATION, node_annotations

    options = RenderOptions(topologies={"p1": {"plugin": "tree"}}, slinky=_YAML_SLINKY)
    assert node_annotations(three_tier(), options)["n1"] == {SPEC_ANNOTATION: "p1:core:spine-a:leaf-1"}


@pytest.mark.parametrize("name", ["x,y", "a:b", "x y", ""])
def test_slinky_refuses_a_topology_name_that_would_break_its_spec(name: str) -> None:
    from topocast.renderers.slinky import node_annotations

    # "x,y" would make the spec "x,y:core:spine-a:leaf-1": two parts, neither of them this topology
    with pytest.raises(ValidationError, match=r"topologies\n.*topology '.*': .*\(topocast pull and node-topology"):
        RenderOptions(topologies={name: {"plugin": "tree"}}, slinky=_YAML_SLINKY)
    # options copied without validation (model_copy) are refused at render: no ConfigMap, no spec
    bad = {name: TopologySpec(plugin="tree")}
    unchecked = RenderOptions(slinky=_YAML_SLINKY).model_copy(update={"topologies": bad})
    with pytest.raises(RenderError, match=rf"^topologies: topology {re.escape(repr(name))}: "):
        render(three_tier(), "slinky", unchecked)
    with pytest.raises(RenderError, match=rf"^topologies: topology {re.escape(repr(name))}: "):
        node_annotations(three_tier(), unchecked)


def test_slinky_refuses_content_over_the_configmap_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from topocast.renderers import slinky

    monkeypatch.setattr(slinky, "MAX_CONFIGMAP_BYTES", 10)
    with pytest.raises(RenderError, match="ConfigMap"):
        render(three_tier(), "slinky")


def test_slinky_node_annotations_skip_empty_specs(monkeypatch: pytest.MonkeyPatch) -> None:
    from topocast.renderers import slinky

    calls: list[str] = []

    def node_specs(g: TopologyGraph, options: RenderOptions, content: str) -> dict[str, str]:
        calls.append(content)
        return {"n1": "default:core:spine-a:leaf-1", "n2": ""}

    stub = types.ModuleType("topocast.renderers.slurm_specs")
    stub.node_specs = node_specs  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "topocast.renderers.slurm_specs", stub)
    options = RenderOptions(slinky=SlinkyOptions(content="slurm-block"))
    assert slinky.node_annotations(three_tier(), options) == {
        "n1": {"topology.slinky.slurm.net/spec": "default:core:spine-a:leaf-1"}
    }
    assert calls == ["slurm-block"]
