"""``topocast discover``: run one provider's discovery once and print the normalized graph.

The same provider code the functions run, with the operator's own credentials
(AWS: the standard environment, profiles, ``AWS_ENDPOINT_URL``; GCP:
application-default credentials; NetQ: a credentials file or secret ARN).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from topocast.errors import ProviderError
from topocast.graph import dump_graph
from topocast.providers.base import DiscoveryResult


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
    # k8s-labels (labels: only nodes with these KEY=VALUE labels)
    kubeconfig: str | None = None
    fabric_keys: list[str] = field(default_factory=list)
    accelerator_key: str | None = None


def _aws(a: DiscoverArgs) -> DiscoveryResult:
    from topocast.aws.clients import ec2_client
    from topocast.providers.aws import AwsDiscoveryConfig, discover_full

    config = AwsDiscoveryConfig.from_data(
        {"cluster": a.cluster, "region": a.region, "filters": a.filters, "name_from": a.name_from}, "command line"
    )
    return discover_full(ec2_client(a.region), config)


def _gcp(a: DiscoverArgs) -> DiscoveryResult:
    from topocast.providers import gcp

    if not a.project:
        raise ProviderError("--provider gcp needs --project")
    return gcp.discover_project(
        a.project,
        cluster=None if a.cluster == "default" else a.cluster,
        zones=a.zones,
        labels=a.labels,
        name_from=a.name_from,
        endpoint=a.compute_endpoint,
    )


def _ibnetdiscover(a: DiscoverArgs) -> DiscoveryResult:
    from topocast.hostlist import expand
    from topocast.providers import ibnetdiscover

    if not a.inputs:
        raise ProviderError("--provider ibnetdiscover needs --input FILE (repeatable)")
    kwargs = {"host_regex": a.host_regex} if a.host_regex else {}
    return ibnetdiscover.discover(
        a.inputs,
        cluster=a.cluster,
        nodes=expand(a.nodes) if a.nodes else None,
        domains=a.domains,
        topograph_compat=a.topograph_compat,
        **kwargs,
    )


def _netq(a: DiscoverArgs) -> DiscoveryResult:
    from topocast.hostlist import expand
    from topocast.providers import netq

    if not (a.url and a.credentials):
        raise ProviderError("--provider netq needs --url and --credentials FILE|ARN")
    return netq.discover(
        a.url,
        credentials=a.credentials,
        cluster=a.cluster,
        nodes=expand(a.nodes) if a.nodes else None,
        premises=a.premises or None,
        domains=a.domains,
        insecure=a.insecure,
        ca_file=a.ca_file,
    )


def _k8s_labels(a: DiscoverArgs) -> DiscoveryResult:
    from topocast.k8s.client import K8sConnection
    from topocast.k8s.node_source import discover
    from topocast.providers.k8s_labels import NodeLabelsConfig

    bad = [kv for kv in a.labels if "=" not in kv]
    if bad:
        raise ProviderError(f"--label {bad[0]!r}: expected KEY=VALUE (only nodes carrying that label)")
    selector = dict(kv.split("=", 1) for kv in a.labels) if a.labels else None
    config = NodeLabelsConfig(
        cluster=a.cluster, fabric_keys=a.fabric_keys, accelerator_key=a.accelerator_key, node_selector=selector
    )
    conn = K8sConnection(auth="kubeconfig", kubeconfig=a.kubeconfig) if a.kubeconfig else K8sConnection.from_env()
    return discover(config, conn)


PROVIDERS = {"aws": _aws, "gcp": _gcp, "ibnetdiscover": _ibnetdiscover, "netq": _netq, "k8s-labels": _k8s_labels}


def run_discover(args: DiscoverArgs, out: Path | None) -> DiscoveryResult:
    try:
        run = PROVIDERS[args.provider]
    except KeyError:
        raise ProviderError(f"unknown provider {args.provider!r}; known: {', '.join(PROVIDERS)}") from None
    result = run(args)
    for warning in result.warnings:
        print(f"topocast: warning: {warning}", file=sys.stderr)
    text = dump_graph(result.graph)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
    calls = ", ".join(f"{k}={v}" for k, v in sorted(result.api_calls.items()))
    print(
        f"topocast: {len(result.graph.nodes)} node(s), {len(result.graph.nodes_without_topology())} without "
        f"topology{f' ({calls})' if calls else ''}",
        file=sys.stderr,
    )
    return result
