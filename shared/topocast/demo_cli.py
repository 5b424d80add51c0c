"""``topocast demo``'s install check: the simulators are not part of the shipped package.

They live in ``topocast_sim`` (installed with the distribution) and need the ``demo`` extra
(moto, gcp-storage-emulator; the GCP demo also the ``gcp`` extra for functions-framework).
Without them ``topocast demo`` says in one line what to install instead of a traceback.
"""

from __future__ import annotations

import importlib

__all__ = ["DEMO_NEEDS", "missing_demo_extra"]

#: cloud -> (module, extra that provides it) the demo imports
DEMO_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "aws": (("topocast_sim.demo", "demo"), ("moto", "demo"), ("boto3", "aws")),
    "gcp": (("topocast_sim.gcp_demo", "demo"), ("gcp_storage_emulator", "demo"), ("functions_framework", "gcp")),
}


def missing_demo_extra(cloud: str) -> str | None:
    """One line naming the extra to install when the demo of ``cloud`` cannot run here, else None."""
    for module, extra in DEMO_NEEDS.get(cloud, ()):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing = exc.name or module
            return f"`topocast demo --cloud {cloud}` needs {missing}: pip install 'topocast[{extra}]'"
    return None
