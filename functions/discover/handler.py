"""AWS Lambda entry point of the discover stage (handler string: ``handler.handler``).

Thin on purpose: the logic lives in :mod:`topocast.aws.handlers`; importing this
module loads no AWS SDK (clients are created on first use).
"""

from topocast.aws.handlers import discover_handler as handler

__all__ = ["handler"]
