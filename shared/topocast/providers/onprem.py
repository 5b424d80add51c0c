"""The on-prem fabric sources as :class:`~topocast.providers.base.Provider`: ibnetdiscover dumps and NetQ.

Neither has a per-node read, so every change is a full discovery (``incremental = False``).
Where the input lives is the shell's business: the functions pass the collectors' uploads in
their bucket (S3 or GCS, :func:`topocast.pipeline.objects.read_uploads`), the CLI local files.
Options (``ProviderInputs.options``): ``host_regex``, ``nodes``, ``topograph_compat`` (ibnetdiscover);
``url``, ``credentials``, ``premises``, ``insecure``, ``ca_file``, ``nodes`` (NetQ); ``domains_uri``
(both: an NVLink domains file read through ``read_text``); ``ib_hcas``, ``ib_switches`` (both) and
``ib_guids`` (ibnetdiscover): the compute fabric's ports (:mod:`topocast.providers.port_selection`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from topocast.errors import ProviderError
from topocast.model.graph import TopologyGraph
from topocast.providers.base import DiscoveryResult, FullScanOnly, ProviderInputs
from topocast.providers.domains import HostDomain, parse_domains
from topocast.providers.port_selection import PortSelection

__all__ = ["IbnetdiscoverProvider", "NetqProvider", "ibnetdiscover_provider", "netq_provider"]


def _domains(inputs: ProviderInputs) -> dict[str, HostDomain] | None:
    uri = inputs.options.get("domains_uri")
    return parse_domains(inputs.read_text(str(uri)), str(uri)) if uri else None


@dataclass(frozen=True)
class _FullOnly(FullScanOnly):
    inputs: ProviderInputs


class IbnetdiscoverProvider(_FullOnly):
    name = "ibnetdiscover"

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        from topocast.providers import ibnetdiscover

        o = self.inputs.options
        texts = dict(self.inputs.uploads())
        if not texts:
            raise ProviderError(
                f"no ibnetdiscover uploads for cluster {self.inputs.cluster}: run `topocast collect` first"
            )
        kwargs: dict[str, Any] = {"host_regex": o["host_regex"]} if o.get("host_regex") else {}
        return ibnetdiscover.discover(
            texts=texts,
            cluster=self.inputs.cluster,
            nodes=o.get("nodes"),
            domains=_domains(self.inputs),
            topograph_compat=bool(o.get("topograph_compat")),
            selection=PortSelection.from_options(o),
            **kwargs,
        )


class NetqProvider(_FullOnly):
    name = "netq"

    def discover_full(self, previous: TopologyGraph | None) -> DiscoveryResult:
        from topocast.providers import netq

        o = self.inputs.options
        if not (o.get("url") and o.get("credentials")):
            raise ProviderError("the netq provider needs a NetQ URL and credentials (TOPOCAST_NETQ_URL/_CREDENTIALS)")
        if o.get("ib_guids"):
            raise ProviderError("the netq provider selects ports by interface name and switch name, not by GUID")
        ref = str(o["credentials"])
        creds = netq.load_credentials(ref, read_secret=lambda r: (self.inputs.secret(r), None))
        return netq.discover(
            str(o["url"]),
            credentials=creds,
            cluster=self.inputs.cluster,
            nodes=o.get("nodes"),
            premises=o.get("premises") or None,
            domains=_domains(self.inputs),
            insecure=bool(o.get("insecure")),
            ca_file=o.get("ca_file"),
            selection=PortSelection.from_options(o),
        )


def ibnetdiscover_provider(inputs: ProviderInputs) -> IbnetdiscoverProvider:
    return IbnetdiscoverProvider(inputs)


def netq_provider(inputs: ProviderInputs) -> NetqProvider:
    return NetqProvider(inputs)
