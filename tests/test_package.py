"""`make package` / topocast.cli.package: one archive per function, deterministic, with the right layout.

Most tests stub the dependency install (no PyPI needed); the slow one builds a
real Lambda package with pip for this interpreter and imports the handler from
the unpacked zip alone, which proves the archive is self-contained.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from topocast.cli.package import PackageError, build_packages, load_project, pip_installer, requirements

REPO = Path(__file__).resolve().parent.parent


class StubInstaller:
    """Writes one fake module per requirement instead of calling pip; remembers the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], str, str]] = []

    def __call__(self, reqs: Sequence[str], target: Path, python_version: str, platform_tag: str) -> None:
        self.calls.append((list(reqs), python_version, platform_tag))
        for req in reqs:
            name = req.split(">")[0].split("<")[0].split("=")[0].strip().lower().replace("-", "_")
            (target / name).mkdir(exist_ok=True)
            (target / name / "__init__.py").write_text(f"# stub of {req}\n")
            pycache = target / name / "__pycache__"
            pycache.mkdir(exist_ok=True)
            (pycache / "x.cpython-312.pyc").write_bytes(b"\0")
        (target / "bin").mkdir(exist_ok=True)
        (target / "bin" / "tool").write_text(f"#!{sys.executable}\n")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def names(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return zf.namelist()


def read(path: Path, member: str) -> bytes:
    with zipfile.ZipFile(path) as zf:
        return zf.read(member)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the sources packaging reads, so tests can change them."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(REPO / "pyproject.toml", root)
    shutil.copytree(REPO / "functions", root / "functions", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(
        REPO / "shared" / "topocast", root / "shared" / "topocast", ignore=shutil.ignore_patterns("__pycache__")
    )
    return root


def test_aws_zip_has_the_handler_at_the_root_next_to_topocast_and_its_dependencies(
    project: Path, tmp_path: Path
) -> None:
    stub = StubInstaller()
    built = build_packages(tmp_path / "dist", "aws", "3.12", "arm64", project_root=project, installer=stub)
    assert sorted(built) == ["aws/discover", "aws/publish", "aws/render"]
    for stage in ("discover", "render", "publish"):
        zpath = tmp_path / "dist" / "aws" / f"{stage}.zip"
        members = names(zpath)
        assert read(zpath, "handler.py") == (project / "functions" / stage / "handler.py").read_bytes()
        assert "topocast/__init__.py" in members and "topocast/aws/handlers.py" in members
        assert "pydantic/__init__.py" in members, "dependencies are installed at the zip root"
        assert not [m for m in members if "__pycache__" in m or m.endswith(".pyc") or m.startswith("bin/")]
        assert members == sorted(members)
    # boto3/botocore come with the Lambda runtime; lightkube only where the Kubernetes publisher runs
    requested = {tuple(c[0]) for c in stub.calls}
    assert all(not any(r.lower().startswith(("boto3", "botocore")) for r in reqs) for reqs in requested)
    assert any(r.startswith("lightkube") for r in requirements(load_project(project), "aws", "publish"))
    assert not any(r.startswith("lightkube") for r in requirements(load_project(project), "aws", "discover"))
    assert {(v, p) for _, v, p in stub.calls} == {("3.12", "manylinux2014_aarch64")}
    assert len(stub.calls) == 2, "discover and render share one dependency install, publish has its own"


def test_no_simulator_or_demo_ships_in_a_function_archive(project: Path, tmp_path: Path) -> None:
    """The simulators and demos (``topocast_sim``, next to ``topocast`` in the checkout) stay out of every zip."""
    shutil.copytree(REPO / "shared" / "topocast_sim", project / "shared" / "topocast_sim",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    build_packages(tmp_path / "dist", "all", project_root=project, installer=StubInstaller())
    archives = sorted((tmp_path / "dist").rglob("*.zip"))
    assert len(archives) == 6
    for zpath in archives:
        members = names(zpath)
        assert "topocast/app/discover.py" in members  # the use cases do ship
        # no simulator package, and no module of ours whose name says demo (where the demos were before)
        shipped_sim = [
            m for m in members
            if m.startswith(("topocast_sim/", "topocast/sim/")) or (m.startswith("topocast/") and "demo" in m)
        ]  # fmt: skip
        assert shipped_sim == [], f"{zpath}: {shipped_sim[:5]}"
    for cloud in ("aws", "gcp"):
        for stage in ("discover", "render", "publish"):
            reqs = requirements(load_project(project), cloud, stage)
            assert not [r for r in reqs if r.startswith(("moto", "gcp-storage-emulator"))], (cloud, stage, reqs)


def test_gcp_zip_is_a_cloud_functions_source_archive(project: Path, tmp_path: Path) -> None:
    stub = StubInstaller()
    build_packages(tmp_path / "dist", "gcp", project_root=project, installer=stub)
    assert stub.calls == [], "Cloud Build installs GCP dependencies from requirements.txt"
    zpath = tmp_path / "dist" / "gcp" / "publish.zip"
    assert read(zpath, "main.py") == (project / "functions" / "publish" / "main.py").read_bytes()
    reqs = read(zpath, "requirements.txt").decode().split()
    assert any(r.startswith("functions-framework") for r in reqs)
    assert any(r.startswith("lightkube") for r in reqs)
    assert not any(r.startswith("boto3") for r in reqs)
    assert "topocast/gcp/handlers.py" in names(zpath)


def test_archives_are_byte_identical_across_builds_and_change_only_with_content(project: Path, tmp_path: Path) -> None:
    first = build_packages(tmp_path / "a", "all", project_root=project, installer=StubInstaller())
    # touching files (new mtimes) must not change anything
    for path in (project / "shared" / "topocast").rglob("*.py"):
        path.touch()
    second = build_packages(tmp_path / "b", "all", project_root=project, installer=StubInstaller())
    assert {k: sha(p) for k, p in first.items()} == {k: sha(p) for k, p in second.items()}
    handler = project / "functions" / "render" / "handler.py"
    handler.write_text(handler.read_text() + "\n# changed\n")
    third = build_packages(tmp_path / "c", "all", project_root=project, installer=StubInstaller())
    changed = {k for k in first if sha(first[k]) != sha(third[k])}
    assert changed == {"aws/render"}, "only the changed function's archive (and so its Terraform hash) changes"


def test_pip_is_asked_for_lambda_wheels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[list[str]] = []

    def fake_run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    pip_installer(["pydantic>=2.6,<3"], tmp_path, "3.12", "manylinux2014_x86_64")
    cmd = seen[0]
    assert cmd[cmd.index("--platform") + 1] == "manylinux2014_x86_64"
    assert cmd[cmd.index("--python-version") + 1] == "3.12"
    assert "--only-binary=:all:" in cmd and "--no-compile" in cmd and cmd[cmd.index("--target") + 1] == str(tmp_path)


def test_failed_pip_install_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(
        subprocess, "run", lambda cmd, **_: subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution")
    )
    with pytest.raises(PackageError, match=re.escape("manylinux2014_x86_64 / Python 3.12 failed:\nERROR: No matching")):
        pip_installer(["nope"], tmp_path, "3.12", "manylinux2014_x86_64")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cloud": "azure"}, "cloud must be aws, gcp or all, got 'azure'"),
        ({"python_version": "312"}, re.escape("python_version must look like 3.12, got '312'")),
    ],
)
def test_bad_arguments_name_the_argument(tmp_path: Path, kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(PackageError, match=message):
        build_packages(tmp_path, installer=StubInstaller(), **kwargs)  # type: ignore[arg-type]


def test_a_missing_entry_point_is_named(project: Path, tmp_path: Path) -> None:
    (project / "functions" / "publish" / "main.py").unlink()
    with pytest.raises(PackageError, match=r"functions/publish/main.py: missing"):
        build_packages(tmp_path, "gcp", project_root=project, installer=StubInstaller())


@pytest.mark.infra  # a real pip build
def test_real_lambda_package_imports_the_handler_from_the_zip_alone(tmp_path: Path) -> None:
    """Build discover with pip for *this* interpreter and import handler.handler from the unpacked zip only."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    try:
        built = build_packages(tmp_path / "dist", "aws", version, "x86_64")
    except PackageError as exc:
        pytest.skip(f"pip could not install the Lambda dependencies (PyPI unreachable?): {str(exc)[:300]}")
    unpacked = tmp_path / "lambda"
    with zipfile.ZipFile(built["aws/discover"]) as zf:
        zf.extractall(unpacked)
    # -S -I: no site-packages, no PYTHONPATH: only the zip's content (and the stdlib) is importable
    code = f"import sys; sys.path.insert(0, {str(unpacked)!r}); import handler; print(callable(handler.handler))"
    proc = subprocess.run([sys.executable, "-S", "-I", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stderr[-2000:]
    assert built["aws/discover"].stat().st_size < 50 * 1024 * 1024, "Lambda's direct-upload limit is 50 MB"
