"""The whole AWS pipeline on a local moto server, driven the way Lambda drives it.

Provisions what Terraform would (bucket, DynamoDB debounce table, the events /
timer / publish queues with a DLQ, EventBridge rules from the EC2 and Auto
Scaling events to the events queue) and then plays the part of the Lambda
event source mappings: it receives SQS batches and invokes the real handlers
(:mod:`topocast.aws.handlers`) with the event shape Lambda uses, deleting the
records the handler did not report as failures. Used by ``topocast demo`` and
by the end-to-end tests; it only needs ``AWS_ENDPOINT_URL`` pointing at moto.

What it does not simulate: Lambda concurrency (handlers run one at a time, as
the reserved concurrency of 1 in Terraform makes them), IAM, and waiting out an
idle batching window: a pump gathers like Lambda's poller (10 per receive, up to
the batch size, the 6 MB payload limit or the window, never past half the
visibility timeout) but invokes as soon as nothing more is visible, which is
what a window that covers a burst does.

The queues have Terraform's visibility timeouts (6x the consuming function's timeout: 1,800 s,
720 s, 1,800 s) and its ``maxReceiveCount``, and a record a handler reports as failed stays
invisible until its timeout runs out, as with a real event source mapping, so a retried batch
arrives after newer events. Waits longer than ``max_real_wait`` (visibility timeouts, not
quiet windows) are skipped on the simulated clock (:mod:`topocast_sim.simclock`), which moto's
SQS and the debouncer both read. With ``real_time=False`` (tests that do not measure latency)
every wait is skipped, the quiet windows and max waits too: ``run_until_idle`` then never sleeps
while a message is due later, so a test pays for the work, not for the windows.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from topocast.app.event_table import aws_rule_patterns
from topocast.aws.debounce import create_state_table
from topocast.aws.handlers import discover_batch, publish_batch, render_batch
from topocast.aws.root import AwsRuntime
from topocast.config import Settings
from topocast_sim import moto_fast, simclock


@dataclass
class Queues:
    events: str
    dlq: str
    timer: str
    publish: str


#: infra/terraform/modules/aws: var.lambda_timeout_seconds defaults; each queue's visibility timeout is 6x
#: its consumer's (queues.tf), var.max_receive_count receives before the dead-letter queue
LAMBDA_TIMEOUT_SECONDS = {"discover": 300, "render": 120, "publish": 300}
QUEUE_CONSUMER = {"events": "discover", "timer": "render", "publish": "publish"}
VISIBILITY_SECONDS = {queue: min(43200, 6 * LAMBDA_TIMEOUT_SECONDS[fn]) for queue, fn in QUEUE_CONSUMER.items()}
MAX_RECEIVE_COUNT = 5

#: Lambda's synchronous invocation payload limit, what ends an SQS batch before batch_size
LAMBDA_PAYLOAD_LIMIT = 6 * 1024 * 1024
#: what an SQS record adds around its body in the invocation (ids, receipt handle, attributes, ARN)
_RECORD_OVERHEAD = 700


@dataclass
class PumpStats:
    discover_invocations: int = 0
    render_invocations: int = 0
    publish_invocations: int = 0
    failed_records: int = 0
    #: the longest time a gathered batch was held before its invocation (must stay < visibility timeout)
    max_held_seconds: float = 0.0
    #: simulated seconds skipped while waiting out visibility timeouts (``skip_long_wait``)
    skipped_seconds: float = 0.0
    log: list[str] = field(default_factory=list)


class LocalAwsPipeline:
    """One cluster's pipeline on moto. ``clients`` come from boto3's default chain (AWS_ENDPOINT_URL)."""

    def __init__(
        self,
        cluster: str = "demo",
        *,
        quiet: float = 2.0,
        max_wait: float = 20.0,
        formats: Iterable[str] | None = None,
        publishers: Iterable[str] = ("ssm",),
        filters: Iterable[str] | None = None,
        name_from: str = "tag:Name",
        guard_max_loss: float = 0.10,
        region: str = "us-east-1",
        provider: str = "aws",
        extra_settings: dict[str, Any] | None = None,
        max_real_wait: float = 5.0,
        real_time: bool = True,
    ) -> None:
        from topocast.providers.aws.sdk import boto3_client

        moto_fast.install()  # moto's SQS is O(n^2) to fill and drain; an in-process server gets fast paths
        self.cluster = cluster
        self.region = region
        self._client = lambda svc: boto3_client(svc, region)
        self.s3, self.sqs, self.events = self._client("s3"), self._client("sqs"), self._client("events")
        self.dynamodb, self.ec2, self.ssm = self._client("dynamodb"), self._client("ec2"), self._client("ssm")
        suffix = uuid.uuid4().hex[:8]
        self.bucket = f"topocast-{cluster}-{suffix}"
        self.table = f"topocast-{cluster}-{suffix}"
        self.queues = self._provision(suffix)
        settings: dict[str, Any] = {
            "cluster": cluster,
            "bucket": self.bucket,
            # the aws provider's own variables, as Terraform sets them (the other providers ignore them)
            "provider_env": {
                "TOPOCAST_FILTERS": ";".join(filters if filters is not None else [f"tag:topocast:cluster={cluster}"]),
                "TOPOCAST_NAME_FROM": name_from,
            },
            "debounce_quiet": quiet,
            "debounce_max_wait": max_wait,
            "state_table": self.table,
            "timer_queue_url": self.queues.timer,
            "publish_queue_url": self.queues.publish,
            "dlq_url": self.queues.dlq,
            "events_queue_url": self.queues.events,  # discover's delayed re-checks, as Terraform wires it
            "publishers": list(publishers),
            "guard_max_loss": guard_max_loss,
            "provider": provider,
            **(extra_settings or {}),
        }
        if formats is not None:
            settings["formats"] = list(formats)
        self.runtime = AwsRuntime(Settings.model_validate(settings), region=region, clock=simclock.now)
        # the debouncer's own timers (quiet window, max wait) run in real time, so a demo's event-to-
        # scheduler times mean what they say; only the longer waits (visibility timeouts) are skipped.
        # Without real time, every wait is skipped on the simulated clock.
        self.max_real_wait = max(max_real_wait, quiet + 1.0, max_wait + 1.0) if real_time else 0.0
        self.stats = PumpStats()
        self._visibility_s: dict[str, float] = {}

    # ----- provisioning (what infra/terraform/modules/aws creates) ----------------------------
    def _provision(self, suffix: str) -> Queues:
        self.s3.create_bucket(Bucket=self.bucket)
        self.s3.put_bucket_versioning(Bucket=self.bucket, VersioningConfiguration={"Status": "Enabled"})
        create_state_table(self.dynamodb, self.table)

        def queue(name: str, **attrs: str) -> str:
            return self.sqs.create_queue(QueueName=f"topocast-{self.cluster}-{name}-{suffix}", Attributes=attrs)[
                "QueueUrl"
            ]

        dlq = queue("dlq")
        dlq_arn = self.sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)})
        events, timer, publish = (
            queue(name, VisibilityTimeout=str(VISIBILITY_SECONDS[name]), RedrivePolicy=redrive)
            for name in ("events", "timer", "publish")
        )
        events_arn = self.sqs.get_queue_attributes(QueueUrl=events, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        # on-prem collectors upload under <prefix>/<cluster>/uploads/<host>/ibnetdiscover.out
        self.s3.put_bucket_notification_configuration(
            Bucket=self.bucket,
            NotificationConfiguration={
                "QueueConfigurations": [
                    {
                        "QueueArn": events_arn,
                        "Events": ["s3:ObjectCreated:*"],
                        "Filter": {
                            "Key": {
                                "FilterRules": [
                                    {"Name": "prefix", "Value": f"topocast/{self.cluster}/uploads/"},
                                    {"Name": "suffix", "Value": "/ibnetdiscover.out"},
                                ]
                            }
                        },
                    }
                ]
            },
        )
        # the module's rules, patterns from the event table (infra/terraform/modules/aws/event-patterns.json)
        for name, pattern in aws_rule_patterns().items():
            rule = f"topocast-{self.cluster}-{name}-{suffix}"
            self.events.put_rule(Name=rule, EventPattern=json.dumps(pattern), State="ENABLED")
            self.events.put_targets(Rule=rule, Targets=[{"Id": "events-queue", "Arn": events_arn}])
        return Queues(events=events, dlq=dlq, timer=timer, publish=publish)

    # ----- events -----------------------------------------------------------------------------
    def emit_state_changes(self, instance_ids: Iterable[str], state: str = "running") -> int:
        """Put EC2 state-change events on the default bus (10 per PutEvents call, as AWS allows)."""
        entries = [
            {
                "Source": "aws.ec2",
                "DetailType": "EC2 Instance State-change Notification",
                "Detail": json.dumps({"instance-id": iid, "state": state}),
                "Resources": [f"arn:aws:ec2:{self.region}:123456789012:instance/{iid}"],
            }
            for iid in instance_ids
        ]
        for start in range(0, len(entries), 10):
            resp = self.events.put_events(Entries=entries[start : start + 10])
            if resp.get("FailedEntryCount"):
                raise RuntimeError(f"PutEvents rejected {resp['FailedEntryCount']} event(s)")
        return len(entries)

    def emit_event(self, source: str, detail_type: str, detail: dict[str, Any], resources: Iterable[str] = ()) -> None:
        """Put any event on the default bus; the module's rules decide whether the events queue gets it."""
        entry: dict[str, Any] = {"Source": source, "DetailType": detail_type, "Detail": json.dumps(detail)}
        entry["Resources"] = list(resources)
        resp = self.events.put_events(Entries=[entry])
        if resp.get("FailedEntryCount"):
            raise RuntimeError(f"PutEvents rejected the {detail_type} event")

    def request_reconcile(self) -> None:
        """What the schedule rule sends: a Reconcile event straight onto the events queue."""
        body = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "source": "topocast",
            "detail-type": "Reconcile",
            "account": "123456789012",
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "region": self.region,
            "resources": [],
            "detail": {"cluster": self.cluster, "reason": "schedule"},
        }
        self.sqs.send_message(QueueUrl=self.queues.events, MessageBody=json.dumps(body))

    # ----- event source mappings ---------------------------------------------------------------
    def _visibility(self, url: str) -> float:
        if url not in self._visibility_s:
            attrs = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])["Attributes"]
            self._visibility_s[url] = float(attrs["VisibilityTimeout"])
        return self._visibility_s[url]

    def _receive_batch(self, url: str, batch_size: int, window: float) -> list[dict[str, Any]]:
        """Gather one invocation's batch the way Lambda's SQS poller does.

        ReceiveMessage returns at most 10 messages, so the poller keeps receiving
        until the batch is full (``batch_size``), the payload would pass Lambda's
        6 MB invocation limit, the queue has nothing visible, or the batching
        window is over. The window never runs past half the queue's visibility
        timeout (Lambda requires the timeout to exceed window + function timeout),
        so no message becomes visible again while it is still held.
        """
        hold = min(window, self._visibility(url) / 2)
        out: list[dict[str, Any]] = []
        payload = 0
        first: float | None = None
        largest = 0  # the next receive may bring 10 records this big: stop before it could pass 6 MB
        while len(out) < batch_size and (first is None or time.monotonic() - first < hold):
            resp = self.sqs.receive_message(
                QueueUrl=url, MaxNumberOfMessages=min(10, batch_size - len(out)), WaitTimeSeconds=0
            )
            msgs = resp.get("Messages", [])
            if not msgs:
                break
            first = first if first is not None else time.monotonic()
            out.extend(msgs)
            payload += sum(len(m["Body"]) + _RECORD_OVERHEAD for m in msgs)
            largest = max(largest, *(len(m["Body"]) for m in msgs))
            if payload + 10 * (largest + _RECORD_OVERHEAD) > LAMBDA_PAYLOAD_LIMIT:
                break
        self.stats.max_held_seconds = max(self.stats.max_held_seconds, time.monotonic() - first if first else 0.0)
        return out

    def _invoke(self, url: str, messages: list[dict[str, Any]], fn: Callable[[dict[str, Any]], dict]) -> None:
        event = {
            "Records": [
                {
                    "messageId": m["MessageId"],
                    "receiptHandle": m["ReceiptHandle"],
                    "body": m["Body"],
                    "attributes": {},
                    "messageAttributes": {},
                    "eventSource": "aws:sqs",
                    "awsRegion": self.region,
                }
                for m in messages
            ]
        }
        response = fn(event)
        failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
        self.stats.failed_records += len(failed)
        done = [m for m in messages if m["MessageId"] not in failed]
        for start in range(0, len(done), 10):
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(done[start : start + 10])
            ]
            self.sqs.delete_message_batch(QueueUrl=url, Entries=entries)
        # the failed records stay in flight: they return when the queue's visibility timeout runs out

    def pump_discover(self, batch_size: int = 10_000, window: float = 300.0) -> int:
        """One discover invocation (Terraform allows batch_size up to 10,000 and a window up to 300 s)."""
        msgs = self._receive_batch(self.queues.events, batch_size, window)
        if msgs:
            self.stats.discover_invocations += 1
            self._invoke(self.queues.events, msgs, lambda ev: discover_batch(ev, self.runtime))
        return len(msgs)

    def pump_render(self) -> int:
        msgs = self._receive_batch(self.queues.timer, 10, 0.0)
        if msgs:
            self.stats.render_invocations += 1
            self._invoke(self.queues.timer, msgs, lambda ev: render_batch(ev, self.runtime))
        return len(msgs)

    def pump_publish(self) -> int:
        msgs = self._receive_batch(self.queues.publish, 10, 0.0)
        if msgs:
            self.stats.publish_invocations += 1
            self._invoke(self.queues.publish, msgs, lambda ev: publish_batch(ev, self.runtime))
        return len(msgs)

    def pending_by_queue(self) -> dict[str, dict[str, int]]:
        """Per pipeline queue: messages visible, in flight (received, not deleted) and delayed."""
        names = {
            "visible": "ApproximateNumberOfMessages",
            "in_flight": "ApproximateNumberOfMessagesNotVisible",
            "delayed": "ApproximateNumberOfMessagesDelayed",
        }
        out: dict[str, dict[str, int]] = {}
        for queue in ("events", "timer", "publish"):
            url = getattr(self.queues, queue)
            attrs = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(names.values()))["Attributes"]
            out[queue] = {k: int(attrs.get(n, 0)) for k, n in names.items()}
        return out

    def pending(self) -> int:
        """Messages visible, delayed or in flight on the pipeline's queues (not the DLQ)."""
        total = 0
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        for url in (self.queues.events, self.queues.timer, self.queues.publish):
            attrs = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
            total += sum(int(attrs.get(n, 0)) for n in names)
        return total

    def run_until_idle(
        self, timeout: float = 120.0, poll: float = 0.2, on_tick: Callable[[], None] | None = None
    ) -> bool:
        """Pump every queue until nothing is left anywhere (True) or ``timeout`` passes (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            moved = self.pump_discover() + self.pump_render() + self.pump_publish()
            if on_tick:
                on_tick()
            if not moved and self.pending() == 0:
                return True
            if not moved and not self.skip_long_wait():
                time.sleep(poll)  # nothing skipped: what is pending becomes due within max_real_wait
        return False

    def skip_long_wait(self) -> float:
        """When the next message due (a failed record's visibility timeout, a delayed timer) is more than
        ``max_real_wait`` away, move the simulated clock to it; returns the seconds skipped."""
        due = moto_fast.next_due([self.queues.events, self.queues.timer, self.queues.publish])
        wait = due - simclock.now() if due is not None else 0.0
        if wait <= self.max_real_wait:
            return 0.0
        simclock.advance(wait + 0.001)
        self.stats.skipped_seconds += wait
        return wait

    def dlq_messages(self) -> list[dict[str, Any]]:
        resp = self.sqs.receive_message(
            QueueUrl=self.queues.dlq, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=0
        )
        return resp.get("Messages", [])
