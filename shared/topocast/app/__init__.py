"""The application layer: the three use cases every cloud runs, over typed ports.

``discover`` (events -> graph generation), ``render`` (timer -> files + publish request) and
``publish`` (generation -> publishers) each return an :class:`Outcome` (done / retry / drop with a
reason); the cloud entry points only parse deliveries and map outcomes (``batchItemFailures`` and
the DLQ on AWS, HTTP status on GCP). Every policy is decided here, once.
"""

from topocast.app.discover import discover
from topocast.app.outcome import Outcome, Status
from topocast.app.publish import publish
from topocast.app.render import render
from topocast.ports.protocols import DiscoverPorts, PublishPorts, RenderPorts

__all__ = ["DiscoverPorts", "Outcome", "PublishPorts", "RenderPorts", "Status", "discover", "publish", "render"]
