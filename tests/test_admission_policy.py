"""infra/k8s/admission-policy.yaml stays in step with what the publisher really owns.

The policy's CEL is evaluated only by a real kube-apiserver (none runs here); these checks pin what
can drift: the group it matches is the one rbac.yaml binds, the label keys and the annotation it
allows are the renderers' defaults, the managed-by label is the one the Volcano renderer writes, and
every policy has a Deny binding.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from topocast.k8s.labels import LABELS_SHA_ANNOTATION, ClusterNode, DesiredNode, diff_node
from topocast.renderers.base import DEFAULT_ACCELERATOR_KEY, DEFAULT_SUBDOMAIN_KEY, DEFAULT_TIER_PREFIX, LabelScheme
from topocast.renderers.k8s_common import MANAGED_BY, MANAGED_BY_LABEL
from topocast.renderers.k8s_labels import owns_key
from topocast.renderers.slinky import SPEC_ANNOTATION

K8S = Path(__file__).resolve().parent.parent / "infra" / "k8s"


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def test_every_policy_matches_the_publisher_group_and_is_bound_to_deny() -> None:
    group = next(s["name"] for d in docs("rbac.yaml") if d["kind"] == "ClusterRoleBinding" for s in d["subjects"])
    policies = {
        d["metadata"]["name"]: d for d in docs("admission-policy.yaml") if d["kind"] == "ValidatingAdmissionPolicy"
    }
    bindings = {d["spec"]["policyName"]: d for d in docs("admission-policy.yaml") if d["kind"].endswith("Binding")}
    assert set(policies) == {"topocast-publisher-nodes", "topocast-publisher-hypernodes"}
    assert set(bindings) == set(policies)
    for name, policy in policies.items():
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert [c["expression"] for c in policy["spec"]["matchConditions"]] == [f"'{group}' in request.userInfo.groups"]
        assert bindings[name]["spec"]["validationActions"] == ["Deny"]


def test_node_policy_allows_only_the_default_owned_keys_and_the_slinky_annotation() -> None:
    policy = next(d for d in docs("admission-policy.yaml") if d["metadata"]["name"] == "topocast-publisher-nodes")
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}]
    owned = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "ownedLabel")
    assert f"k.startsWith('{DEFAULT_TIER_PREFIX}')" in owned
    assert f"k in ['{DEFAULT_ACCELERATOR_KEY}', '{DEFAULT_SUBDOMAIN_KEY}']" in owned
    checks = [v["expression"] for v in policy["spec"]["validations"]]
    assert "object.spec == oldObject.spec" in checks
    assert f"variables.changedAnnotations.all(k, k in ['{SPEC_ANNOTATION}', '{LABELS_SHA_ANNOTATION}'])" in checks


def test_hypernode_policy_covers_create_update_delete_of_managed_objects_only() -> None:
    policy = next(d for d in docs("admission-policy.yaml") if d["metadata"]["name"] == "topocast-publisher-hypernodes")
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == (["topology.volcano.sh"], ["hypernodes"])
    assert sorted(rule["operations"]) == ["CREATE", "DELETE", "UPDATE"]
    managed = " ".join(v["expression"] for v in policy["spec"]["variables"])
    assert f"metadata.labels['{MANAGED_BY_LABEL}'] == '{MANAGED_BY}'" in managed
    assert managed.count("== null ||") == 2, "DELETE has no object, CREATE no oldObject"


# ----- the CEL itself, evaluated by cel-python (a CEL implementation; kube-apiserver uses cel-go) --------
PUBLISHER = {"username": "arn:aws:sts::1:assumed-role/topocast-publish", "groups": ["topocast:publishers"]}
ADMIN = {"username": "admin", "groups": ["system:masters"]}


def admit(policy_name: str, user: dict, obj: dict | None, old: dict | None) -> list[str]:
    """The failed validations' messages (empty: allowed; None-matching requests are allowed unchecked)."""
    celpy = pytest.importorskip("celpy")
    policy = next(d for d in docs("admission-policy.yaml") if d["metadata"]["name"] == policy_name)
    env = celpy.Environment()

    def run(expr: str, activation: dict) -> object:
        return env.program(env.compile(expr)).evaluate(activation)

    base = {
        "request": celpy.json_to_cel({"userInfo": user}),
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
    }
    if not all(run(c["expression"], base) for c in policy["spec"]["matchConditions"]):
        return []
    variables = celpy.celtypes.MapType({})
    for var in policy["spec"].get("variables", []):  # in order: a variable may use the earlier ones
        variables[celpy.celtypes.StringType(var["name"])] = run(var["expression"], {**base, "variables": variables})
    activation = {**base, "variables": variables}
    return [
        v.get("message", v["expression"]) for v in policy["spec"]["validations"] if not run(v["expression"], activation)
    ]


def node(labels: dict, annotations: dict | None = None, taints: list | None = None) -> dict:
    return {
        "metadata": {"name": "gpu-1", "labels": labels, "annotations": annotations or {}},
        "spec": {"providerID": "aws:///us-east-1a/i-0abc", **({"taints": taints} if taints else {})},
    }


BEFORE = node({"node-role.kubernetes.io/worker": "", "fabric.topograph.run/tier-0": "leaf-1", "team": "a"})


def test_the_publisher_may_change_its_own_labels_and_the_slinky_annotation() -> None:
    moved = node(
        {"node-role.kubernetes.io/worker": "", "fabric.topograph.run/tier-0": "leaf-2", "team": "a",
         "accelerator.topograph.run/domain": "nvl-7"},
        {"topology.slinky.slurm.net/spec": "topology-tree:leaf-2"},
    )  # fmt: skip
    assert admit("topocast-publisher-nodes", PUBLISHER, moved, BEFORE) == []


def test_the_publishers_own_patch_with_its_labels_hash_is_admitted() -> None:
    """The PATCH the publisher really sends (labels + ``topocast.dev/labels-sha256``), applied to a node:
    a policy that refused the hash would refuse every label publish with 422."""
    meta = BEFORE["metadata"]
    live = ClusterNode("gpu-1", BEFORE["spec"]["providerID"], meta["labels"], meta["annotations"])
    want = DesiredNode(
        "gpu-1", "i-0abc", {"fabric.topograph.run/tier-0": "leaf-2", "accelerator.topograph.run/domain": "nvl-7"}
    )
    patch = diff_node(live, want, lambda k: owns_key(k, LabelScheme()))
    assert patch is not None and LABELS_SHA_ANNOTATION in patch.body()["metadata"]["annotations"]
    body = patch.body()["metadata"]
    labels = {k: v for k, v in {**meta["labels"], **body["labels"]}.items() if v is not None}
    after = node(labels, {**meta["annotations"], **body["annotations"]})
    assert admit("topocast-publisher-nodes", PUBLISHER, after, BEFORE) == []


@pytest.mark.parametrize(
    "after",
    [
        node({"fabric.topograph.run/tier-0": "leaf-1", "team": "a"}),  # strips node-role
        node({"node-role.kubernetes.io/worker": "", "fabric.topograph.run/tier-0": "leaf-1", "team": "b"}),
        node({**BEFORE["metadata"]["labels"]}, {"other.example.com/x": "1"}),
        node({**BEFORE["metadata"]["labels"]}, taints=[{"key": "k", "effect": "NoSchedule"}]),
    ],
    ids=["strip-node-role", "change-foreign-label", "foreign-annotation", "spec-taint"],
)
def test_the_publisher_may_change_nothing_else_on_a_node(after: dict) -> None:
    assert admit("topocast-publisher-nodes", PUBLISHER, after, BEFORE) != []
    assert admit("topocast-publisher-nodes", ADMIN, after, BEFORE) == [], "others are not this policy's business"


def test_hypernodes_only_when_managed_by_topocast() -> None:
    managed = {"metadata": {"name": "s1", "labels": {"app.kubernetes.io/managed-by": "topocast"}}}
    theirs = {"metadata": {"name": "t1", "labels": {"app.kubernetes.io/managed-by": "someone"}}}
    bare = {"metadata": {"name": "b1"}}
    policy = "topocast-publisher-hypernodes"
    assert admit(policy, PUBLISHER, managed, None) == []  # create
    assert admit(policy, PUBLISHER, managed, managed) == []  # update
    assert admit(policy, PUBLISHER, None, managed) == []  # delete
    assert admit(policy, PUBLISHER, None, theirs) != []  # delete someone else's
    assert admit(policy, PUBLISHER, bare, None) != []  # create one without the label
    assert admit(policy, PUBLISHER, theirs, managed) != []  # hand a managed one to someone else
