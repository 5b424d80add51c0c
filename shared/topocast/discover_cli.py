"""``topocast discover``: run a provider's discovery once and print the graph."""

from __future__ import annotations

import sys
from pathlib import Path

from topocast.errors import ProviderError
from topocast.graph import dump_graph


def run_discover(
    provider: str, cluster: str, region: str | None, filters: list[str], name_from: str | None, out: Path | None
) -> None:
    if provider != "aws":
        raise ProviderError(f"provider {provider!r} is not available in this command yet (aws)")
    from topocast.aws.clients import ec2_client
    from topocast.providers.aws import AwsDiscoveryConfig, discover_full

    config = AwsDiscoveryConfig.from_data(
        {"cluster": cluster, "region": region, "filters": filters, "name_from": name_from}, "command line"
    )
    result = discover_full(ec2_client(region), config)
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
        f"topology ({calls})",
        file=sys.stderr,
    )
