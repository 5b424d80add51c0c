"""``topocast demo`` on an install without the ``demo`` extra or the simulators (not in the wheel): one line
naming what to install, exit 2, no traceback."""

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
    ("cloud", "module", "install"),
    [
        ("aws", "moto", "pip install -e '.[demo]' in the checkout"),
        ("gcp", "gcp_storage_emulator", "pip install -e '.[demo]' in the checkout"),
        ("gcp", "functions_framework", "pip install -e '.[gcp]' in the checkout"),
        # the wheel has no simulators: only a checkout's editable install does
        ("aws", "topocast_sim", "git clone the topocast repository, then pip install -e '.[demo]' in it"),
        ("gcp", "topocast_sim", "git clone the topocast repository, then pip install -e '.[demo]' in it"),
    ],
)
def test_demo_without_its_extra_says_which_to_install(cloud: str, module: str, install: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(module=module, cloud=cloud)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("topocast: error: ") and install in lines[0]
    assert module.partition(".")[0] in lines[0]
