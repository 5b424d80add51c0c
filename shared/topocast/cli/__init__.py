"""The ``topocast`` command: one module per command group; ``main`` holds the parser."""
