"""Read DRA ``ResourceSlice`` objects (and the Nodes) for the ``dra`` provider: the I/O half.

``GET /apis/resource.k8s.io/<version>/resourceslices?fieldSelector=spec.driver=<driver>&limit=500``,
following ``metadata.continue``, through the same resilient client as the Node LIST (rate limit,
retries, every auth mode). ``api_version: auto`` asks for ``v1`` (Kubernetes 1.34+), then ``v1beta2``
(1.33), then ``v1beta1`` (1.32) when the server does not serve the one before (404). Each device's
attributes are kept as text (``{"string": "x"}`` -> ``"x"``, ``{"int": 7}`` -> ``"7"``), from
``device.attributes`` (v1, v1beta2) or ``device.basic.attributes`` (v1beta1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError

from topocast.errors import ProviderError
from topocast.k8s.client import ClientSettings, K8sConnection, KubeClient, build_client
from topocast.k8s.node_source import list_node_info
from topocast.providers.dra.provider import DraLister, Options, SliceDevices
from topocast.providers.k8s_labels.provider import ClusterNodeInfo, NodeLabelsConfig
from topocast.safeio.paging import PageGuard

__all__ = ["VERSIONS", "dra_lister", "list_resource_slices", "slice_devices"]

#: newest first: what ``api_version: auto`` tries
VERSIONS = ("v1", "v1beta2", "v1beta1")
_VALUE_KEYS = ("string", "int", "bool", "version")


def _text(value: Any) -> str | None:
    if not isinstance(value, Mapping):
        return None
    for key in _VALUE_KEYS:
        if key in value and value[key] is not None:
            got = value[key]
            return ("true" if got else "false") if isinstance(got, bool) else str(got)
    return None


def slice_devices(obj: Mapping[str, Any]) -> SliceDevices:
    """One ResourceSlice (any served version) as plain data."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    devices = []
    for device in spec.get("devices") or []:
        if not isinstance(device, Mapping):
            continue
        attrs = device.get("attributes")
        if attrs is None:
            attrs = (device.get("basic") or {}).get("attributes")
        kept = {str(k): t for k, v in (attrs or {}).items() if (t := _text(v)) is not None}
        devices.append(kept)
    node = spec.get("nodeName")
    return SliceDevices(str(meta.get("name", "")), str(spec.get("driver", "")), str(node) if node else None, devices)


def list_resource_slices(
    kc: KubeClient, driver: str, version: str = "auto", page_size: int = 500
) -> list[SliceDevices]:
    """Every slice of ``driver``, paged; a :class:`ProviderError` line when the API has none of the versions."""
    versions = VERSIONS if version == "auto" else (version,)
    for v in versions:
        path = f"/apis/resource.k8s.io/{v}/resourceslices"
        params = {"fieldSelector": f"spec.driver={driver}", "limit": str(page_size)}
        out: list[SliceDevices] = []
        # a field selector: a page may hold fewer items than the limit, even none (safeio.paging)
        guard = PageGuard(f"Kubernetes LIST {path}", page_size, empty_ends=False)
        try:
            while True:
                page = kc.request_json("GET", path, params=params)
                items = [item for item in page.get("items") or [] if isinstance(item, Mapping)]
                out += [slice_devices(item) for item in items]
                token = (page.get("metadata") or {}).get("continue")
                if not guard.more(((i.get("metadata") or {}).get("uid") or (i.get("metadata") or {}).get("name")
                                   for i in items), token):  # fmt: skip
                    return out
                params["continue"] = str(token)
        except ApiError as exc:
            if exc.status.code == 404 and v != versions[-1]:
                continue
            if exc.status.code == 404:
                raise ProviderError(
                    f"{kc.server} serves no resource.k8s.io {'/'.join(versions)} ResourceSlices (is DRA enabled?)"
                ) from None
            raise ProviderError(f"listing ResourceSlices failed: {exc.status.code} {exc.status.message}") from None
        except httpx2.HTTPError as exc:
            raise ProviderError(f"listing ResourceSlices at {kc.server} failed: {exc}") from None
    raise AssertionError("unreachable")


def dra_lister(connection: K8sConnection | None = None, settings: ClientSettings | None = None) -> DraLister:
    """The ``k8s-dra`` client a shell hands the ``dra`` provider: one Node LIST and one slice LIST per call."""

    def listing(options: Options) -> tuple[list[ClusterNodeInfo], list[SliceDevices], dict[str, int]]:
        kc = build_client(connection or K8sConnection(), settings)
        try:
            nodes = list_node_info(kc, NodeLabelsConfig(node_selector=options.node_selector))
            slices = list_resource_slices(kc, options.driver, options.api_version)
            calls = {f"k8s_{m}": n for m, n in kc.transport.stats.snapshot()["by_method"].items()}
            return nodes, slices, calls
        finally:
            kc.close()

    return listing
