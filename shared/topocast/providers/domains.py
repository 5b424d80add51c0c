"""Accelerator (NVLink) domains per host from a side input, for fabrics that do not know them.

``ibnetdiscover`` sees InfiniBand, not NVLink; on GB200/GB300 NVL72 racks the
NVLink domain comes from the hosts themselves. :func:`load_domains` reads it
from a file in one of three shapes (detected automatically):

* **CSV** ``host,domain[,subdomain]``, one host per line. An optional header
  row whose first field is ``host``, blank lines and ``#`` comments are skipped.
* **nvidia-smi -q**, concatenated for many hosts. Each host's part is marked
  either by a ``==> NAME <==`` line (what ``tail -n +1 */smi.txt`` prints; the
  host is NAME's file name without a ``.txt``/``.log``/``.out`` extension) or by
  a ``host: `` prefix on every line (``pdsh -w gpu[001-072] nvidia-smi -q``).
  The domain is ``<ClusterUUID>.<CliqueId>`` from each GPU's ``Fabric`` section,
  Topograph's ``topograph.run/cluster-id`` convention.
* **nvidia-smi CSV query** through pdsh: ``pdsh -w ... nvidia-smi
  --query-gpu=fabric.clusterUuid,fabric.cliqueId --format=csv,noheader`` gives
  lines ``host: <uuid>, <clique>``, one per GPU.

All GPUs of a host must agree; a host listed twice must agree with itself.
Anything else is a :class:`ProviderError` naming ``<file>:<line>``. A GPU whose
fabric is ``N/A`` (no NVLink switch) or whose ClusterUUID is all zeros (fabric
not registered yet) gives no domain; a host with no GPU domain is left out.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from topocast.errors import ProviderError, UnsafeNameError
from topocast.model.names import check_domain_name, check_node_name


@dataclass(frozen=True)
class HostDomain:
    """One host's accelerator domain and optional sub-domain (rack), with where it was read."""

    domain: str
    subdomain: str | None = None
    line: int = 0


_HEADER = re.compile(r"^==> (.+) <==$")
_PDSH = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*): (.*)$")
_GPU = re.compile(r"^GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+\s*$")
_UUID = re.compile(r"^\s*ClusterUUID\s*:\s*(\S+)\s*$")
_CLIQUE = re.compile(r"^\s*CliqueId\s*:\s*(\S+)\s*$")
_QUERY = re.compile(r"^\s*([0-9A-Fa-f-]{36}|N/A|\[N/A\])\s*,\s*(\d+|N/A|\[N/A\])\s*$")
_NO_VALUE = {"N/A", "[N/A]", "", "00000000-0000-0000-0000-000000000000"}
_EXTENSIONS = (".txt", ".log", ".out")


def load_domains(path: str | Path) -> dict[str, HostDomain]:
    """Read a domains side input (CSV, nvidia-smi -q, or nvidia-smi CSV query); see the module doc."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ProviderError(f"{p}: cannot read domains file ({exc.strerror})") from None
    return parse_domains(data, str(p))


def parse_domains(text: str | bytes, source: str = "domains") -> dict[str, HostDomain]:
    """Parse domains text (the content of a file :func:`load_domains` accepts)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProviderError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    lines = text.splitlines()
    smi = any("ClusterUUID" in ln or "NVSMI LOG" in ln for ln in lines)
    first = next((ln for ln in lines if ln.strip() and not ln.lstrip().startswith("#")), "")
    prefixed = _PDSH.match(first)
    query = prefixed is not None and _QUERY.match(prefixed.group(2)) is not None
    table = _Table(source)
    if smi or query:
        _parse_smi(lines, table)
    else:
        _parse_csv(lines, table)
    if not table.hosts:
        raise ProviderError(f"{source}:1: no host with an accelerator domain found")
    return table.hosts


class _Table:
    """Collects host -> domain and rejects contradictions with both line numbers."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.hosts: dict[str, HostDomain] = {}

    def error(self, line: int, what: str) -> ProviderError:
        return ProviderError(f"{self.source}:{line}: {what}")

    def add(self, host: str, domain: str, subdomain: str | None, line: int) -> None:
        try:
            check_node_name(host, f"host {host!r}")
            check_domain_name(domain, host)
            if subdomain is not None:
                check_domain_name(subdomain, host, "sub-domain")
        except UnsafeNameError as exc:
            raise self.error(line, str(exc)) from None
        new = HostDomain(domain, subdomain, line)
        old = self.hosts.setdefault(host, new)
        if (old.domain, old.subdomain) != (domain, subdomain):
            raise self.error(
                line,
                f"host {host!r} is in domain {_show(domain, subdomain)} here but in "
                f"{_show(old.domain, old.subdomain)} at line {old.line}",
            )


def _show(domain: str, subdomain: str | None) -> str:
    return repr(domain) if subdomain is None else f"{domain!r} (sub-domain {subdomain!r})"


def _parse_csv(lines: list[str], table: _Table) -> None:
    for number, raw in enumerate(lines, 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        try:
            fields = [f.strip() for f in next(csv.reader([raw]))]
        except csv.Error as exc:  # a field past csv's limit (128 KiB), a NUL byte
            raise table.error(number, f"not a CSV line ({exc})") from None
        if number == 1 and fields[0].lower() == "host":
            continue
        if len(fields) not in (2, 3) or not fields[0] or not fields[1]:
            raise table.error(number, f"expected 'host,domain[,subdomain]', got {raw.strip()!r}")
        sub = fields[2] if len(fields) == 3 and fields[2] else None
        table.add(fields[0], fields[1], sub, number)


def _host_from_header(name: str) -> str:
    base = PurePosixPath(name.strip()).name
    for ext in _EXTENSIONS:
        if base.endswith(ext):
            return base[: -len(ext)]
    return base


@dataclass
class _Gpu:
    uuid: str | None = None
    clique: str | None = None
    line: int = 0

    def domain(self) -> str | None:
        if self.uuid is None or self.clique is None or {self.uuid, self.clique} & _NO_VALUE:
            return None
        return f"{self.uuid}.{self.clique}"


def _parse_smi(lines: list[str], table: _Table) -> None:
    """nvidia-smi -q (or CSV query) text; each GPU contributes (uuid, clique) to its host."""
    pdsh = bool(_PDSH.match(next((ln for ln in lines if ln.strip()), "")))
    gpus: dict[str, dict[str, _Gpu]] = {}  # host -> GPU section -> values
    section: dict[str, str] = {}  # host -> the GPU section being read
    host: str | None = None
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        header = _HEADER.match(raw)
        if header:
            host = _host_from_header(header.group(1))
            continue
        rest = raw
        if pdsh:
            m = _PDSH.match(raw)
            if m is None:
                raise table.error(number, f"expected a 'host: ' prefix (pdsh output), got {raw.strip()!r}")
            host, rest = m.group(1), m.group(2)
        if host is None:
            raise table.error(number, "nvidia-smi output before any '==> host <==' line or 'host: ' prefix")
        per_host = gpus.setdefault(host, {})
        query = _QUERY.match(rest)
        if query:
            per_host[f"line {number}"] = _Gpu(query.group(1), query.group(2), number)
        elif _GPU.match(rest.strip()):
            section[host] = rest.strip()
        elif m := _UUID.match(rest):
            gpu = per_host.setdefault(section.get(host, "GPU ?"), _Gpu())
            gpu.uuid, gpu.line = m.group(1), number
        elif m := _CLIQUE.match(rest):
            gpu = per_host.setdefault(section.get(host, "GPU ?"), _Gpu())
            gpu.clique, gpu.line = m.group(1), number
    for name, per_gpu in gpus.items():
        first: _Gpu | None = None
        for gpu in per_gpu.values():
            domain = gpu.domain()
            if domain is None:
                continue
            if first is None:
                first = gpu
            elif first.domain() != domain:
                raise table.error(
                    gpu.line,
                    f"host {name!r} has GPUs in two NVLink domains: {first.domain()!r} (line {first.line}) "
                    f"and {domain!r}",
                )
        if first is not None:
            table.add(name, first.domain() or "", None, first.line)
