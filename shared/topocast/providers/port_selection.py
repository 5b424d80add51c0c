"""Which InfiniBand (or NetQ) ports belong to the compute fabric: HCA name patterns, port GUIDs, switch names.

A GPU server is often on two fabrics: compute HCAs (``mlx5_0`` .. ``mlx5_7``) on the compute
fabric, a storage HCA (``mlx5_8``) on a storage fabric, and one ``ibnetdiscover`` dump or NetQ
premise can show both. Without a selection every HCA is a host cable, so storage leaves become
leaves and a storage switch cabled to a compute spine can become a bogus tier above it
(NVIDIA/topograph#488). A :class:`PortSelection` says which ports count; the providers ignore
the rest and never place a switch that only unselected ports reach.

Each list holds shell-style patterns (:func:`fnmatch.fnmatchcase`: ``*``, ``?``, ``[0-7]``);
a pattern starting with ``!`` excludes. An item is selected when it matches a plain pattern
(or the list has none) and no ``!`` pattern:

* ``hcas``: the HCA's device name: ibnetdiscover, the node description after the host name
  (rdma-ndd's ``"%h %d"``: ``"dgx-01 mlx5_3"`` -> ``mlx5_3``); NetQ, the host-side interface
  name of the cable (``ens4f0np0``, ``ibp24s0``);
* ``guids``: ibnetdiscover only, the HCA's node GUID or one of its port GUIDs (hex, ``0x``
  optional, exact match: a GUID is not a pattern);
* ``switches``: a switch's name (the ``NAME`` of ``MF0;NAME:MODEL``, NetQ's name) or its ID.

``PortSelection.parse(["mlx5_[0-7]"], [], ["!STOR-*"])`` keeps the eight compute rails and
never uses a switch named ``STOR-...``. Pure; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from topocast.errors import ProviderError, TopocastError
from topocast.providers.options import split_list_text

__all__ = ["Patterns", "PortSelection", "no_host_selected"]

_GUID = re.compile(r"^(?:0x)?([0-9a-fA-F]{1,16})$")


@dataclass(frozen=True)
class Patterns:
    """One list of patterns: ``include`` (empty = everything) minus ``exclude`` (the ``!`` ones)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    @classmethod
    def parse(cls, values: Iterable[str], what: str, *, exact: bool = False) -> Patterns:
        include: list[str] = []
        exclude: list[str] = []
        for raw in values:
            value = str(raw).strip()
            negative = value.startswith("!")
            value = value[1:].strip() if negative else value
            if not value:
                raise ProviderError(f"{what}: empty pattern in {list(values)!r}")
            if exact:
                m = _GUID.match(value)
                if not m:
                    raise ProviderError(f"{what}: {raw!r} is not a GUID (up to 16 hex digits, 0x optional)")
                value = m.group(1).lower().rjust(16, "0")
            (exclude if negative else include).append(value)
        return cls(tuple(include), tuple(exclude))

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude)

    def selects(self, *names: str) -> bool:
        """True when one of ``names`` (several spellings of one item) is included and none is excluded."""
        hit = lambda pattern: any(fnmatchcase(n, pattern) for n in names)  # noqa: E731
        if any(hit(p) for p in self.exclude):
            return False
        return not self.include or any(hit(p) for p in self.include)


@dataclass(frozen=True)
class PortSelection:
    """The compute fabric's ports (see the module docstring); an empty selection selects everything."""

    hcas: Patterns = Patterns()
    guids: Patterns = Patterns()
    switches: Patterns = Patterns()

    @classmethod
    def parse(cls, hcas: Iterable[str] = (), guids: Iterable[str] = (), switches: Iterable[str] = ()) -> PortSelection:
        """From option lists; a bad pattern or GUID is a :class:`ProviderError` naming it."""
        return cls(
            Patterns.parse(hcas, "port selection (HCA patterns)"),
            Patterns.parse(guids, "port selection (GUIDs)", exact=True),
            Patterns.parse(switches, "port selection (switch patterns)"),
        )

    @classmethod
    def from_options(cls, options: object) -> PortSelection | None:
        """From a provider's options mapping (``ib_hcas``, ``ib_guids``, ``ib_switches``); None when unset."""
        get = getattr(options, "get", None)
        if get is None:
            return None
        values = {k: _as_list(get(k), k) for k in ("ib_hcas", "ib_guids", "ib_switches")}
        if not any(values.values()):
            return None
        return cls.parse(values["ib_hcas"], values["ib_guids"], values["ib_switches"])

    def __bool__(self) -> bool:
        return bool(self.hcas or self.guids or self.switches)

    def hca(self, device: str, guids: Iterable[str] = ()) -> bool:
        """Whether an HCA (its device name, its node/port GUIDs) is on the compute fabric."""
        spelled = [g.lower().removeprefix("0x").rjust(16, "0") for g in guids]
        return self.hcas.selects(device) and (not self.guids or self.guids.selects(*spelled))

    def switch(self, *names: str) -> bool:
        """Whether a switch (its name, its ID) may be on the compute fabric."""
        return self.switches.selects(*[n for n in names if n])

    def describe(self) -> str:
        """``hcas mlx5_[0-7]; switches !STOR-*`` for messages."""
        parts = []
        for label, p in (("hcas", self.hcas), ("guids", self.guids), ("switches", self.switches)):
            if p:
                parts.append(f"{label} {', '.join([*p.include, *(f'!{x}' for x in p.exclude)])}")
        return "; ".join(parts)


def no_host_selected(selection: PortSelection, hosts: int) -> ProviderError:
    """The error of a selection that leaves no host of a non-empty fabric: publishing that empty map would
    clear every node's topology, so it is a mistake in the patterns (CLI exit 2; the functions retry and
    alarm, the last good graph stays), never an empty graph."""
    return ProviderError(
        f"port selection ({selection.describe()}) selects none of the fabric's {hosts} host(s): "
        "check the HCA / GUID / switch patterns (--ib-hca, --ib-guid, --ib-switch; TOPOCAST_IB_*)"
    )


def _as_list(value: object, key: str) -> list[str]:
    if value in (None, "", [], ()):
        return []
    if isinstance(value, str):
        try:
            return split_list_text(value, ";,", f"option {key}")
        except TopocastError as exc:
            raise ProviderError(str(exc)) from None
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    raise ProviderError(f"option {key}: expected a list of patterns, got {type(value).__name__}")
