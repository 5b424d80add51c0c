"""topocast: tell GPU schedulers where the wires are.

The package is a functional core (graph model, renderers) with thin cloud shells
around it. Importing it is cheap: cloud SDKs are imported only where used.
"""

__version__ = "0.1.0"
