"""A wire-level fake of the Azure Resource Manager compute endpoints the ``azure`` provider reads.

Built from the ``azure-mgmt-compute`` model classes (``VirtualMachineScaleSet``,
``VirtualMachineScaleSetVM``, ``VirtualMachine``...: each response item is ``model.as_dict()``, the
SDK's own serialization) and the REST reference's paths and paging, independently of the provider:

* ``GET /subscriptions/{s}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachineScaleSets``
* ``GET .../virtualMachineScaleSets/{name}/virtualMachines`` (``$expand=instanceView`` adds
  ``properties.instanceView``; without it the instance view is left out, as ARM does)
* ``GET .../providers/Microsoft.Compute/virtualMachines`` (``$expand=instanceView`` likewise)

Every answer is ``{"value": [...], "nextLink": "<absolute URL with $skiptoken>"}`` with
``page_size`` items per page. ``api-version`` is required (400 ``MissingApiVersionParameter``);
``Authorization: Bearer <token>`` must match (401 ``InvalidAuthenticationToken``); an unknown
resource group is 404 ``ResourceGroupNotFound``; errors are ARM's ``{"error": {"code", "message"}}``.

ARM's rules that it enforces, each from the SDK or the orchestration-modes docs:

* ``$expand=instanceView`` on the VM list "can only be specified if a valid $filter option is specified"
  (``VirtualMachinesOperations.list`` docstring): 400 ``InvalidParameter`` without one; the one valid
  filter is ``'virtualMachineScaleSet/id' eq '<scale set ID>'`` (the same docstring), any other is 400;
* Flexible scale sets (``orchestrationMode: Flexible``) have their VMs in the VM API, each with
  ``properties.virtualMachineScaleSet.id``; the scale-set VM API is Uniform-only, so listing a Flexible
  scale set's VMs through it is 400 ``OperationNotAllowed`` (the message is this fake's);
* ``forbidden`` scale sets answer 403 ``AuthorizationFailed`` (a role missing on one scale set).

Not implemented: writes, ``$select``, long-running operations, throttling headers, Interconnect Groups and
Blocks as resources (a VM's ``interconnectGroupProfile`` and instance view's ``interconnectInstanceView``
are served), any other resource provider.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from azure.mgmt.compute import models as m

JSON = dict[str, Any]


def scale_set_vm(
    scale_set: str, instance: int, computer: str, placement_group: str | None, *, location: str = "eastus",
    size: str = "Standard_ND96isr_H100_v5", zone: str | None = "1",
) -> m.VirtualMachineScaleSetVM:  # fmt: skip
    """One uniform scale set VM as ARM returns it with ``$expand=instanceView``."""
    vm = m.VirtualMachineScaleSetVM(location=location, zones=[zone] if zone else None)
    vm.name, vm.instance_id, vm.sku = f"{scale_set}_{instance}", str(instance), m.Sku(name=size, tier="Standard")
    view = m.VirtualMachineScaleSetVMInstanceView(platform_update_domain=0)
    view.placement_group_id = placement_group
    view.platform_fault_domain = 0
    view.computer_name = computer
    vm.properties = m.VirtualMachineScaleSetVMProperties(os_profile=m.OSProfile(computer_name=computer))
    vm.properties.instance_view = view
    return vm


def availability_set_vm(name: str, computer: str, availability_set: str | None, *, subscription: str = "sub-1",
                        group: str = "rg-hpc", size: str = "Standard_ND96asr_v4") -> m.VirtualMachine:  # fmt: skip
    vm = m.VirtualMachine(location="eastus")
    vm.name = name
    props = m.VirtualMachineProperties(
        hardware_profile=m.HardwareProfile(vm_size=size), os_profile=m.OSProfile(computer_name=computer)
    )
    if availability_set:
        props.availability_set = m.SubResource(
            id=f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute/availabilitySets/"
            f"{availability_set}"
        )
    vm.properties = props
    return vm


def scale_set_id(scale_set: str, *, subscription: str = "sub-1", group: str = "rg-hpc") -> str:
    return (
        f"/subscriptions/{subscription}/resourceGroups/{group}/providers/Microsoft.Compute/virtualMachineScaleSets/"
        + (scale_set)
    )


def interconnect_vm(name: str, computer: str, scale_set: str | None, interconnect_group: str,
                    subgroup: str | None, *, size: str = "Standard_ND128isr_GB300_v6") -> m.VirtualMachine:  # fmt: skip
    """A VM of a Flexible scale set (or none) in an Interconnect Group, its subgroup in its instance view."""
    vm = m.VirtualMachine(location="eastus")
    vm.name = name
    network = "/subscriptions/sub-1/resourceGroups/rg-hpc/providers/Microsoft.Network"
    group_id = f"{network}/interconnectGroups/{interconnect_group}"
    vm.properties = m.VirtualMachineProperties(
        hardware_profile=m.HardwareProfile(vm_size=size),
        os_profile=m.OSProfile(computer_name=computer),
        network_profile=m.NetworkProfile(
            interconnect_group_profile=m.InterconnectGroupProfile(interconnect_group=m.SubResource(id=group_id))
        ),
    )
    if scale_set:
        vm.properties.virtual_machine_scale_set = m.SubResource(id=scale_set_id(scale_set))
    view = m.VirtualMachineInstanceView(computer_name=computer)
    if subgroup:
        view.interconnect_instance_view = m.InterconnectInstanceView()
        view.interconnect_instance_view.interconnect_subgroup_id = subgroup
    vm.properties.instance_view = view
    return vm


@dataclass
class FakeArm:
    """The fake's state: scale sets (name -> VMs) and standalone VMs per resource group."""

    token: str = "fake-token"
    page_size: int = 2
    subscription: str = "sub-1"
    scale_sets: dict[str, dict[str, list[m.VirtualMachineScaleSetVM]]] = field(default_factory=dict)
    vms: dict[str, list[m.VirtualMachine]] = field(default_factory=dict)
    #: resource group -> names of its Flexible scale sets (their VMs are in ``vms``)
    flexible: dict[str, set[str]] = field(default_factory=dict)
    #: scale sets whose VMs this caller may not read (403)
    forbidden: set[str] = field(default_factory=set)
    requests: list[str] = field(default_factory=list)
    #: a hostile ARM: every page is the first one again, with a fresh nextLink, forever
    same_items_forever: bool = False
    _httpd: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def __enter__(self) -> FakeArm:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                code, body = fake.answer(self.path, self.headers.get("Authorization", ""))
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-ms-request-id", "fake")
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @staticmethod
    def error(code: int, arm_code: str, message: str) -> tuple[int, JSON]:
        return code, {"error": {"code": arm_code, "message": message}}

    def answer(self, raw_path: str, authorization: str) -> tuple[int, JSON]:
        url = urllib.parse.urlsplit(raw_path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.requests.append(raw_path)
        if authorization != f"Bearer {self.token}":
            return self.error(401, "InvalidAuthenticationToken", "The access token is invalid.")
        if "api-version" not in query:
            return self.error(400, "MissingApiVersionParameter", "The api-version query parameter is required.")
        parts = [urllib.parse.unquote(p) for p in url.path.split("/") if p]
        if len(parts) < 7 or parts[0] != "subscriptions" or parts[2].lower() != "resourcegroups":
            return self.error(404, "InvalidResourceType", f"no route {url.path}")
        if parts[1] != self.subscription:
            return self.error(404, "SubscriptionNotFound", f"The subscription '{parts[1]}' could not be found.")
        group = parts[3]
        if group not in self.scale_sets and group not in self.vms and group not in self.flexible:
            return self.error(404, "ResourceGroupNotFound", f"Resource group '{group}' could not be found.")
        rest = [p.lower() for p in parts[4:]]
        expand = query.get("$expand") == "instanceView"
        items: list[JSON]
        flexible = self.flexible.get(group, set())
        if rest == ["providers", "microsoft.compute", "virtualmachinescalesets"]:
            items = []
            for name in sorted(set(self.scale_sets.get(group, {})) | flexible):
                mode = "Flexible" if name in flexible else "Uniform"
                scale_set = m.VirtualMachineScaleSet(location="eastus", sku=m.Sku(name="Standard_ND96isr_H100_v5"))
                scale_set.properties = m.VirtualMachineScaleSetProperties(orchestration_mode=mode)
                items.append(scale_set.as_dict() | {"name": name, "id": scale_set_id(name, group=group)})
        elif (
            len(rest) == 5
            and rest[:3] == ["providers", "microsoft.compute", "virtualmachinescalesets"]
            and (rest[4] == "virtualmachines")
        ):
            if parts[7] in flexible:
                return self.error(400, "OperationNotAllowed", f"Virtual machine scale set '{parts[7]}' has "
                                  "Flexible orchestration: list its VMs through the virtual machines API.")  # fmt: skip
            if parts[7] in self.forbidden:
                return self.error(403, "AuthorizationFailed", f"The client does not have authorization to read "
                                  f"virtualMachineScaleSets/{parts[7]}/virtualMachines.")  # fmt: skip
            vms = self.scale_sets.get(group, {}).get(parts[7])
            if vms is None:
                return self.error(404, "ResourceNotFound", f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/"
                                  f"{parts[7]}' under resource group '{group}' was not found.")  # fmt: skip
            items = [self._view(vm.as_dict(), expand) for vm in vms]
        elif rest == ["providers", "microsoft.compute", "virtualmachines"]:
            chosen = self.vms.get(group, [])
            where = query.get("$filter")
            if where is not None:
                prefix, quote = "'virtualMachineScaleSet/id' eq '", "'"
                if not (where.startswith(prefix) and where.endswith(quote)):
                    return self.error(400, "InvalidParameter", f"The $filter '{where}' is not supported.")
                wanted = where[len(prefix) : -len(quote)].lower()
                if _last(wanted) in self.forbidden:
                    return self.error(403, "AuthorizationFailed", f"The client does not have authorization to "
                                      f"read the virtual machines of {wanted}.")  # fmt: skip
                chosen = [vm for vm in chosen if _scale_set_of(vm).lower() == wanted]
            elif expand:
                return self.error(400, "InvalidParameter", "The $expand=instanceView option can only be specified "
                                  "if a valid $filter option is specified.")  # fmt: skip
            items = [self._view(vm.as_dict(), expand) for vm in chosen]
        else:
            return self.error(404, "InvalidResourceType", f"no route {url.path}")
        start = int(query.get("$skiptoken", "0"))
        page: JSON = {"value": items[start : start + self.page_size]}
        if self.same_items_forever:
            page["value"] = items[: self.page_size]
            next_query = urllib.parse.urlencode({**query, "$skiptoken": str(start + 1)})
            page["nextLink"] = f"{self.url}{url.path}?{next_query}"
        elif start + self.page_size < len(items):
            next_query = urllib.parse.urlencode({**query, "$skiptoken": str(start + self.page_size)})
            page["nextLink"] = f"{self.url}{url.path}?{next_query}"
        return 200, page

    @staticmethod
    def _view(item: JSON, expand: bool) -> JSON:
        if not expand:
            item.get("properties", {}).pop("instanceView", None)
        return item


def _scale_set_of(vm: m.VirtualMachine) -> str:
    ref = vm.properties.virtual_machine_scale_set if vm.properties is not None else None
    return str(ref.id) if ref is not None and ref.id else ""


def _last(resource_id: str) -> str:
    return resource_id.rstrip("/").rsplit("/", 1)[-1]
