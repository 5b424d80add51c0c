"""``python -m topocast.cli``."""

from topocast.cli.commands import main

main()
