"""Guard memory on AWS: the published record and the hold record as small S3 objects.

Layout under ``s3://<bucket>/<prefix>/<cluster>/state/`` (``published.json``,
``guard-hold.json``; see :class:`topocast.pipeline.publish_state.ObjectPublishState`).
S3 (not the debounce DynamoDB item) because the node list can be large and the
render/publish functions already have access to the bucket. The operator
override is read from env ``TOPOCAST_GUARD_ALLOW_GENERATION`` or an SSM
parameter (default ``/topocast/<cluster>/guard/allow-generation``) holding the
generation number to let through, e.g.::

    aws ssm put-parameter --name /topocast/c1/guard/allow-generation --value 42 --type String --overwrite
"""

from __future__ import annotations

from typing import Any

from topocast.aws.retry import error_code, with_retries
from topocast.aws.s3_objects import S3Backed
from topocast.pipeline import guard
from topocast.pipeline.publish_state import ObjectPublishState


class S3PublishState(S3Backed, ObjectPublishState):
    """:class:`topocast.ports.protocols.PublishState` in S3: ``S3PublishState(bucket, prefix, cluster, s3)``."""


def read_override(cluster: str, ssm: Any | None = None, parameter: str | None = None) -> str | None:
    """The operator's allow-generation value (:func:`topocast.pipeline.guard.read_override`: env first), then
    the SSM parameter; None if neither is set."""
    return guard.read_override(lambda: None if ssm is None else _read_parameter(ssm, cluster, parameter))


def _read_parameter(ssm: Any, cluster: str, parameter: str | None) -> str | None:
    name = parameter or f"/topocast/{cluster}/guard/allow-generation"
    try:
        resp = with_retries(lambda: ssm.get_parameter(Name=name), what=f"read SSM parameter {name}")
    except Exception as exc:
        if error_code(exc) == "ParameterNotFound":
            return None
        raise
    return str(resp["Parameter"]["Value"])
