"""The on-prem fabric sources as :class:`~topocast.providers.base.Provider`: ibnetdiscover dumps and NetQ.

Neither has a per-node read, so every change is a full discovery (``incremental = False``).
Where the input lives is the shell's business: the functions pass the collectors' uploads in
their bucket (S3 or GCS, :func:`topocast.pipeline.objects.read_uploads`), the CLI local files.
Options: :class:`IbnetdiscoverOptions` and :class:`NetqOptions` (``OPTIONS``, by factory); both take an
NVLink domains file (``domains_uri``, read through ``read_text``) and the compute fabric's ports
(``ib_hcas``, ``ib_switches``, and ``ib_guids`` for ibnetdiscover: :mod:`topocast.providers.port_selection`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from topocast.errors import ProviderError
from topocast.model.graph import TopologyGraph
from topocast.model.hostlist import expand
from topocast.providers.base import DiscoveryResult, FullScanOnly, ProviderInputs
from topocast.providers.domains import HostDomain, parse_domains
from topocast.providers.options import OptionSpec, provider_options
from topocast.providers.port_selection import PortSelection
from topocast.providers.switch_names import FROM_DESCRIPTIONS, apply_switch_names, parse_switch_names

__all__ = [
    "OPTIONS",
    "IbnetdiscoverOptions",
    "IbnetdiscoverProvider",
    "NetqOptions",
    "NetqProvider",
    "ibnetdiscover_provider",
    "netq_provider",
]


def _hostlist(flag: str, text: str | None) -> list[str] | None:
    return expand(text) if text else None


_PORTS = "the compute fabric's"


class _FabricOptions(BaseModel):
    """What both on-prem sources take: which hosts, the NVLink domains, which HCAs and switches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: Annotated[list[str] | None, OptionSpec(flags=("--nodes",), help="only these hosts (hostlist)",
                                                  from_flag=_hostlist)] = Field(
        None, description="Only these hosts (the graph keeps no other)."
    )  # fmt: skip
    domains_uri: Annotated[
        str | None,
        OptionSpec(
            env="TOPOCAST_DOMAINS_URI", flags=("--domains",), path=True,
            help="NVLink domains (CSV host,domain or nvidia-smi -q)",
            env_help="on-prem NVLink domains file (CSV or nvidia-smi -q), s3://...",
        ),
    ] = Field(None, description="NVLink domains file (CSV host,domain[,subdomain] or nvidia-smi -q).")  # fmt: skip
    ib_hcas: Annotated[
        list[str],
        OptionSpec(
            env="TOPOCAST_IB_HCAS", flags=("--ib-hca",), many=True, help="compute HCA pattern (mlx5_[0-7], !mlx5_8)",
            env_help=f"{_PORTS} HCAs (device-name patterns, '!' excludes: mlx5_[0-7];!mlx5_8)",
        ),
    ] = Field(default_factory=list, description="Compute HCAs: device-name patterns, '!' excludes.")  # fmt: skip
    ib_switches: Annotated[
        list[str],
        OptionSpec(
            env="TOPOCAST_IB_SWITCHES", flags=("--ib-switch",), many=True, help="switch-name pattern (!STOR-*)",
            env_help="switch-name patterns that may be used (!STOR-*)",
        ),
    ] = Field(default_factory=list, description="Switch-name patterns that may be used, '!' excludes.")  # fmt: skip
    switch_names: Annotated[
        str | None,
        OptionSpec(flags=("--switch-names",), metavar="FILE", help="switch ID -> name map ('ID NAME' lines)"),
    ] = Field(
        None,
        description="Switch names: a map file ('ID NAME' a line, read like domains_uri); ibnetdiscover also takes "
        "'descriptions' (the names in the switches' own descriptions).",
    )


class IbnetdiscoverOptions(_FabricOptions):
    """The ``ibnetdiscover`` provider's options (the dumps themselves are the shell's uploads)."""

    #: ``topocast discover`` reads the dumps from ``--input`` files
    NEEDS_INPUT: ClassVar[bool] = True

    host_regex: Annotated[
        str | None,
        OptionSpec(
            env="TOPOCAST_IB_HOST_REGEX", flags=("--host-regex",), help="regex with group 'host'",
            env_help="regex with group 'host' for HCA descriptions",
        ),
    ] = Field(None, description="Regex with group 'host' for HCA node descriptions.")  # fmt: skip
    topograph_compat: Annotated[bool, OptionSpec(flags=("--topograph-compat",), help="Topograph's leaf rule")] = Field(
        False, description="Topograph's leaf rule."
    )
    ib_guids: Annotated[
        list[str],
        OptionSpec(
            env="TOPOCAST_IB_GUIDS", flags=("--ib-guid",), many=True, help="compute HCA node/port GUID (repeatable)",
            env_help="the compute fabric's HCA node/port GUIDs (';', '!' excludes)",
        ),
    ] = Field(default_factory=list, description="Compute HCA node/port GUIDs, '!' excludes.")  # fmt: skip
    fabric_health: bool = Field(
        False,
        description="Read a leaf that vanished, or a switch that lost every uplink, against the last graph as an "
        "outage (nodes kept, an impaired health record), not as a new topology (model/health_fabric.py).",
    )


class NetqOptions(_FabricOptions):
    """The ``netq`` provider's options."""

    url: Annotated[
        str | None,
        OptionSpec(env="TOPOCAST_NETQ_URL", flags=("--url",), help="API base URL", required="--url"),
    ] = Field(None, description="NetQ API base URL.")
    credentials: Annotated[
        str | None,
        OptionSpec(
            env="TOPOCAST_NETQ_CREDENTIALS", flags=("--credentials",), help="credentials file or secret ARN",
            required="--credentials FILE|ARN",
            env_help="Secrets Manager / SSM SecureString ARN of NetQ credentials",
        ),
    ] = Field(None, description="NetQ credentials: a file or a secret ARN.")  # fmt: skip
    premises: Annotated[
        list[str],
        OptionSpec(env="TOPOCAST_NETQ_PREMISES", flags=("--premise",), many=True, help="premise (repeatable)",
                   env_help="NetQ premises to read (';'); empty = all"),
    ] = Field(default_factory=list, description="NetQ premises to read (empty: all).")  # fmt: skip
    insecure: Annotated[bool, OptionSpec(flags=("--insecure",), help="skip TLS verification (not recommended)")] = (
        Field(False, description="Skip TLS verification (not recommended).")
    )
    ca_file: Annotated[str | None, OptionSpec(flags=("--ca-file",), help="CA bundle")] = Field(
        None, description="CA bundle for the NetQ API."
    )
    #: only to refuse it: NetQ selects ports by interface and switch name
    ib_guids: Annotated[list[str], OptionSpec(flags=("--ib-guid",), many=True, help="refused (ports by name)")] = Field(
        default_factory=list, description="Not supported by NetQ (ports are selected by name)."
    )


#: factory -> its options model (:func:`topocast.providers.options.options_model`)
OPTIONS: dict[str, type[BaseModel]] = {"ibnetdiscover_provider": IbnetdiscoverOptions, "netq_provider": NetqOptions}


def _domains(inputs: ProviderInputs, options: dict[str, Any]) -> dict[str, HostDomain] | None:
    uri = options.get("domains_uri")
    return parse_domains(inputs.read_text(str(uri)), str(uri)) if uri else None


def _named(inputs: ProviderInputs, options: dict[str, Any], result: DiscoveryResult) -> DiscoveryResult:
    """``result`` with the switch names of the ``switch_names`` map file, when one is given."""
    uri = options.get("switch_names")
    if not uri or uri == FROM_DESCRIPTIONS:
        return result
    names = parse_switch_names(inputs.read_text(str(uri)), str(uri))
    result.graph, warnings = apply_switch_names(result.graph, names, str(uri))
    result.warnings.extend(warnings)
    return result


@dataclass(frozen=True)
class _FullOnly(FullScanOnly):
    inputs: ProviderInputs
    #: the options, validated by the provider's model
    options: dict[str, Any]


class IbnetdiscoverProvider(_FullOnly):
    name = "ibnetdiscover"

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        from topocast.providers.onprem import ibnetdiscover

        o = self.options
        texts = dict(self.inputs.uploads())
        if not texts:
            raise ProviderError(
                f"no ibnetdiscover uploads for cluster {self.inputs.cluster}: run `topocast collect` first"
            )
        kwargs: dict[str, Any] = {"host_regex": o["host_regex"]} if o.get("host_regex") else {}
        result = ibnetdiscover.discover(
            texts=texts,
            cluster=self.inputs.cluster,
            nodes=o.get("nodes"),
            domains=_domains(self.inputs, o),
            switch_names=o.get("switch_names") == FROM_DESCRIPTIONS,
            topograph_compat=bool(o.get("topograph_compat")),
            selection=PortSelection.from_options(o),
            **kwargs,
        )
        if o.get("fabric_health"):  # without a previous graph only the uplink counts can tell
            from datetime import UTC, datetime

            from topocast.model.health_fabric import fabric_outages

            fabric = ibnetdiscover.merge_fabrics([ibnetdiscover.parse(t, uri) for uri, t in texts.items()])
            leaves = {n.fabric[0] for n in result.graph.nodes if n.fabric}
            counts = ibnetdiscover.uplinks(fabric, leaves)
            last = previous if previous is not None else result.graph
            result.graph = fabric_outages(last, result.graph, "ibnetdiscover", datetime.now(UTC), counts)
        return _named(self.inputs, o, result)


class NetqProvider(_FullOnly):
    name = "netq"

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        from topocast.providers.onprem import netq

        o = self.options
        if not (o.get("url") and o.get("credentials")):
            raise ProviderError("the netq provider needs a NetQ URL and credentials (TOPOCAST_NETQ_URL/_CREDENTIALS)")
        if o.get("ib_guids"):
            raise ProviderError("the netq provider selects ports by interface name and switch name, not by GUID")
        ref = str(o["credentials"])
        creds = netq.load_credentials(ref, read_secret=lambda r: (self.inputs.secret(r), None))
        if o.get("switch_names") == FROM_DESCRIPTIONS:
            raise ProviderError("the netq provider names switches from NetQ already; --switch-names takes a map file")
        result = netq.discover(
            str(o["url"]),
            credentials=creds,
            cluster=self.inputs.cluster,
            nodes=o.get("nodes"),
            premises=o.get("premises") or None,
            domains=_domains(self.inputs, o),
            insecure=bool(o.get("insecure")),
            ca_file=o.get("ca_file"),
            selection=PortSelection.from_options(o),
        )
        return _named(self.inputs, o, result)


def ibnetdiscover_provider(inputs: ProviderInputs) -> IbnetdiscoverProvider:
    options = provider_options(IbnetdiscoverOptions, inputs.options, "ibnetdiscover")
    return IbnetdiscoverProvider(inputs, options.model_dump())


def netq_provider(inputs: ProviderInputs) -> NetqProvider:
    return NetqProvider(inputs, provider_options(NetqOptions, inputs.options, "netq").model_dump())
