"""The renderers as one registry: each format a ``Renderer`` that declares what it writes and the options it
reads, and every list of formats elsewhere (the Kubernetes publisher, the controller, the CLI, Terraform's
``var.formats`` validation, the docs) derived from that registry or checked against it here.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import get_args

import hcl2
import pytest
from cli_runner import invoke

from topocast.agents.controller import ControllerSettings
from topocast.config import DEFAULT_FORMATS
from topocast.k8s.objects import KINDS
from topocast.model.graph import Node, TopologyGraph
from topocast.publish.kubernetes import KubernetesPublisherConfig
from topocast.renderers import RENDERERS, formats, kubernetes_formats, render_many, renderer
from topocast.renderers.base import Artifact, FormatRenderer, RenderOptions, SlinkyOptions

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "shared" / "topocast" / "renderers"

#: the formats topocast has always written, in ``--format all`` order (worked out from the docs, not the code).
#: A new format joins the registry without editing these lists: the checks that must see every format run over
#: the registry itself (``ALL``); these pin that the known ones stay, in their order and kinds.
EVERY_FORMAT = [
    "slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "kueue", "kai", "volcano", "slinky", "graph", "html",
]  # fmt: skip
KUBERNETES = ("k8s-labels", "kueue", "kai", "volcano", "slinky")
ALL = list(RENDERERS)


def known(names: tuple[str, ...] | list[str]) -> list[str]:
    """``names`` without formats registered after these lists were written."""
    return [n for n in names if n in EVERY_FORMAT]


def small_graph() -> TopologyGraph:
    nodes = [
        Node(name=f"gpu-{i}", id=f"i-{i}", fabric=[f"leaf-{i // 2}", "spine-0"], accelerator=f"nvl-{i // 4}")
        for i in range(8)
    ]
    return TopologyGraph(cluster="c1", provider="test", nodes=nodes)


def test_the_registry_holds_every_format_in_all_order() -> None:
    assert known(ALL) == EVERY_FORMAT
    assert formats() == tuple(ALL)


@pytest.mark.parametrize("fmt", ALL)
def test_each_renderer_writes_what_it_declares(fmt: str) -> None:
    r = renderer(fmt)
    assert r.name == fmt
    [artifact] = render_many(small_graph(), [fmt], RenderOptions(block_sizes=[4]))
    assert (artifact.format, artifact.filename, artifact.media_type) == (fmt, r.filename, r.media_type)
    if r.kind == "kubernetes-objects":  # what the Kubernetes publisher applies
        assert artifact.objects


def test_unknown_format_is_one_line_naming_the_known_ones() -> None:
    result = invoke(["render", "--list-options", "nope"])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "topocast: error: unknown format 'nope'; known: " + ", ".join(ALL) + ", all"
    ]


def test_a_format_registered_at_run_time_renders_with_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    def render_count(graph: TopologyGraph, options: RenderOptions) -> Artifact:
        return Artifact("count", "count.txt", f"{len(graph.nodes)}\n", "text/plain", len(graph.nodes))

    monkeypatch.setitem(
        RENDERERS, "count", FormatRenderer("count", "count.txt", "text/plain", "file", (), render_count)
    )
    arts = render_many(small_graph(), ["slurm-tree", "count"])
    assert [a.format for a in arts] == ["slurm-tree", "count"] and arts[1].content == "8\n"
    assert "count" not in kubernetes_formats()


def test_a_renderer_cannot_declare_an_option_that_does_not_exist() -> None:
    with pytest.raises(TypeError, match=r"renderer 'x' reads unknown options \['block_size'\]"):
        FormatRenderer("x", "x.txt", "text/plain", "file", ("block_size",), lambda g, o: None)  # type: ignore[arg-type,return-value]


# ----- each renderer owns its options: what it reads is what it declares ---------------------------------------

#: RenderOptions properties -> the fields they read
PROPERTIES = {
    "slurm_release": {"slurm_version"},
    "positional_block_names": {"block_names", "topograph_compat"},
    "keeps_no_topology_switch": {"no_topology_switch", "topograph_compat"},
}
FIELDS = set(RenderOptions.model_fields)


@cache
def _definitions(module: str) -> tuple[dict[str, tuple[set[str], set[str]]], dict[str, tuple[str, str]]]:
    """Per top-level definition of ``renderers/<module>.py``: the RenderOptions fields it reads (``options.X``,
    ``self.options.X``) and the names it refers to; plus what it imports from other renderer modules."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    imported: dict[str, tuple[str, str]] = {}
    definitions: dict[str, tuple[set[str], set[str]]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("topocast.renderers."):
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module.rsplit(".", 1)[1], alias.name)  # type: ignore[union-attr]
        names: list[str] = []
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names = [node.name]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        reads: set[str] = set()
        refs: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Attribute) and sub.attr in FIELDS | PROPERTIES.keys():
                holder = sub.value
                held_by = holder.id if isinstance(holder, ast.Name) else getattr(holder, "attr", None)
                if held_by == "options":
                    reads |= PROPERTIES.get(sub.attr, {sub.attr})
            elif isinstance(sub, ast.Name):
                refs.add(sub.id)
        for name in names:
            definitions[name] = (reads, refs)
    return definitions, imported


def options_read(module: str, name: str = "RENDERER") -> set[str]:
    """The RenderOptions fields ``name`` of ``module`` reads, following what it calls into other renderer modules."""
    seen: set[tuple[str, str]] = set()
    reads: set[str] = set()
    todo = [(module, name)]
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        definitions, imported = _definitions(key[0])
        if key[1] not in definitions:
            continue
        own, refs = definitions[key[1]]
        reads |= own
        todo += [(key[0], r) for r in refs if r in definitions] + [imported[r] for r in refs if r in imported]
    return reads


def test_the_walk_finds_reads_through_calls_into_other_modules() -> None:
    # kai reads topology_object_name itself and labels only through k8s_topology.topology_levels
    assert options_read("kai") == {"topology_object_name", "labels"}
    # slurm-yaml's _Context reads self.options.positional_block_names: the fields behind the property
    assert {"block_names", "topograph_compat", "topologies"} <= options_read("slurm_yaml")


def module_of(fmt: str) -> str:
    entry = RENDERERS[fmt]
    assert isinstance(entry, str)
    return entry.split(":")[0].rsplit(".", 1)[1]


@pytest.mark.parametrize("fmt", ALL)
def test_each_renderer_declares_exactly_the_options_it_reads(fmt: str) -> None:
    expected = options_read(module_of(fmt))
    if fmt == "slinky":  # renders its content format (slinky.content): reads that format's options too
        for content in get_args(SlinkyOptions.model_fields["content"].annotation):
            expected |= options_read(module_of(content))
    declared = renderer(fmt).reads
    assert len(set(declared)) == len(declared)
    assert set(declared) == expected


def test_slinky_holds_exactly_the_slurm_formats_its_option_names() -> None:
    from topocast.renderers.slinky import CONTENT

    allowed = get_args(SlinkyOptions.model_fields["content"].annotation)
    assert sorted(allowed) == ["slurm-block", "slurm-tree", "slurm-yaml"]
    assert sorted(CONTENT) == sorted(allowed) == sorted(formats("slurm"))
    assert all(CONTENT[f] is renderer(f) for f in allowed)  # the registry's own renderers, not copies


def test_list_options_prints_the_options_a_format_reads() -> None:
    result = invoke(["render", "--list-options", "kai"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "kai:",
        "  labels (LabelScheme, default "
        '{"tier_prefix": "fabric.topograph.run/tier-", "fabric_keys": null, '
        '"accelerator_key": "accelerator.topograph.run/domain", '
        '"subdomain_key": "accelerator.topograph.run/sub-domain"}'
        "): Which label keys carry the topology: tier_prefix, fabric_keys, accelerator_key, subdomain_key "
        "(Topograph's v1 keys by default).",
        '  topology_object_name (str, default "topocast"): metadata.name of Kueue/KAI Topology objects.',
    ]
    every = invoke(["render", "--list-options"])
    assert every.exit_code == 0
    headers = [line.split(":")[0] for line in every.stdout.splitlines() if not line.startswith(" ")]
    assert headers == ALL
    assert "volcano: reads no options" in every.stdout.splitlines()


# ----- every list of formats: derived from the registry, or checked against it ---------------------------------


def test_kubernetes_formats_are_derived_from_the_renderers_kinds() -> None:
    assert known(kubernetes_formats()) == list(KUBERNETES)
    assert known(formats("kubernetes-objects")) == list(KUBERNETES[1:])
    assert all(renderer(f).kind.startswith("kubernetes-") for f in kubernetes_formats())
    assert KubernetesPublisherConfig().formats == list(kubernetes_formats())
    assert ControllerSettings().formats == kubernetes_formats()
    # the API kinds the publisher applies: one per object format, no more
    assert set(KINDS) == set(formats("kubernetes-objects"))


def test_publish_help_and_refusal_name_the_kubernetes_formats() -> None:
    shown = invoke(["publish", "--help"])
    assert "formats: " + ", ".join(kubernetes_formats()) + " (default: all of them)" in " ".join(shown.stdout.split())
    result = invoke(["publish", "--graph", "g.json", "-f", "graph", "--dry-run"])
    assert result.exit_code == 2
    assert "--format graph: publish writes only " + ", ".join(kubernetes_formats()) in result.stderr


def test_publisher_options_naming_a_format_it_does_not_write_are_refused(tmp_path: Path) -> None:
    (tmp_path / "k8s.yaml").write_text("formats: [k8s-labels, kueu]\n")
    (tmp_path / "g.json").write_text('{"schema_version": 1, "cluster": "c", "provider": "t", "nodes": []}')
    args = ["publish", "--graph", tmp_path / "g.json", "--k8s-options", tmp_path / "k8s.yaml", "--dry-run"]
    result = invoke([str(a) for a in args])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "topocast: error: --k8s-options: formats: kueu: not a Kubernetes format "
        f"(this publisher writes {', '.join(kubernetes_formats())})"
    ]


def test_render_help_lists_every_format() -> None:
    result = invoke(["render", "--help"])
    assert "formats: " + ", ".join(ALL) + ", or all" in " ".join(result.stdout.split())


TERRAFORM_VARIABLES = [
    "infra/terraform/modules/aws/variables.tf",
    "infra/terraform/modules/gcp/variables.tf",
    "infra/terraform/examples/aws-account/variables.tf",
    "infra/terraform/examples/gcp-project/variables.tf",
]


@pytest.mark.parametrize("path", TERRAFORM_VARIABLES)
def test_terraform_formats_validation_allows_exactly_the_registered_formats(path: str) -> None:
    """Terraform cannot import the registry, so its ``var.formats`` validation is checked against it here."""
    with (ROOT / path).open() as fh:
        variables = hcl2.load(fh)["variable"]  # python-hcl2 keeps HCL's quotes on names and strings
    [formats_var] = [v['"formats"'] for v in variables if '"formats"' in v]
    [rule] = formats_var["validation"]
    [allowed] = re.findall(r"contains\(\[([^\]]*)\], f\)", rule["condition"])
    assert re.findall(r'"([\w-]+)"', allowed) == list(RENDERERS)
    assert rule["error_message"].strip('"') == f"formats must be a non-empty list of: {', '.join(RENDERERS)}."
    assert [f.strip('"') for f in formats_var["default"]] == DEFAULT_FORMATS  # what TOPOCAST_FORMATS defaults to
    assert set(DEFAULT_FORMATS) <= set(RENDERERS)


def _backticked(text: str) -> list[str]:
    return re.findall(r"`([\w-]+)`", text)


def test_docs_list_the_registered_formats() -> None:
    readme = (ROOT / "README.md").read_text()
    [listed] = re.findall(r"^Formats: (.*?\.) ", readme, re.M | re.S)
    assert _backticked(listed) == list(RENDERERS)
    controller = (ROOT / "docs" / "controller.md").read_text()
    [row] = re.findall(r"^\| publish \| render (.*?) and publish them", controller, re.M)
    assert _backticked(row) == list(kubernetes_formats())


@pytest.mark.parametrize("rbac", ["infra/k8s/rbac.yaml", "infra/k8s/controller/rbac.yaml"])
def test_the_shipped_rbac_lets_the_publisher_write_every_object_format(rbac: str) -> None:
    """A new ``kubernetes-objects`` format needs a rule in both Roles/ClusterRoles the repo ships, or the
    publisher's first apply is a 403 in a real cluster (the fake API server here enforces no RBAC)."""
    import yaml

    rules = [
        rule
        for doc in yaml.safe_load_all((ROOT / rbac).read_text())
        if doc and doc.get("kind") in ("ClusterRole", "Role")
        for rule in doc.get("rules", [])
    ]
    for fmt in formats("kubernetes-objects"):
        kind = KINDS[fmt]
        writes = [
            r for r in rules
            if kind.group in r.get("apiGroups", []) and kind.plural in r.get("resources", [])
            and {"patch", "create"} <= set(r.get("verbs", []))
        ]  # fmt: skip
        assert writes, f"{rbac}: no rule lets topocast patch and create {kind.plural}.{kind.group or 'core'} ({fmt})"
