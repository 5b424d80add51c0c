"""``python -m topocast.cli``."""

from topocast.cli.main import main

main()
