"""``topocast demo`` on an install without the ``demo`` extra: one line naming the extra, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: run the real console entry point in a fresh interpreter where ``module`` cannot be imported
SCRIPT = """
import sys
sys.modules[{module!r}] = None  # what `import {module}` sees on an install without it
sys.argv = ["topocast", "demo", "--cloud", {cloud!r}, "--nodes", "4"]
from topocast.cli.commands import main
main()
"""


@pytest.mark.parametrize(
    ("cloud", "module", "extra"),
    [("aws", "moto", "demo"), ("gcp", "gcp_storage_emulator", "demo"), ("aws", "topocast_sim", "demo")],
)
def test_demo_without_its_extra_says_which_to_install(cloud: str, module: str, extra: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(module=module, cloud=cloud)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("topocast: error: ") and f"pip install 'topocast[{extra}]'" in lines[0]
    assert module.partition(".")[0] in lines[0]
