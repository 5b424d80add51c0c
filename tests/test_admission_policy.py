"""infra/k8s/admission-policy.yaml stays in step with what the publisher really owns.

The policy's CEL is evaluated only by a real kube-apiserver (none runs here); these checks pin what
can drift: the group it matches is the one rbac.yaml binds, the label keys and the annotation it
allows are the renderers' defaults, the managed-by label is the one the Volcano renderer writes, and
every policy has a Deny binding.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from topocast.renderers.base import DEFAULT_ACCELERATOR_KEY, DEFAULT_SUBDOMAIN_KEY, DEFAULT_TIER_PREFIX
from topocast.renderers.k8s_common import MANAGED_BY, MANAGED_BY_LABEL
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
    assert f"variables.changedAnnotations.all(k, k == '{SPEC_ANNOTATION}')" in checks


def test_hypernode_policy_covers_create_update_delete_of_managed_objects_only() -> None:
    policy = next(d for d in docs("admission-policy.yaml") if d["metadata"]["name"] == "topocast-publisher-hypernodes")
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == (["topology.volcano.sh"], ["hypernodes"])
    assert sorted(rule["operations"]) == ["CREATE", "DELETE", "UPDATE"]
    managed = " ".join(v["expression"] for v in policy["spec"]["variables"])
    assert f"metadata.labels['{MANAGED_BY_LABEL}'] == '{MANAGED_BY}'" in managed
    assert managed.count("== null ||") == 2, "DELETE has no object, CREATE no oldObject"
