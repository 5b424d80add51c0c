"""The ``topocast`` command: ``commands`` holds the parser and the small commands, one module per larger one.

``main`` is the console script (``topocast = "topocast.cli:main"``); importing this package loads
no command's dependencies (``topocast render`` starts fast).
"""

from topocast.cli.commands import main, run

__all__ = ["main", "run"]
