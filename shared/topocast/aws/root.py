"""The AWS composition root: ``TOPOCAST_*`` settings -> clients, stores and the use cases' ports.

:class:`AwsRuntime` is built once per Lambda process (:func:`topocast.aws.handlers.runtime`) or by
tests and the demo; clients and adapters are created on first use and reused by later invocations.
It supplies the adapters, :class:`~topocast.app.wiring.CompositionRoot` builds each stage's bundle
from them (:meth:`~topocast.app.wiring.CompositionRoot.discover_ports`, ...), so a function only builds
the clients its stage calls. Credentials come from the standard AWS chain (the Lambda role);
secrets (NetQ) are resolved here and handed to the provider.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from topocast.app.metrics import MetricCounts
from topocast.app.wiring import CompositionRoot
from topocast.aws.metrics import AwsMetrics
from topocast.config import Settings
from topocast.k8s.nodes_client import with_node_lister
from topocast.ports.protocols import Publisher
from topocast.providers import Provider, ProviderInputs, build_provider
from topocast.providers.base import no_client
from topocast.publish import PublisherInputs, build_publishers, register_publisher

if TYPE_CHECKING:  # the adapters are imported where they are built: a stage loads only its own
    from topocast.aws.debounce import DynamoSqsDebouncer
    from topocast.aws.publish_state import S3PublishState
    from topocast.aws.s3_artifacts import S3ArtifactStore
    from topocast.aws.s3_objects import S3Objects
    from topocast.aws.s3_store import S3GraphStore
    from topocast.providers.aws.api import Ec2Api

__all__ = ["AwsMetrics", "AwsRuntime", "SqsPublishHandoff", "SqsRechecks", "SsmGuardOverride", "build"]

# Slurm files as SSM parameters (+ S3 for big ones) for `topocast pull --source ssm://...`
register_publisher("ssm", "topocast.aws.ssm_publish:from_inputs")

#: the clients ``AwsRuntime.client`` hands providers and publishers (each built once per process)
SUPPLIED_CLIENTS = ("s3", "ec2", "sqs", "ssm", "dynamodb")


class SqsPublishHandoff:
    """:class:`~topocast.ports.protocols.PublishHandoff`: a message on the publish queue."""

    def __init__(self, cluster: str, queue_url: str, sqs: Any) -> None:
        self.cluster, self.queue_url, self.sqs = cluster, queue_url, sqs

    def request_publish(self, generation: int, reason: str, dedup: str) -> None:
        from topocast.app.event_table import PUBLISH_MESSAGE
        from topocast.aws.retry import with_retries

        body = {"kind": PUBLISH_MESSAGE, "cluster": self.cluster, "generation": generation, "reason": reason}
        with_retries(
            lambda: self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(body)),
            what=f"hand generation {generation} to publish",
        )


class SqsRechecks:
    """:class:`~topocast.ports.protocols.Rechecks`: a ``topocast/Recheck`` envelope on the events queue, delayed
    with ``DelaySeconds`` (the SQS timer the debouncer uses too; at most 900 s)."""

    def __init__(self, cluster: str, queue_url: str, sqs: Any) -> None:
        self.cluster, self.queue_url, self.sqs = cluster, queue_url, sqs

    def schedule(self, instances: Sequence[tuple[str, str]], attempt: int, delay: float, dedup: str) -> str:
        from topocast.app.event_table import AWS_RECHECK
        from topocast.aws.debounce import MAX_SQS_DELAY
        from topocast.aws.retry import with_retries

        source, _, detail_type = AWS_RECHECK.partition("/")
        detail = {
            "cluster": self.cluster,
            "attempt": attempt,
            "instances": [{"instance": i, "kind": k} for i, k in instances],
        }
        body = {"source": source, "detail-type": detail_type, "id": f"recheck-{dedup}", "detail": detail}
        seconds = min(MAX_SQS_DELAY, math.ceil(delay))
        with_retries(
            lambda: self.sqs.send_message(QueueUrl=self.queue_url, MessageBody=json.dumps(body), DelaySeconds=seconds),
            what=f"schedule re-check {attempt} of {len(instances)} instance(s)",
        )
        return "sent"


class SsmGuardOverride:
    """:class:`~topocast.ports.protocols.GuardOverride`: env ``TOPOCAST_GUARD_ALLOW_GENERATION``, then SSM."""

    def __init__(self, cluster: str, ssm: Any, parameter: str | None) -> None:
        self.cluster, self.ssm, self.parameter = cluster, ssm, parameter

    def allowed_generation(self) -> str | None:
        from topocast.aws.publish_state import read_override

        return read_override(self.cluster, self.ssm, self.parameter)


class AwsRuntime(CompositionRoot):
    """Clients and adapters for one cluster, created lazily and reused across invocations."""

    def __init__(
        self,
        settings: Settings,
        session: Any = None,
        region: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.clock = clock  # the debouncer's; the simulators pass theirs (topocast_sim.simclock)
        self.session = session
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        self.metrics: AwsMetrics = AwsMetrics()

    @property
    def counters(self) -> MetricCounts:
        return self.metrics.counts

    # ----- clients ------------------------------------------------------------------------------
    def client(self, service: str) -> Any:
        """``sdk_client``: the boto3 clients the functions use; any other service (``oci``, ``azure-compute``,
        boto3's own others) is refused in one line instead of asking boto3 for it."""
        return getattr(self, service) if service in SUPPLIED_CLIENTS else no_client(service)

    def _client(self, service: str) -> Any:
        from topocast.providers.aws.sdk import boto3_client

        return boto3_client(service, self.region, self.session)

    @cached_property
    def s3(self) -> Any:
        return self._client("s3")

    @cached_property
    def ec2(self) -> Ec2Api:
        from topocast.providers.aws.sdk import ec2_client

        return ec2_client(self.region, self.session)

    @cached_property
    def sqs(self) -> Any:
        return self._client("sqs")

    @cached_property
    def ssm(self) -> Any:
        return self._client("ssm")

    @cached_property
    def dynamodb(self) -> Any:
        return self._client("dynamodb")

    # ----- adapters -----------------------------------------------------------------------------
    @cached_property
    def objects(self) -> S3Objects:
        from topocast.aws.s3_objects import S3Objects

        self.settings.require("bucket")
        return S3Objects(self.settings.bucket or "", self.s3)

    @cached_property
    def graphs(self) -> S3GraphStore:
        from topocast.aws.s3_store import S3GraphStore

        self.settings.require("bucket")
        return S3GraphStore(self.settings.bucket or "", self.settings.prefix, self.settings.cluster, self.s3)

    @cached_property
    def artifacts(self) -> S3ArtifactStore:
        from topocast.aws.s3_artifacts import S3ArtifactStore

        self.settings.require("bucket")
        return S3ArtifactStore(self.settings.bucket or "", self.settings.prefix, self.settings.cluster, self.s3)

    @cached_property
    def publish_state(self) -> S3PublishState:
        from topocast.aws.publish_state import S3PublishState

        return S3PublishState(self.settings.bucket or "", self.settings.prefix, self.settings.cluster, self.s3)

    @cached_property
    def debouncer(self) -> DynamoSqsDebouncer:
        from topocast.aws.debounce import DynamoSqsDebouncer

        s = self.settings
        s.require("state_table", "timer_queue_url")
        return DynamoSqsDebouncer(
            s.state_table or "",
            s.timer_queue_url or "",
            self.dynamodb,
            self.sqs,
            self.debounce_policy,
            clock=self.clock,
            on_reset=self.debounce_state_reset,
        )

    @cached_property
    def rechecks(self) -> SqsRechecks | None:
        """Delayed re-checks go back to discover's own events queue (None when it is not configured)."""
        url = self.settings.events_queue_url
        return SqsRechecks(self.settings.cluster, url, self.sqs) if url else None

    @cached_property
    def handoff(self) -> SqsPublishHandoff:
        self.settings.require("publish_queue_url")
        return SqsPublishHandoff(self.settings.cluster, self.settings.publish_queue_url or "", self.sqs)

    @cached_property
    def override(self) -> SsmGuardOverride:
        return SsmGuardOverride(self.settings.cluster, self.ssm, self.settings.guard_override_parameter)

    # ----- discovery and publishers through their registries -----------------------------------
    def _read_text(self, uri: str) -> str:
        """A file an operator maintains by hand: ``s3://bucket/key`` or ``ssm:///parameter``."""
        from topocast.errors import ProviderError

        if uri.startswith("ssm:///"):
            value = self.ssm.get_parameter(Name=uri.removeprefix("ssm://"), WithDecryption=True)["Parameter"]["Value"]
            return str(value)
        if uri.startswith("s3://"):
            bucket, _, key = uri.removeprefix("s3://").partition("/")
            return bytes(self.s3.get_object(Bucket=bucket, Key=key)["Body"].read()).decode()
        raise ProviderError(f"TOPOCAST_DOMAINS_URI must be s3://bucket/key or ssm:///parameter, got {uri!r}")

    def _secret(self, ref: str) -> str:
        from topocast.providers.aws.sdk import read_secret_arn

        return read_secret_arn(ref, session=self.session)[0]

    def provider(self) -> Provider:
        """The configured topology source (``TOPOCAST_PROVIDER``: aws, ibnetdiscover, netq, k8s-labels)."""
        s = self.settings
        clients = with_node_lister(self.client, s.k8s_options)  # the AWS clients, and k8s-nodes for k8s-labels
        inputs = ProviderInputs(s.cluster, s.provider_options(), clients, self.uploads, self._read_text, self._secret)
        return build_provider(s.provider, inputs, s.overlays)

    def publishers(self) -> Sequence[Publisher]:
        """The publishers named in ``TOPOCAST_PUBLISHERS`` (ssm, kubernetes)."""
        inputs = PublisherInputs(self.settings, lambda g: self.graphs.get(g).graph, self.client, self.objects)
        return build_publishers(self.settings.publishers, inputs)


def build(settings: Settings, *, session: Any = None, region: str | None = None) -> AwsRuntime:
    """The composition root: everything the AWS functions need, built lazily from ``settings``."""
    return AwsRuntime(settings, session=session, region=region)
