"""The pure half of node labelling: matching cluster nodes to graph nodes and the minimal diff."""

from __future__ import annotations

import pytest

from topocast.k8s.labels import (
    ClusterNode,
    DesiredNode,
    diff_node,
    instance_from_provider_id,
    plan_labels,
)
from topocast.renderers.base import LabelScheme
from topocast.renderers.k8s_labels import owns_key

T = "fabric.topograph.run/tier-"
D = "accelerator.topograph.run/domain"
SCHEME = LabelScheme()
SHA = "topocast.dev/labels-sha256"


def owned(key: str) -> bool:
    return owns_key(key, SCHEME)


@pytest.mark.parametrize(
    ("provider_id", "instance"),
    [
        ("aws:///us-east-1a/i-0abc", "i-0abc"),
        ("aws:///i-0abc", "i-0abc"),
        ("gce://my-project/us-central1-a/gke-pool-1-abcd", "gke-pool-1-abcd"),
        ("ocid1.instance.oc1.iad.xyz", "ocid1.instance.oc1.iad.xyz"),
        ("", None),
        (None, None),
    ],
)
def test_instance_from_provider_id(provider_id: str | None, instance: str | None) -> None:
    assert instance_from_provider_id(provider_id) == instance


def want(node: str, id: str | None = None, **labels: str) -> DesiredNode:
    return DesiredNode(node=node, id=id, labels=labels)


def test_matching_by_provider_id_annotation_and_name() -> None:
    cluster = [
        ClusterNode("ip-10-0-0-1", "aws:///us-east-1a/i-1"),
        ClusterNode("gke-pool-1-abcd", "gce://p/z/gke-pool-1-abcd"),
        ClusterNode("bm-7", None, annotations={"topograph.run/instance": "host-7"}),
        ClusterNode("gpu-9"),
        ClusterNode("cpu-0"),
    ]
    desired = [
        want("gpu-1", "i-1"),
        want("gke-pool-1-abcd", "123456789"),  # GCE numeric id: matched through the name in providerID
        want("bm-seven", "host-7"),
        want("gpu-9"),
        want("gpu-404", "i-404"),
    ]

    plan = plan_labels(cluster, desired, owned)

    assert sorted(plan.unchanged) == ["bm-7", "gke-pool-1-abcd", "gpu-9", "ip-10-0-0-1"]
    assert plan.matched_by == {"provider-id": 2, "annotation": 1, "name": 1}
    assert plan.missing_in_cluster == ["gpu-404"]
    assert plan.missing_in_graph == ["cpu-0"]


def test_match_order_is_configurable() -> None:
    cluster = [ClusterNode("gpu-1", "aws:///z/i-2")]
    desired = [want("gpu-1", "i-1", **{f"{T}0": "a"}), want("gpu-2", "i-2", **{f"{T}0": "b"})]

    by_name = plan_labels(cluster, desired, owned, match_by=["name"])
    by_id = plan_labels(cluster, desired, owned, match_by=["provider-id"])

    assert by_name.patches == []  # gpu-1 by name, but its provider ID says i-2: refused
    assert "replaced instance" in by_name.warnings[0]
    assert by_id.patches[0].graph_node == "gpu-2"


def test_a_replaced_instance_reusing_a_hostname_is_not_labelled() -> None:
    cluster = [ClusterNode("gpu-1", "aws:///us-east-1a/i-new")]

    plan = plan_labels(cluster, [want("gpu-1", "i-old", **{f"{T}0": "leaf-1"})], owned)

    assert plan.patches == [] and plan.missing_in_graph == ["gpu-1"] and plan.missing_in_cluster == ["gpu-1"]
    assert "provider ID says instance i-new but graph node gpu-1 is instance i-old" in plan.warnings[0]


def test_two_cluster_nodes_claiming_one_graph_node() -> None:
    cluster = [ClusterNode("a", "aws:///z/i-1"), ClusterNode("b", None, annotations={"topograph.run/instance": "i-1"})]

    plan = plan_labels(cluster, [want("gpu-1", "i-1", **{f"{T}0": "x"})], owned)

    assert [p.node for p in plan.patches] == ["a"]
    assert plan.missing_in_graph == ["b"]
    assert "both match graph node gpu-1" in plan.warnings[0]


def test_diff_sets_changed_removes_stale_owned_and_ignores_foreign() -> None:
    current = ClusterNode(
        "n",
        labels={f"{T}0": "leaf-1", f"{T}1": "spine-old", f"{T}2": "core", "team": "ml", f"{T}x": "foreign", D: "d1"},
    )

    patch = diff_node(current, want("n", None, **{f"{T}0": "leaf-1", f"{T}1": "spine-new", D: "d1"}), owned)

    assert patch is not None
    assert (patch.set_labels, patch.remove_labels, patch.drifted) == ({f"{T}1": "spine-new"}, (f"{T}2",), False)
    assert patch.body()["metadata"]["labels"] == {f"{T}1": "spine-new", f"{T}2": None}
    assert list(patch.body()["metadata"]["annotations"]) == [SHA]


def test_kept_keys_are_neither_set_nor_removed() -> None:
    current = ClusterNode("n", labels={f"{T}0": "leaf", D: "old-domain"})
    desired = DesiredNode("n", None, {f"{T}0": "leaf"}, keep=frozenset({D}))

    assert diff_node(current, desired, owned) is None


def test_annotations_are_set_when_different_and_never_removed() -> None:
    current = ClusterNode("n", labels={f"{T}0": "leaf"}, annotations={"topology.slinky.slurm.net/spec": "old"})
    desired = DesiredNode("n", None, {f"{T}0": "leaf"}, annotations={"topology.slinky.slurm.net/spec": "new"})

    patch = diff_node(current, desired, owned)

    assert patch is not None
    assert "labels" not in patch.body()["metadata"]
    assert patch.body()["metadata"]["annotations"]["topology.slinky.slurm.net/spec"] == "new"
    assert diff_node(current, DesiredNode("n", None, {f"{T}0": "leaf"}), owned) is None


def test_a_hand_edit_after_topocast_labelled_the_node_is_drift() -> None:
    desired = want("n", None, **{f"{T}0": "leaf-1", f"{T}1": "spine"})
    first = diff_node(ClusterNode("n", labels={}), desired, owned)
    assert first is not None and not first.drifted
    stamp = first.body()["metadata"]["annotations"][SHA]
    # topocast's PATCH landed, then someone changed tier-0 and removed tier-1 by hand
    edited = ClusterNode("n", labels={f"{T}0": "leaf-9"}, annotations={SHA: stamp})

    repair = diff_node(edited, desired, owned)

    assert repair is not None and repair.drifted
    assert repair.body() == {"metadata": {"labels": {f"{T}0": "leaf-1", f"{T}1": "spine"}}}  # stamp already there
    # the desired state changing is a change, not drift
    moved = want("n", None, **{f"{T}0": "leaf-2", f"{T}1": "spine"})
    change = diff_node(ClusterNode("n", labels=dict(desired.labels), annotations={SHA: stamp}), moved, owned)
    assert change is not None and not change.drifted
    # correct labels without the stamp (labelled by an older topocast): no PATCH just for the stamp
    assert diff_node(ClusterNode("n", labels=dict(desired.labels)), desired, owned) is None


def test_explicit_fabric_keys_still_clean_up_old_tier_labels() -> None:
    scheme = LabelScheme(fabric_keys=["example.com/leaf", "example.com/spine"])
    current = ClusterNode("n", labels={f"{T}0": "leaf", f"{T}1": "spine"})

    patch = diff_node(current, want("n", None, **{"example.com/leaf": "leaf"}), lambda k: owns_key(k, scheme))

    assert patch is not None
    assert patch.set_labels == {"example.com/leaf": "leaf"}
    assert patch.remove_labels == (f"{T}0", f"{T}1")


def test_malformed_label_object_names_itself() -> None:
    with pytest.raises(ValueError, match=r"k8s-labels object .* is malformed"):
        DesiredNode.from_object({"node": "n1"})
