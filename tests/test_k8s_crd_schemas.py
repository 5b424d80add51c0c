"""Every rendered Kueue / KAI / Volcano object against the upstream CRDs, as kube-apiserver would judge it.

For each CRD file in ``../shared/conformance/crds/`` and each *served* version:

* the version's ``openAPIV3Schema`` (jsonschema), in a *pruning* mode: every object
  schema that lists ``properties`` and neither ``additionalProperties`` nor
  ``x-kubernetes-preserve-unknown-fields`` gets ``additionalProperties: false``,
  so a field the API server would silently drop fails the test instead;
* every ``x-kubernetes-validations`` CEL rule at the place in the object it
  applies to, evaluated with cel-python; transition rules (``oldSelf``) only for
  an update, with the previous object;
* for HyperNodes, Volcano's ValidatingAdmissionPolicy (its variables, then its
  validations). The two Kubernetes CEL library functions it uses and cel-python
  lacks, ``string.split()`` and ``format.qualifiedName().validate()``, are
  implemented here after the Kubernetes definitions (apimachinery
  ``IsQualifiedName``).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from topocast.model.graph import Node, TopologyGraph
from topocast.renderers import render
from topocast.renderers.base import LabelScheme, RenderOptions
from topocast_sim.synthetic import synthetic_graph

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema validates rendered objects against the CRDs")
celpy = pytest.importorskip("celpy", reason="cel-python evaluates the CRDs' CEL rules (pip install -e .[dev])")

CRDS = Path(__file__).resolve().parent.parent.parent / "shared" / "conformance" / "crds"
pytestmark = pytest.mark.skipif(not CRDS.is_dir(), reason=f"upstream CRDs not found at {CRDS}")

GROUP_FORMAT = {"kueue.x-k8s.io": "kueue", "kai.scheduler": "kai", "topology.volcano.sh": "volcano"}


# ----- CRDs ---------------------------------------------------------------------------------------------------


@functools.cache
def served_versions() -> list[tuple[str, str, dict[str, Any]]]:
    """(file, version, openAPIV3Schema) for every served version of every CRD file."""
    if not CRDS.is_dir():
        return []
    out = []
    for path in sorted(CRDS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            for version in doc["spec"]["versions"]:
                if version.get("served"):
                    out.append((path.name, version["name"], version["schema"]["openAPIV3Schema"]))
    return out


@functools.cache
def group_of(file: str) -> str:
    doc = next(d for d in yaml.safe_load_all((CRDS / file).read_text()) if d)
    return str(doc["spec"]["group"])


def pruning(schema: Any) -> Any:
    """The schema with ``additionalProperties: false`` wherever the API server would prune unknown fields."""
    if isinstance(schema, list):
        return [pruning(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: pruning(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


# ----- CEL ------------------------------------------------------------------------------------------------------

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def qualified_name_errors(value: str) -> list[str]:
    """apimachinery ``validation.IsQualifiedName``."""
    prefix, sep, name = value.rpartition("/")
    errors = []
    if sep and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        errors.append("prefix part must be a DNS-1123 subdomain")
    if not name or len(name) > 63 or not _NAME.match(name):
        errors.append("name part must consist of alphanumeric characters, '-', '_' or '.'")
    return errors


def _split(text: Any, sep: Any) -> Any:
    return celpy.celtypes.ListType([celpy.celtypes.StringType(p) for p in str(text).split(str(sep))])


def _qualified_name(_format: Any) -> Any:
    return celpy.celtypes.StringType("qualifiedName")


def _validate(checker: Any, value: Any) -> Any:
    assert str(checker) == "qualifiedName", checker
    return celpy.celtypes.ListType([celpy.celtypes.StringType(e) for e in qualified_name_errors(str(value))])


def _has_value(optional: Any) -> Any:
    return celpy.celtypes.BoolType(len(optional) > 0)


FUNCTIONS = {"split": _split, "qualifiedName": _qualified_name, "validate": _validate, "hasValue": _has_value}
_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}


def cel(expression: str, **activation: Any) -> Any:
    program = _PROGRAMS.get(expression)
    if program is None:
        program = _PROGRAMS[expression] = _ENV.program(_ENV.compile(expression), functions=FUNCTIONS)
    return program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})


def holds(result: Any) -> bool:
    """A rule holds when it evaluates to the CEL boolean true (an evaluation error does not hold)."""
    return isinstance(result, celpy.celtypes.BoolType) and bool(result)


def rule_failures(schema: dict[str, Any], value: Any, old: Any = None, path: str = "") -> Iterator[str]:
    """Every CEL rule of ``schema`` that ``value`` breaks, where the rule sits (old = previous value, or None)."""
    for rule in schema.get("x-kubernetes-validations") or []:
        transition = "oldSelf" in rule["rule"]
        if transition and old is None:
            continue  # transition rules apply to updates only
        args = {"self": value, **({"oldSelf": old} if transition else {})}
        if not holds(cel(rule["rule"], **args)):
            yield f"{path or '.'}: {rule.get('message') or rule['rule']}"
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                yield from rule_failures(
                    sub, value[key], (old or {}).get(key) if isinstance(old, dict) else None, f"{path}.{key}"
                )
    elif isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            yield from rule_failures(schema["items"], item, None, f"{path}[{i}]")


def problems(obj: dict[str, Any], schema: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    validator = jsonschema.Draft7Validator(pruning(schema))
    found = [f"{'.'.join(map(str, e.absolute_path)) or '.'}: {e.message}" for e in validator.iter_errors(obj)]
    return found + list(rule_failures(schema, obj, old))


def admission_failures(obj: dict[str, Any]) -> list[str]:
    """Volcano's ValidatingAdmissionPolicy for HyperNodes, evaluated on ``obj``."""
    policy = next(
        d
        for d in yaml.safe_load_all((CRDS / "volcano_hypernodes_vap.yaml").read_text())
        if d["kind"] == "ValidatingAdmissionPolicy"
    )
    variables: dict[str, Any] = {}
    for var in policy["spec"]["variables"]:
        variables[var["name"]] = cel_to_json(cel(var["expression"], object=obj, format="format"))
    return [
        v["message"]
        for v in policy["spec"]["validations"]
        if not holds(cel(v["expression"], object=obj, variables=variables, format="format"))
    ]


def cel_to_json(value: Any) -> Any:
    if isinstance(value, list):
        return [cel_to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): cel_to_json(v) for k, v in value.items()}
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    return str(value)


# ----- graphs -----------------------------------------------------------------------------------------------


@functools.cache
def graphs() -> dict[str, TopologyGraph]:
    long_name = "gpu-" + "n" * 70 + ".cluster.internal"  # > 63: HyperNode members switch to regexMatch
    odd = TopologyGraph(
        cluster="odd",
        provider="x",
        nodes=[
            Node(name=long_name, fabric=["Leaf_Switch+1", "Spine/A"], accelerator="cb@1"),
            Node(name="gpu-2", fabric=["Leaf_Switch+1", "Spine/A"], accelerator="cb@1"),
            Node(name="gpu-3", fabric=["x" * 64, "Spine/A"]),  # no domain: no accelerator level
            Node(name="lonely"),  # no topology
        ],
    )
    deep = TopologyGraph(
        cluster="deep",
        provider="x",
        nodes=[Node(name=f"n{i}", fabric=[f"t0-{i // 2}", f"t1-{i // 4}", "t2", "t3", "t4"]) for i in range(8)],
    )
    # one NVLink domain on two fabrics: Kueue/KAI levels become [domain, hostname] (docs/kubernetes.md)
    straddling = TopologyGraph(
        cluster="straddling",
        provider="x",
        nodes=[
            Node(name="s1", fabric=["leaf-1", "core-1"], accelerator="nvl-1"),
            Node(name="s2", fabric=["leaf-2", "core-2"], accelerator="nvl-1"),
        ],
    )
    return {"synthetic-512": synthetic_graph(512), "odd-names": odd, "five-tiers": deep, "straddling": straddling}


def objects(fmt: str, graph: TopologyGraph, version: str, **options: Any) -> list[dict[str, Any]]:
    if fmt == "kueue":
        options["kueue_api_version"] = version
    return render(graph, fmt, RenderOptions(**options)).objects


CASES = [(f, v, g) for f, v, _ in served_versions() for g in graphs()]


@pytest.mark.parametrize(("file", "version", "graph_name"), CASES)
def test_rendered_objects_satisfy_every_served_version(file: str, version: str, graph_name: str) -> None:
    schema = next(s for f, v, s in served_versions() if (f, v) == (file, version))
    fmt = GROUP_FORMAT[group_of(file)]
    if fmt == "kueue" and version not in ("v1beta2", "v1beta1", "v1alpha1"):
        pytest.skip(f"topocast does not render kueue {version}")
    rendered = objects(fmt, graphs()[graph_name], version)
    assert rendered
    for obj in rendered:
        assert obj["apiVersion"].endswith("/" + version) or fmt != "kueue"
        assert problems(obj, schema) == [], obj["metadata"]["name"]
        if fmt == "volcano":
            assert admission_failures(obj) == [], obj["metadata"]["name"]


@pytest.mark.parametrize(("file", "version"), [(f, v) for f, v, _ in served_versions() if "kueue" in f or "kai" in f])
def test_publisher_bodies_with_its_annotations_still_validate(file: str, version: str) -> None:
    from topocast.k8s.objects import ANN_MANIFEST_SHA

    schema = next(s for f, v, s in served_versions() if (f, v) == (file, version))
    obj = copy.deepcopy(objects(GROUP_FORMAT[group_of(file)], synthetic_graph(64), version)[0])
    obj["metadata"]["annotations"] = {ANN_MANIFEST_SHA: "0" * 64, "topocast.dev/generation": "7"}
    obj["metadata"]["resourceVersion"] = "123"
    assert problems(obj, schema) == []


# ----- the checks can fail ------------------------------------------------------------------------------------


def test_pruning_mode_rejects_a_field_the_server_would_drop() -> None:
    _file, version, schema = next(x for x in served_versions() if x[0] == "kai_topologies.yaml")
    obj = objects("kai", synthetic_graph(16), version)[0]
    obj["spec"]["levels"][0]["weight"] = 3
    assert any("weight" in p and "Additional properties" in p for p in problems(obj, schema))


def test_cel_rules_catch_hostname_not_last_and_duplicate_levels() -> None:
    _file, version, schema = next(x for x in served_versions() if x[0] == "kueue_topologies.yaml" and x[1] == "v1beta2")
    obj = objects("kueue", synthetic_graph(16), version)[0]
    levels = obj["spec"]["levels"]
    swapped = copy.deepcopy(obj)
    swapped["spec"]["levels"] = [levels[-1], *levels[:-1]]
    duplicated = copy.deepcopy(obj)
    duplicated["spec"]["levels"] = [levels[0], *levels]
    assert problems(swapped, schema) and problems(duplicated, schema)


def test_kueue_v1beta1_levels_are_immutable_which_is_why_the_publisher_recreates() -> None:
    """The transition rule ``self == oldSelf`` (v1beta1, KAI) forbids the update a shrinking fabric needs;
    v1beta2 allows it while hostname stays the lowest level."""
    g3, g2 = (
        synthetic_graph(64),
        TopologyGraph(
            cluster="c",
            provider="x",
            nodes=[n.model_copy(update={"fabric": n.fabric[:2]}) for n in synthetic_graph(64).nodes],
        ),
    )
    by_version = {(f, v): s for f, v, s in served_versions()}
    for (file, version), allowed in (
        (("kueue_topologies.yaml", "v1beta1"), False),
        (("kueue_topologies.yaml", "v1beta2"), True),
        (("kai_topologies.yaml", "v1alpha1"), False),
    ):
        fmt = GROUP_FORMAT[group_of(file)]
        old, new = objects(fmt, g3, version)[0], objects(fmt, g2, version)[0]
        assert old["spec"] != new["spec"]
        assert (problems(new, by_version[(file, version)], old) == []) is allowed, (file, version)


def test_volcano_admission_policy_rejects_what_volcano_rejects() -> None:
    obj = objects("volcano", synthetic_graph(16), "v1alpha1")[0]
    bad_name = copy.deepcopy(obj)
    bad_name["spec"]["members"][0]["selector"] = {"exactMatch": {"name": "Not A Name!"}}
    two = copy.deepcopy(obj)
    two["spec"]["members"][0]["selector"] = {"exactMatch": {"name": "a"}, "regexMatch": {"pattern": "^a$"}}
    paren = copy.deepcopy(obj)
    paren["spec"]["members"][0]["selector"] = {"regexMatch": {"pattern": "^(a$"}}
    assert admission_failures(obj) == []
    assert any("exactMatch validate failed" in m for m in admission_failures(bad_name))
    assert any("more than one selector" in m for m in admission_failures(two))
    assert any("unmatched parentheses" in m for m in admission_failures(paren))


def test_custom_label_keys_still_validate() -> None:
    scheme = LabelScheme(fabric_keys=["example.com/leaf", "example.com/spine"], accelerator_key="example.com/nvl")
    for file, version, schema in served_versions():
        fmt = GROUP_FORMAT[group_of(file)]
        if fmt == "volcano" or (fmt == "kueue" and version not in ("v1beta2", "v1beta1", "v1alpha1")):
            continue
        for obj in objects(fmt, synthetic_graph(64), version, labels=scheme):
            assert problems(obj, schema) == [], (file, version)
