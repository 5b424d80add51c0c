"""Exception types shared by the core and the cloud shells.

Every error carries a message that says *what* is wrong and *where* (node,
switch, file, line), because operators read these in logs at 3 a.m.
"""


class TopocastError(Exception):
    """Base class for errors that topocast reports to a user as one line."""


class UnsafeNameError(TopocastError):
    """A node, switch or domain name would break or inject into a config file."""


class InvalidGraphError(TopocastError):
    """A topology graph is malformed (bad JSON, wrong schema, not a tree...)."""


class RenderError(TopocastError):
    """A renderer cannot produce a valid artifact for this graph and options."""


class NotApplicableError(RenderError):
    """The graph lacks what a format needs (e.g. no NVLink domains for topology/block).

    The pipeline skips such a format with a warning instead of failing the whole render."""


class HostlistError(TopocastError):
    """A Slurm hostlist expression is malformed or expands past the limit."""


class ProviderError(TopocastError):
    """A topology source (cloud API, file) failed or returned unusable data."""


class StaleGenerationError(TopocastError):
    """A writer lost the race: a newer generation is already stored."""
