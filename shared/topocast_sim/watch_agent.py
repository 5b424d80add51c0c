"""The head node's ``topocast pull --watch`` beside a local pipeline, notified the way Terraform wires it.

* AWS (:func:`aws_watch_queue`): an SQS queue per head node and an EventBridge rule on
  Systems Manager's ``Parameter Store Change`` events of the cluster's Slurm path
  (``infra/terraform/modules/aws/pull_watch.tf``). moto does not emit those events, so
  :func:`play_parameter_store` makes the pipeline's SSM client play Parameter Store's part: after
  each ``PutParameter`` it puts the event Systems Manager would send.
* GCP (:func:`gcs_notification_subscription`): a Pub/Sub topic, a pull subscription per head node
  and the bucket's ``OBJECT_FINALIZE`` notification config on ``<prefix>/<cluster>/slurm/``
  (``infra/terraform/modules/gcp/pull_watch.tf``), on :class:`topocast_sim.pubsub.FakePubSub`;
  the Cloud Storage proxy (:mod:`topocast_sim.gcs`) publishes the notifications.

:class:`WatchingAgent` runs :func:`topocast.agents.pull_watch.watch` (the command's own loop) on a
thread and records when each install happened and which nodes the installed file lists, so a
demo or a bench can time every event to the head node.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from topocast.agents.pull import PullOutcome
from topocast.agents.pull_watch import Waker, WatchStats, watch

__all__ = [
    "Install",
    "WatchingAgent",
    "aws_watch_queue",
    "conf_node_names",
    "gcs_notification_subscription",
    "play_parameter_store",
]


def conf_node_names(conf: bytes) -> set[str]:
    """The nodes a Slurm topology.conf lists (``Nodes=`` host lists, expanded)."""
    from topocast.model.hostlist import expand

    return {n for expr in re.findall(rb"Nodes=(\S+)", conf) for n in expand(expr.decode())}


@dataclass(frozen=True)
class Install:
    at: float  # time.time() of the install
    names: frozenset[str]


class WatchingAgent:
    """``topocast pull --watch`` on a thread: ``pull_once`` is one pull into ``dest``; installs are recorded."""

    def __init__(
        self, pull_once: Callable[[], PullOutcome], dest: Path, waker: Waker, *, fallback_seconds: float = 60.0
    ) -> None:
        self.dest = dest
        self.installs: list[Install] = []
        self.last: PullOutcome | None = None
        #: the last pull that installed the published file, else the first that found it in place already
        self.last_install: PullOutcome | None = None
        #: pulls that raised (before the first publish the source does not exist yet: expected)
        self.errors: list[str] = []
        self.stats = WatchStats()
        self._pull_once = pull_once
        self._stopping = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(
            target=watch,
            args=(self._pull, waker),
            kwargs={"fallback_seconds": fallback_seconds, "stop": self._stopping.is_set, "stats": self.stats},
            name="pull-watch",
            daemon=True,
        )

    def _pull(self) -> int:
        try:
            out = self._pull_once()
        except Exception as exc:  # a failed pull: noted, the agent goes on, as the command's does
            self.errors.append(str(exc))
            return 1
        with self._changed:
            self.last = out
            # "unchanged": the file in place is already the published one (a rerun into the same directory);
            # a later notification for the same content (the leading edge's second publish) re-pulls it
            # "unchanged", which must not hide the pull that installed it
            if out.action in ("installed", "unchanged"):
                if out.action == "installed" or self.last_install is None:
                    self.last_install = out
                self.installs.append(Install(time.time(), frozenset(conf_node_names(self.dest.read_bytes()))))
            self._changed.notify_all()
        return 0 if out.ok else 1

    def start(self) -> WatchingAgent:
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stopping.set()
        self._thread.join(timeout)

    def wait_installed(self, names: set[str] | frozenset[str], timeout: float) -> float | None:
        """When a file listing every one of ``names`` was first in place; waits up to ``timeout`` (None: not yet)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while (at := next((i.at for i in self.installs if names <= i.names), None)) is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._changed.wait(min(left, 0.5))
            return at


def aws_watch_queue(events: Any, sqs: Any, *, name: str, ssm_path: str, head: str = "head0") -> str:
    """The head node's queue (``{name}-pull-{head}``) on the rule ``{name}-pull-watch``, as Terraform
    creates them (Parameter Store changes under ``ssm_path``); returns the queue's URL."""
    url: str = sqs.create_queue(QueueName=f"{name}-pull-{head}", Attributes={"VisibilityTimeout": "300"})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = {
        "source": ["aws.ssm"],
        "detail-type": ["Parameter Store Change"],
        "detail": {"name": [{"prefix": f"{ssm_path}/"}], "operation": ["Create", "Update"]},
    }
    events.put_rule(Name=f"{name}-pull-watch", EventPattern=json.dumps(pattern), State="ENABLED")
    events.put_targets(Rule=f"{name}-pull-watch", Targets=[{"Id": head, "Arn": arn}])
    return url


def play_parameter_store(ssm: Any, events: Any) -> None:
    """After each successful ``PutParameter`` of ``ssm`` (the publisher's client), put the
    ``Parameter Store Change`` event Systems Manager would send on the default bus (moto sends none)."""
    region = ssm.meta.region_name
    pending: list[str] = []

    def before(params: dict[str, Any], **_: Any) -> None:
        pending.append(params["Name"])

    def after(http_response: Any = None, **_: Any) -> None:
        parameter = pending.pop()
        if http_response is not None and getattr(http_response, "status_code", 200) != 200:
            return  # a refused write changes nothing: Parameter Store emits no event
        detail = {"name": parameter, "type": "String", "operation": "Update"}
        events.put_events(
            Entries=[
                {
                    "Source": "aws.ssm",
                    "DetailType": "Parameter Store Change",
                    "Detail": json.dumps(detail),
                    "Resources": [f"arn:aws:ssm:{region}:123456789012:parameter{parameter}"],
                }
            ]
        )

    ssm.meta.events.register("before-parameter-build.ssm.PutParameter", before)
    ssm.meta.events.register("after-call.ssm.PutParameter", after)


def gcs_notification_subscription(
    pubsub_url: str, storage: Any, *, bucket: str, object_prefix: str, project: str, name: str, head: str = "head0"
) -> str:
    """Topic ``{name}-slurm-published``, subscription ``{name}-pull-{head}`` and the bucket's finalize
    notification on ``object_prefix``; returns the subscription's full name."""
    import requests

    topic = f"projects/{project}/topics/{name}-slurm-published"
    subscription = f"projects/{project}/subscriptions/{name}-pull-{head}"
    requests.put(f"{pubsub_url}/v1/{topic}", json={}, timeout=10).raise_for_status()
    body: dict[str, Any] = {"topic": topic, "ackDeadlineSeconds": 300}
    requests.put(f"{pubsub_url}/v1/{subscription}", json=body, timeout=10).raise_for_status()
    notification = storage.bucket(bucket).notification(
        topic_name=f"{name}-slurm-published",
        topic_project=project,
        event_types=["OBJECT_FINALIZE"],
        blob_name_prefix=object_prefix,
        payload_format="JSON_API_V1",
    )
    notification.create()
    return subscription
