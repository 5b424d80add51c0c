"""The ``topocast`` command: ``parser`` is the framework, ``commands`` the small commands, one module per larger one.

``main`` is the console script (``topocast = "topocast.cli:main"``); importing this package loads
no command's dependencies (``topocast render`` starts fast).
"""

from topocast.cli.commands import main  # importing it registers every command with the parser
from topocast.cli.parser import run

__all__ = ["main", "run"]
