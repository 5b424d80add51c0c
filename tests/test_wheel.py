"""The wheel ships the product only: ``topocast`` and its data, not the simulators and demos (``topocast_sim``).

The simulators stay in the source tree, where an editable install of a checkout imports them
(``pip install -e ".[demo]"``); ``tests/test_demo_extra.py`` shows what ``topocast demo`` says without them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.infra
def test_the_wheel_holds_topocast_and_no_simulator(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy: building writes build/ and *.egg-info next to the sources
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "shared", src / "shared", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    out = tmp_path / "whl"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(src), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = out.glob("topocast-*.whl")
    members = zipfile.ZipFile(wheel).namelist()
    tops = {m.split("/")[0] for m in members}
    assert tops == {"topocast", wheel.name.removesuffix("-py3-none-any.whl") + ".dist-info"}, tops
    assert "topocast/cli/commands.py" in members and "topocast/py.typed" in members
    assert [m for m in members if m.startswith("topocast/data/")], "the package data ships"
    assert not [m for m in members if "topocast_sim" in m or "__pycache__" in m]
