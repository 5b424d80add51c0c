"""``topocast package --agent``: the head-node agent as one file, built offline from this installation.

``dist/topocast-agent.pyz`` is a zipapp (PEP 441) holding the ``topocast`` package and the installed
distributions the agent needs (the core dependencies, plus boto3 for ``ssm://``/``s3://`` and
google-cloud-storage for ``gs://``, per ``--cloud``), copied from this Python's site-packages, so no
package index is asked. Compiled dependencies (pydantic-core, msgspec, PyYAML's C loader) cannot be
imported from inside a zip, so on its first run the archive unpacks its ``lib/`` once into a cache
directory named by the archive's content hash (``$TOPOCAST_AGENT_CACHE``, else systemd's
``$CACHE_DIRECTORY`` (the units' ``CacheDirectory=topocast-agent``), else ``/var/cache/topocast-agent``
when writable, else ``~/.cache/topocast-agent``) and runs from there; a
later run only checks the directory exists. The compiled parts bind the archive to the Python minor
version and platform it was built with: the archive refuses any other in one line.

Every command of ``topocast`` runs from it (``python3 topocast-agent.pyz pull --source ... --dest ...``);
the ones the functions use (render of every format, discover of every cloud) may miss an extra.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import sysconfig
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

from topocast.cli.package import PackageError, load_project, write_zip

__all__ = ["AGENT_CLOUD_DISTRIBUTIONS", "agent_distributions", "build_agent"]

#: what each --cloud adds to the core dependencies: the SDKs of the pull agent's sources
AGENT_CLOUD_DISTRIBUTIONS = {"aws": ("boto3",), "gcp": ("google-cloud-storage",)}

#: core dependencies no module of the agent imports (rich: 1.5 MB with pygments)
AGENT_SKIPS = frozenset({"rich"})
#: botocore's API models the agent's AWS calls need (sources ssm:// s3://, --watch SQS, --token-from Secrets
#: Manager, credentials through STS / SSO; ec2 for discover on the head node): the other 440 are 15 MB zipped
AGENT_AWS_SERVICES = frozenset({"ec2", "s3", "secretsmanager", "sqs", "ssm", "sso", "sso-oidc", "sts"})

_BOOTSTRAP = '''\
"""topocast head-node agent (built by 'topocast package --agent'): unpack lib/ once, then run topocast."""
import json, os, sys, tempfile, zipfile
from pathlib import Path

def _fail(message):
    sys.stderr.write(f"topocast: error: {message}\\n")
    sys.exit(2)

def _cache_dir(build):
    for variable in ("TOPOCAST_AGENT_CACHE", "CACHE_DIRECTORY"):  # the second: systemd's CacheDirectory=
        if os.environ.get(variable):
            return Path(os.environ[variable].split(":")[0]) / build
    system = Path("/var/cache/topocast-agent")
    if os.access(system if system.exists() else system.parent, os.W_OK):
        return system / build
    return Path.home() / ".cache" / "topocast-agent" / build

def _unpacked(archive):
    with zipfile.ZipFile(archive) as zf:
        meta = json.loads(zf.read("agent.json"))
        python = "%d.%d" % sys.version_info[:2]
        if python != meta["python"]:
            _fail(f"{archive} was built for Python {meta['python']}, this is {python}: "
                  f"run it with python{meta['python']} or build it on this host (topocast package --agent)")
        where = _cache_dir(meta["build"])
        if not where.is_dir():
            where.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=where.parent))
            zf.extractall(tmp, [n for n in zf.namelist() if n.startswith("lib/")])
            try:
                os.rename(tmp / "lib", where)  # atomic: a concurrent first run keeps whichever came first
            except OSError:
                if not where.is_dir():
                    raise
            finally:
                import shutil
                shutil.rmtree(tmp, ignore_errors=True)
    return where

sys.path[:0] = [str(_unpacked(os.path.dirname(os.path.abspath(__file__))))]
from topocast.cli.commands import main
main()
'''


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def agent_distributions(cloud: str) -> list[str]:
    """The installed distributions the agent needs for ``cloud`` (aws, gcp or all): their closure of requirements
    (markers for this interpreter, no extras), sorted."""
    if cloud not in (*AGENT_CLOUD_DISTRIBUTIONS, "all"):
        raise PackageError(f"--cloud {cloud!r}: expected aws, gcp or all")
    project = load_project()
    roots = [*(re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0] for r in project.dependencies)]
    for name, sdks in AGENT_CLOUD_DISTRIBUTIONS.items():
        if cloud in (name, "all"):
            roots += sdks
    seen: dict[str, metadata.Distribution] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        if _key(name) in seen or _key(name) in AGENT_SKIPS:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise PackageError(
                f"{name} is not installed in {sys.prefix}: install the agent's dependencies here first "
                f"(pip install -e '.[{cloud if cloud != 'all' else 'aws,gcp'}]')"
            ) from None
        seen[_key(name)] = dist
        for req in dist.requires or []:
            spec, _, marker = req.partition(";")
            if marker.strip() and not _marker_holds(marker):
                continue
            todo.append(re.split(r"[\s<>=!~(\[]", spec.strip(), maxsplit=1)[0])
    return sorted(seen)


def _marker_holds(marker: str) -> bool:
    """An environment marker for this interpreter; a requirement that needs an extra is not installed."""
    if "extra" in marker:
        return False
    try:
        from packaging.markers import Marker
    except ImportError:  # pip vendors it
        from pip._vendor.packaging.markers import Marker  # type: ignore[assignment]

    return Marker(marker).evaluate()


def _distribution_files(name: str) -> Iterable[tuple[str, bytes]]:
    dist = metadata.distribution(name)
    base = Path(str(dist.locate_file("")))
    for item in dist.files or []:
        rel = Path(str(item))
        if rel.parts[0] in ("..", "bin") or "__pycache__" in rel.parts or rel.suffix in (".pyc", ".pyo"):
            continue  # console scripts and bytecode are this machine's
        if rel.parts[:2] == ("botocore", "data") and len(rel.parts) > 3 and rel.parts[2] not in AGENT_AWS_SERVICES:
            continue
        path = base / rel
        if path.is_file():
            yield f"lib/{rel.as_posix()}", path.read_bytes()


def build_agent(out_dir: Path, cloud: str = "all") -> Path:
    """Write ``out_dir/topocast-agent.pyz``; deterministic for one installation."""
    project = load_project()
    entries: list[tuple[str, bytes]] = []
    for name in agent_distributions(cloud):
        if name == "topocast":
            continue
        entries += _distribution_files(name)
    for path in sorted(project.package_dir.rglob("*")):
        rel = path.relative_to(project.package_dir)
        if path.is_file() and "__pycache__" not in rel.parts and path.suffix not in (".pyc", ".pyo"):
            entries.append((f"lib/topocast/{rel.as_posix()}", path.read_bytes()))
    build = hashlib.sha256()
    for name, data in sorted(entries):
        build.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    meta = {"python": python, "platform": sysconfig.get_platform(), "cloud": cloud, "build": build.hexdigest()[:16]}
    entries += [("agent.json", json.dumps(meta, sort_keys=True).encode()), ("__main__.py", _BOOTSTRAP.encode())]
    dest = out_dir / "topocast-agent.pyz"
    write_zip(dest, entries)
    # a zipapp: an interpreter line in front of the zip (zip readers find the directory from the end)
    dest.write_bytes(f"#!/usr/bin/env python{python}\n".encode() + dest.read_bytes())
    dest.chmod(0o755)
    return dest
