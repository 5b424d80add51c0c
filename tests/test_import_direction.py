"""Imports point inward: the core never imports a cloud shell, a simulator, a CLI module or an agent.

Walks the AST of every module of the core packages (module-level and lazy imports inside
functions alike) and fails naming the module, the line and the outward import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parent.parent / "shared"
PACKAGE = SHARED / "topocast"

#: the functional core and the application layer (modules or packages under topocast/)
CORE = ["model", "errors", "registry", "safeio", "renderers", "providers", "config", "ports", "pipeline", "app"]
#: what the core must never import (prefixes)
OUTWARD = ("topocast.aws", "topocast.gcp", "topocast.k8s", "topocast_sim", "topocast.cli", "topocast.agents",
           "topocast.publish", "topocast.slurm")  # fmt: skip


def core_files() -> list[Path]:
    files: list[Path] = []
    for name in CORE:
        path = PACKAGE / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    return files


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, node.module)] + [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def outward(name: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in OUTWARD)


@pytest.mark.parametrize("path", core_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_core_module_imports_point_inward(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    bad = sorted({f"line {line}: {name}" for line, name in imported(tree) if outward(name)})
    assert not bad, f"{path.relative_to(SHARED)} imports outward: {'; '.join(bad)}"


def test_the_checker_sees_an_outward_import() -> None:
    """The rule itself: a lazy import of a cloud shell inside a function is caught."""
    tree = ast.parse("def f():\n    from topocast.aws.clients import client\n    import topocast.cli.render\n")
    assert [n for _, n in imported(tree) if outward(n)] == [
        "topocast.aws.clients",
        "topocast.aws.clients.client",
        "topocast.cli.render",
    ]
    assert not outward("topocast.pipeline.store") and not outward("topocast.providers.aws.sdk")


@pytest.mark.parametrize("stage", ["discover", "render", "publish"])
def test_function_entry_points_reach_no_cli_agent_or_simulator(stage: str) -> None:
    """What a function can import (statically, lazily too): never the CLI's collect, the pull agent,
    a CLI module or the simulators (functions/<stage>/handler.py for AWS, gcp.handlers for GCP)."""
    from callscan import CallScanner

    repo = SHARED.parent
    scans = {
        "aws": CallScanner(SHARED).scan(repo / "functions" / stage / "handler.py", "handler"),
        "gcp": CallScanner(SHARED).scan_module("topocast.gcp.handlers", [stage, "handle", "build"]),
    }
    for cloud, scan in scans.items():
        assert scan.problems == [], scan.problems
        assert "topocast.app.discover" in scan.modules  # the use cases are what runs
        shells = ("topocast.aws", "topocast.gcp", "topocast.k8s", "topocast.publish")  # a function's own shell
        if stage == "publish":  # the slurmrestd target plans and moves nodes with the agent's own live plan
            shells += ("topocast.slurm",)
        bad = sorted(m for m in scan.modules if outward(m) and not m.startswith(shells))
        assert bad == [], f"{cloud} {stage} function reaches {bad}"


def test_no_test_double_ships_in_the_library() -> None:
    """In-memory stores live under tests/ (tests/memory_stores.py): the function archives carry only adapters."""
    from pathlib import Path

    shared = Path(__file__).resolve().parent.parent / "shared" / "topocast"
    doubles = [str(p) for p in shared.rglob("*.py") if "\nclass Memory" in p.read_text()]
    assert doubles == []
