"""Build one deployable archive per function: what ``make package`` / ``topocast package`` run.

AWS (``<out>/aws/{discover,render,publish}.zip``): ``handler.py`` from
``functions/<stage>/`` at the zip root (Lambda handler ``handler.handler``),
the ``topocast`` package, and its dependencies for the Lambda runtime, installed
with ``pip install --target --platform manylinux2014_<arch> --only-binary=:all:
--python-version <v>``: the core dependencies plus the ``aws`` extra (and ``k8s``
for publish), without boto3/botocore, which the runtime provides.

GCP (``<out>/gcp/{discover,render,publish}.zip``): the Cloud Functions source
archive: ``main.py`` from ``functions/<stage>/``, a ``requirements.txt`` (core +
``gcp`` extra, + ``k8s`` for publish; Cloud Build installs it) and the
``topocast`` source.

Archives are deterministic (sorted entries, fixed timestamps and modes, no
bytecode, no ``bin/`` scripts with local shebangs), so Terraform's hash of a
zip changes only when its content does. The dependency install is injectable
(``installer=``) so tests can check layout and determinism without PyPI.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from topocast.errors import TopocastError

STAGES = ("discover", "render", "publish")
CLOUDS = ("aws", "gcp")
#: provided by the Lambda Python runtime; bundling them only grows the zip
AWS_RUNTIME_PROVIDED = frozenset({"boto3", "botocore"})
ARCHES = {"x86_64": "manylinux2014_x86_64", "arm64": "manylinux2014_aarch64"}
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_SKIP_PARTS = {"__pycache__", ".mypy_cache", ".pytest_cache"}

#: installer(requirements, target_dir, python_version, platform_tag); must fill target_dir
Installer = Callable[[Sequence[str], Path, str, str], None]


class PackageError(TopocastError):
    """A package could not be built (missing source, failed dependency install)."""


@dataclass(frozen=True)
class Project:
    """Where the sources are and what the package depends on (from pyproject.toml)."""

    root: Path
    dependencies: tuple[str, ...]
    extras: dict[str, tuple[str, ...]]

    @property
    def package_dir(self) -> Path:
        return self.root / "shared" / "topocast"

    def function_file(self, stage: str, name: str) -> Path:
        path = self.root / "functions" / stage / name
        if not path.is_file():
            raise PackageError(f"{path}: missing; every function needs functions/<stage>/{name}")
        return path


def load_project(root: Path | None = None) -> Project:
    root = root or Path(__file__).resolve().parents[3]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file():
        raise PackageError(f"{pyproject}: not found; run from a topocast checkout or pass project_root")
    data = tomllib.loads(pyproject.read_text())["project"]
    extras = {k: tuple(v) for k, v in data.get("optional-dependencies", {}).items()}
    return Project(root, tuple(data.get("dependencies", [])), extras)


def _name(requirement: str) -> str:
    match = re.match(r"^\s*([A-Za-z0-9._-]+)", requirement)
    if not match:
        raise PackageError(f"cannot read requirement {requirement!r} in pyproject.toml")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def requirements(project: Project, cloud: str, stage: str) -> list[str]:
    """Requirement specifiers of one function: core + the cloud's extra (+ k8s for publish)."""
    extras = [cloud] + (["k8s"] if stage == "publish" else [])
    reqs = list(project.dependencies)
    for extra in extras:
        if extra not in project.extras:
            raise PackageError(f"pyproject.toml has no optional dependency group {extra!r}")
        reqs += [r for r in project.extras[extra] if not r.startswith("topocast")]
    if cloud == "aws":
        reqs = [r for r in reqs if _name(r) not in AWS_RUNTIME_PROVIDED]
    return sorted(dict.fromkeys(reqs), key=str.lower)


def pip_installer(reqs: Sequence[str], target: Path, python_version: str, platform_tag: str) -> None:
    """Install ``reqs`` for the Lambda runtime into ``target`` with pip (needs PyPI)."""
    cmd = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile",
        "--target", str(target), "--platform", platform_tag, "--implementation", "cp",
        "--python-version", python_version, "--only-binary=:all:", *reqs,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise PackageError(f"pip install for {platform_tag} / Python {python_version} failed:\n{proc.stderr[-3000:]}")


def _files(base: Path) -> Iterable[tuple[str, Path]]:
    """(archive name, path) of every file under ``base`` worth shipping, sorted."""
    out = []
    for path in base.rglob("*"):
        rel = path.relative_to(base)
        if not path.is_file() or _SKIP_PARTS & set(rel.parts) or path.suffix in (".pyc", ".pyo"):
            continue
        if rel.parts[0] == "bin":  # console scripts carry this machine's interpreter path
            continue
        out.append((rel.as_posix(), path))
    return sorted(out)


def write_zip(dest: Path, entries: Iterable[tuple[str, bytes]]) -> Path:
    """A deterministic zip: entries sorted by name, fixed date, mode 0644, fixed compression."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".zip.tmp")
    seen: set[str] = set()
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, data in sorted(entries):
            if name in seen:
                raise PackageError(f"{dest.name}: {name} would be added twice")
            seen.add(name)
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.external_attr = (0o100644 & 0xFFFF) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=9)
    tmp.replace(dest)
    return dest


def _tree(base: Path, prefix: str) -> list[tuple[str, bytes]]:
    return [(f"{prefix}{name}", path.read_bytes()) for name, path in _files(base)]


def build_packages(
    out_dir: Path | str,
    cloud: str = "all",
    python_version: str = "3.12",
    platform: str = "x86_64",
    *,
    project_root: Path | None = None,
    installer: Installer | None = None,
) -> dict[str, Path]:
    """Build the archives; returns ``{"aws/discover": path, ...}``.

    ``platform`` is the Lambda architecture (``x86_64`` or ``arm64``) or a pip platform tag.
    """
    if cloud not in (*CLOUDS, "all"):
        raise PackageError(f"cloud must be aws, gcp or all, got {cloud!r}")
    if not re.fullmatch(r"3\.\d{1,2}", python_version):
        raise PackageError(f"python_version must look like 3.12, got {python_version!r}")
    platform_tag = ARCHES.get(platform, platform)
    project = load_project(project_root)
    out = Path(out_dir)
    install = installer or pip_installer
    source = _tree(project.package_dir, "topocast/")
    built: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="topocast-package-") as scratch:
        deps_cache: dict[tuple[str, ...], list[tuple[str, bytes]]] = {}
        for c in CLOUDS if cloud == "all" else (cloud,):
            for stage in STAGES:
                reqs = requirements(project, c, stage)
                if c == "aws":
                    key = tuple(reqs)
                    if key not in deps_cache:  # discover and render share one install
                        target = Path(scratch) / f"deps-{len(deps_cache)}"
                        target.mkdir()
                        install(reqs, target, python_version, platform_tag)
                        deps = _tree(target, "")
                        clash = {n for n, _ in deps if n.startswith("topocast/") or n == "handler.py"}
                        if clash:
                            raise PackageError(f"dependencies install files topocast ships itself: {sorted(clash)[:3]}")
                        deps_cache[key] = deps
                    handler = project.function_file(stage, "handler.py").read_bytes()
                    entries = [("handler.py", handler), *source, *deps_cache[key]]
                else:
                    main = project.function_file(stage, "main.py").read_bytes()
                    entries = [("main.py", main), ("requirements.txt", ("\n".join(reqs) + "\n").encode()), *source]
                built[f"{c}/{stage}"] = write_zip(out / c / f"{stage}.zip", entries)
    return built
