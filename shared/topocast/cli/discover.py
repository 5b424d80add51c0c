"""``topocast discover``: run one provider's discovery once and print the normalized graph.

The same provider code the functions run, built through the same registry
(:func:`topocast.providers.build_provider`), with the operator's own credentials
(AWS: the standard environment, profiles, ``AWS_ENDPOINT_URL``; GCP:
application-default credentials; NetQ: a credentials file or secret ARN).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topocast.errors import ProviderError
from topocast.model.graph import TopologyGraph, dump_graph
from topocast.model.hostlist import expand
from topocast.model.placement import notes_report, set_aside_report
from topocast.providers import PROVIDERS, DiscoveryResult, ProviderInputs, build_provider
from topocast.providers.options import describe_options, options_model, parse_option_pairs
from topocast.safeio.files import write_out


@dataclass
class DiscoverArgs:
    provider: str = "aws"
    cluster: str = "default"
    # aws
    region: str | None = None
    filters: list[str] = field(default_factory=list)
    name_from: str | None = None
    # gcp
    project: str | None = None
    zones: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    compute_endpoint: str | None = None
    # ibnetdiscover / netq
    inputs: list[Path] = field(default_factory=list)
    nodes: str | None = None
    host_regex: str | None = None
    domains: Path | None = None
    topograph_compat: bool = False
    url: str | None = None
    credentials: str | None = None
    premises: list[str] = field(default_factory=list)
    insecure: bool = False
    ca_file: str | None = None
    ib_hcas: list[str] = field(default_factory=list)
    ib_guids: list[str] = field(default_factory=list)
    ib_switches: list[str] = field(default_factory=list)
    # k8s-labels (labels: only nodes with these KEY=VALUE labels)
    kubeconfig: str | None = None
    fabric_keys: list[str] = field(default_factory=list)
    accelerator_key: str | None = None
    preset: str | None = None
    overlays: list[str] = field(default_factory=list)
    # every provider: --option KEY=VALUE (its Options model validates them); --list-options prints them
    option: list[str] = field(default_factory=list)
    list_options: bool = False


#: service -> "module:function" the shell hands a provider as ``sdk_client(service)`` (a provider's own
#: SDK adapter, below the providers; it is called with the provider's validated options)
SDK_CLIENTS = {
    "oci": "topocast.providers.oci_sdk:connect",
    "oci-imds": "topocast.providers.oci_sdk:imds_get",
    "nebius": "topocast.providers.nebius_sdk:connect",
    "azure-compute": "topocast.providers.azure_sdk:connect",
}


def _read_local(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ProviderError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ProviderError(f"{path}: not UTF-8 text") from None


def _local_files(paths: list[Path]) -> Callable[[], dict[str, bytes]]:
    def read() -> dict[str, bytes]:
        out = {}
        for p in paths:
            try:
                out[str(p)] = p.read_bytes()
            except OSError as exc:
                raise ProviderError(f"{p}: cannot read ibnetdiscover output ({exc.strerror})") from None
        return out

    return read


def _secret(ref: str) -> str:
    if ref.startswith("arn:"):
        from topocast.providers.aws_sdk import read_secret_arn

        return read_secret_arn(ref)[0]
    return _read_local(ref)


def _clients(a: DiscoverArgs) -> Callable[[str], Any]:
    """SDK clients with the operator's own credentials (standard AWS chain / application-default)."""

    def client(service: str) -> Any:
        if service == "ec2":
            from topocast.aws.clients import ec2_client

            return ec2_client(a.region)
        if service == "compute":
            from topocast.gcp.clients import compute_client

            return compute_client(a.compute_endpoint)
        if service == "k8s-nodes":
            from topocast.k8s.client import K8sConnection
            from topocast.k8s.node_source import node_lister

            conn = (
                K8sConnection(auth="kubeconfig", kubeconfig=a.kubeconfig) if a.kubeconfig else K8sConnection.from_env()
            )
            return node_lister(conn)
        if service == "k8s-dra":
            from topocast.k8s.client import K8sConnection
            from topocast.k8s.resource_slices import dra_lister

            kubeconfig = a.kubeconfig or parse_option_pairs(a.option).get("kubeconfig")
            conn = K8sConnection(auth="kubeconfig", kubeconfig=kubeconfig) if kubeconfig else K8sConnection.from_env()
            return dra_lister(conn)
        if service in SDK_CLIENTS:
            import importlib

            module, _, attr = SDK_CLIENTS[service].partition(":")
            return getattr(importlib.import_module(module), attr)
        raise ProviderError(f"topocast discover has no {service!r} client")

    return client


def provider_inputs(a: DiscoverArgs) -> ProviderInputs:
    """The flags as the registry's :class:`ProviderInputs` (the functions build theirs from settings)."""
    nodes = expand(a.nodes) if a.nodes else None
    domains = str(a.domains) if a.domains else None
    cluster = a.cluster
    options: dict[str, Any]
    if a.provider == "aws":
        options = {"region": a.region, "filters": a.filters, "name_from": a.name_from}
    elif a.provider == "gcp":
        if not a.project:
            raise ProviderError("--provider gcp needs --project")
        if cluster == "default":
            value = a.labels[0].partition("=")[2] if len(a.labels) == 1 else ""
            cluster = value or a.project
        options = {"project": a.project, "zones": a.zones, "labels": a.labels, "name_from": a.name_from}
    elif a.provider == "ibnetdiscover":
        if not a.inputs:
            raise ProviderError("--provider ibnetdiscover needs --input FILE (repeatable)")
        options = {"host_regex": a.host_regex, "nodes": nodes, "domains_uri": domains,
                   "topograph_compat": a.topograph_compat,
                   "ib_hcas": a.ib_hcas, "ib_guids": a.ib_guids, "ib_switches": a.ib_switches}  # fmt: skip
    elif a.provider == "netq":
        if not (a.url and a.credentials):
            raise ProviderError("--provider netq needs --url and --credentials FILE|ARN")
        options = {"url": a.url, "credentials": a.credentials, "premises": a.premises, "nodes": nodes,
                   "domains_uri": domains, "insecure": a.insecure, "ca_file": a.ca_file,
                   "ib_hcas": a.ib_hcas, "ib_guids": a.ib_guids, "ib_switches": a.ib_switches}  # fmt: skip
    elif a.provider == "k8s-labels":
        bad = [kv for kv in a.labels if "=" not in kv]
        if bad:
            raise ProviderError(f"--label {bad[0]!r}: expected KEY=VALUE (only nodes carrying that label)")
        selector = dict(kv.split("=", 1) for kv in a.labels) if a.labels else None
        options = {"fabric_keys": a.fabric_keys, "accelerator_key": a.accelerator_key, "node_selector": selector,
                   "preset": a.preset}  # fmt: skip
    else:
        options = {}
    options.update(parse_option_pairs(a.option))
    uploads = _local_files(a.inputs)
    if a.provider == "azure" and isinstance(options.get("uploads"), str):
        uploads = _nvlink_uploads(str(options["uploads"]))
    return ProviderInputs(cluster, options, _clients(a), uploads, _read_local, _secret)


def _nvlink_uploads(prefix_uri: str) -> Callable[[], dict[str, bytes]]:
    """``collect nvlink`` records in a bucket, through the functions' quarantine (bad ones moved aside)."""

    def read() -> dict[str, bytes]:
        from topocast.agents.collect import read_good_uploads
        from topocast.providers.nvlink import RECORD_NAME, check_record

        got = read_good_uploads(prefix_uri, check_record, name=RECORD_NAME)
        for uri, reason in got.quarantined:
            print(f"topocast: warning: {uri}: quarantined ({reason})", file=sys.stderr)
        return got.texts

    return read


def print_set_aside(graph: TopologyGraph) -> None:
    """``topocast: warning: N set aside ...`` and a bounded sample of ``name: reason`` lines on stderr."""
    lines = set_aside_report(graph)
    if lines:
        print(f"topocast: warning: {lines[0]}", file=sys.stderr)
        print("\n".join(lines[1:]), file=sys.stderr)


def list_options() -> str:
    """Every registered provider's options, from its ``Options`` model (providers without one take flags)."""
    lines: list[str] = []
    for name, target in sorted(PROVIDERS.items()):
        try:
            model = options_model(target) if isinstance(target, str) else None
        except ImportError as exc:
            lines.append(f"{name}: not available here ({exc})")
            continue
        if model is None:
            lines.append(f"{name}: takes the flags of topocast discover --help")
        else:
            lines.extend(describe_options(name, model))
    return "\n".join(lines) + "\n"


def run_discover(args: DiscoverArgs, out: Path | None) -> DiscoveryResult | None:
    if args.list_options:
        sys.stdout.write(list_options())
        return None
    result = build_provider(args.provider, provider_inputs(args), args.overlays).discover_full(None)
    for warning in result.warnings:
        print(f"topocast: warning: {warning}", file=sys.stderr)
    print_set_aside(result.graph)
    for line in notes_report(result.graph):
        print(f"topocast: note: {line.strip()}" if not line.startswith("  ") else line, file=sys.stderr)
    text = dump_graph(result.graph)
    if out is None:
        sys.stdout.write(text)
    else:
        write_out(out, text)
    calls = ", ".join(f"{k}={v}" for k, v in sorted(result.api_calls.items()))
    print(
        f"topocast: {len(result.graph.nodes)} node(s), {len(result.graph.nodes_without_topology())} without "
        f"topology{f', {len(result.graph.unplaced)} set aside' if result.graph.unplaced else ''}"
        f"{f' ({calls})' if calls else ''}",
        file=sys.stderr,
    )
    return result
