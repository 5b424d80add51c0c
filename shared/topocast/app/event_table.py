"""The one table of cloud event kinds and what discovery does with each, for both clouds.

Both parsers (``topocast.aws.events``, ``topocast.gcp.events``) decide what an event does by
looking its kind up here; the Terraform modules deliver exactly the kinds listed with a
:attr:`EventKind.route` (``tests/test_event_wiring.py`` compares them), and ``docs/events.md``
carries :func:`markdown_table` verbatim (checked by a test). Change an action here, and the
parsers, the wiring check and the docs follow.

Actions (:data:`topocast.model.changes.EventAction`):

* ``upsert`` - re-read the instance (``follow``: re-read until it is running again or gone,
  bounded, for host maintenance and restarts, where one read can land between stop and start);
* ``remove`` - drop it from the graph;
* ``reconcile`` - rediscover the whole cluster;
* ``noted`` - logged and counted, nothing changes (interruption warnings: the state change that
  follows moves the node);
* ``ignored`` - well-formed, nothing to do (the reason says why);
* ``rejected`` - dead-lettered with the reason.

Kinds are named ``<source>/<detail-type>`` on AWS (``#<variant>`` where one detail-type maps to
several actions, e.g. the instance state) and by audit-log ``methodName`` or CloudEvent ``type``
on GCP. Only plain data here: no cloud SDK, no parsing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

from topocast.model import changes
from topocast.model.changes import EventAction

__all__ = [
    "API_VERSIONS",
    "ASG_FAILURES",
    "ASG_LAUNCH",
    "ASG_LAUNCH_HOOK",
    "ASG_TERMINATE",
    "ASG_TERMINATE_HOOK",
    "AUTOSCALING",
    "AWS_RECHECK",
    "AWS_RULES",
    "CAPACITY_NOTICES",
    "EC2",
    "EC2_STATES",
    "GCP_PUBSUB",
    "GCP_RECHECK",
    "GCP_RECONCILE",
    "INSTANCE_NOTICES",
    "OBJECT_CREATED",
    "RECHECK",
    "RECONCILE",
    "REPLACE_ROOT_VOLUME",
    "S3",
    "S3_REMOVED",
    "S3_TEST",
    "S3_UPLOAD",
    "SCHEDULE",
    "SCHEDULED",
    "SCHEDULER_INPUT",
    "STATE",
    "STATE_CHANGE",
    "TABLE",
    "TAG",
    "TAG_CHANGE",
    "TAG_CHANGE_TYPE",
    "TEXT_RECONCILE",
    "TOPOCAST",
    "WARM_POOL",
    "AwsSource",
    "Cloud",
    "Ec2State",
    "EventKind",
    "Route",
    "aws_kind",
    "aws_rule_patterns",
    "gcp_methods",
    "lookup",
    "markdown_table",
    "outcome_of",
    "state_kind",
]

Cloud = Literal["aws", "gcp"]
#: how the Terraform modules deliver a kind; ``None``: accepted when an operator routes it, not wired by default
Route = Literal[
    "eventbridge",  # an EventBridge rule on the default bus -> events queue (modules/aws/event-patterns.json)
    "s3-notification",  # the bucket's upload notification -> events queue
    "schedule",  # the reconcile schedule (EventBridge rule / Cloud Scheduler job)
    "eventarc-audit-log",  # one Eventarc trigger per methodName (Admin Activity audit logs)
    "log-sink",  # Logging sink -> the events Pub/Sub topic -> Eventarc Pub/Sub trigger (System Event audit logs)
    "recheck",  # discover to itself, delayed: SQS DelaySeconds on the events queue / a Cloud Task to discover
]


@dataclass(frozen=True)
class EventKind:
    cloud: Cloud
    kind: str
    action: EventAction
    reason: str
    #: upsert only: re-read until steady (running again, or gone), bounded
    follow: bool = False
    route: Route | None = None


def _aws(
    kind: str, action: EventAction, reason: str, route: Route | None = "eventbridge", follow: bool = False
) -> EventKind:
    return EventKind("aws", kind, action, reason, follow, route)


def _gcp(kind: str, action: EventAction, reason: str, route: Route | None, follow: bool = False) -> EventKind:
    return EventKind("gcp", kind, action, reason, follow, route)


# ----- the vocabulary: every source, detail-type and CloudEvent type the parsers match, named once ----------
#: EventBridge sources topocast reads (``topocast``: its own reconcile and re-check bodies)
AwsSource = Literal["aws.ec2", "aws.autoscaling", "aws.tag", "aws.events", "aws.s3", "topocast"]
EC2: AwsSource = "aws.ec2"
AUTOSCALING: AwsSource = "aws.autoscaling"
TAG: AwsSource = "aws.tag"
SCHEDULE: AwsSource = "aws.events"
S3: AwsSource = "aws.s3"
TOPOCAST: AwsSource = "topocast"
#: ``detail.state`` of an EC2 state-change event (EC2 User Guide, "EC2 instance state change events")
Ec2State = Literal["pending", "running", "stopping", "stopped", "shutting-down", "terminated"]
EC2_STATES: tuple[Ec2State, ...] = get_args(Ec2State)
STATE_CHANGE = "EC2 Instance State-change Notification"
ASG_LAUNCH = "EC2 Instance Launch Successful"
ASG_TERMINATE = "EC2 Instance Terminate Successful"
ASG_LAUNCH_HOOK = "EC2 Instance-launch Lifecycle Action"
ASG_TERMINATE_HOOK = "EC2 Instance-terminate Lifecycle Action"
#: Auto Scaling variants that change what the event does: into the warm pool (``Destination``), a root volume
#: replacement (``Action``)
WARM_POOL = "WarmPool"
REPLACE_ROOT_VOLUME = "ReplaceRootVolume"
#: failed group activities: well-formed, nothing joins or leaves (``EC2InstanceId`` may be empty)
ASG_FAILURES = ("EC2 Instance Launch Unsuccessful", "EC2 Instance Terminate Unsuccessful")
#: instance warnings: noted with the instance ID, the state change that follows moves the node
INSTANCE_NOTICES = (
    "EC2 Spot Instance Interruption Warning",
    "EC2 Instance Rebalance Recommendation",
    "EC2 Capacity Reservation Instance Interruption Warning",
    "EC2 Interruptible Capacity Reservation Instance Interruption Warning",
)
#: capacity notices about a reservation (the docs spell them both ways)
CAPACITY_NOTICES = (
    "Capacity Block Delivered",
    "Capacity Block Reservation Delivered",
    "Capacity Block Expiration Warning",
    "Capacity Block Reservation Expiration Warning",
)
#: EventBridge's tag events (Tag Editor, the Tagging API, every service's own tagging calls)
TAG_CHANGE_TYPE = "Tag Change on Resource"
SCHEDULED = "Scheduled Event"
OBJECT_CREATED = "Object Created"
RECONCILE = "Reconcile"
RECHECK = "Recheck"


def aws_kind(source: AwsSource, detail_type: str, variant: str = "") -> str:
    """The table's kind of an AWS event: ``<source>/<detail-type>``, ``#<variant>`` when one detail-type maps
    to several actions (the instance state, an Auto Scaling origin)."""
    return f"{source}/{detail_type}" + (f"#{variant}" if variant else "")


def state_kind(state: Ec2State) -> str:
    """The kind of an EC2 state change to ``state`` (mypy checks the state is one EC2 sends)."""
    return aws_kind(EC2, STATE_CHANGE, state)


STATE = aws_kind(EC2, STATE_CHANGE)
TAG_CHANGE = aws_kind(TAG, TAG_CHANGE_TYPE)
#: the kinds of the re-check bodies (``topocast.model.changes.Recheck``)
AWS_RECHECK = aws_kind(TOPOCAST, RECHECK)
#: kinds of bodies that are not EventBridge envelopes: S3's own notifications, an EventBridge Scheduler
#: target's Input, the plain text ``reconcile``
S3_UPLOAD = "s3/ObjectCreated"
S3_REMOVED = "s3/ObjectRemoved"
S3_TEST = "s3/TestEvent"
SCHEDULER_INPUT = "scheduler/input"
TEXT_RECONCILE = "text/reconcile"
GCP_RECHECK = "dev.topocast.recheck.v1"
GCP_RECONCILE = "dev.topocast.reconcile.v1"
#: the ``kind`` of topocast's own JSON messages: a reconcile request on Pub/Sub, a hand-off to publish on SQS
RECONCILE_MESSAGE = "topocast.reconcile"
PUBLISH_MESSAGE = "topocast.publish"
GCP_PUBSUB = "google.cloud.pubsub.topic.v1.messagePublished"
#: the version prefixes of audit-log methodNames written by API calls (``v1.compute.instances.insert``); a MIG,
#: acting as the Google APIs service agent, and Compute Engine itself write them unversioned
API_VERSIONS = ("v1.", "beta.")
_ANY_VERSION = (*API_VERSIONS, "")
_ADMIN: Route = "eventarc-audit-log"
_SYSTEM: Route = "log-sink"
_REREAD = "a new host may mean a new place in the fabric: re-read the VM"
_MAINTENANCE = "re-read until the VM runs again (possibly on another sub-block) or is gone"
_RECHECK = "discover's own delayed re-read of followed instances not steady yet (attempt N of TOPOCAST_FOLLOW_RECHECKS)"
#: the states that take an instance out of the cluster
_LEAVING: tuple[Ec2State, ...] = ("stopping", "stopped", "shutting-down", "terminated")

TABLE: tuple[EventKind, ...] = (
    # ----- AWS: EventBridge (through the events queue) ---------------------------------------------------------
    _aws(
        state_kind("pending"),
        "ignored",
        "no topology before running; the running event re-reads it",
        None,
    ),
    _aws(state_kind("running"), "upsert", "re-read the instance and its topology"),
    *(_aws(state_kind(s), "remove", f"instance {s}") for s in _LEAVING),
    _aws(aws_kind(AUTOSCALING, ASG_LAUNCH), "upsert", "launched into the group: re-read it"),
    _aws(
        aws_kind(AUTOSCALING, ASG_LAUNCH, WARM_POOL),
        "ignored",
        "launched into the warm pool, not in service; it is added when it leaves the pool",
    ),
    _aws(aws_kind(AUTOSCALING, ASG_TERMINATE), "remove", "terminated by the group"),
    _aws(
        aws_kind(AUTOSCALING, ASG_LAUNCH_HOOK),
        "ignored",
        "instance waits in Pending:Wait, not in service; Launch Successful or the running state adds it",
        None,
    ),
    _aws(
        aws_kind(AUTOSCALING, ASG_TERMINATE_HOOK),
        "remove",
        "instance is leaving the group (Terminating:Wait or back to the warm pool): take it out of scheduling now",
    ),
    _aws(
        aws_kind(AUTOSCALING, ASG_TERMINATE_HOOK, REPLACE_ROOT_VOLUME),
        "ignored",
        "root volume replacement keeps the instance (and its host)",
    ),
    _aws(
        aws_kind(EC2, INSTANCE_NOTICES[0]),
        "noted",
        "interruption in two minutes; the state change that follows removes the node",
    ),
    _aws(
        aws_kind(EC2, INSTANCE_NOTICES[1]),
        "noted",
        "elevated interruption risk; nothing moves until the instance stops",
    ),
    _aws(
        aws_kind(EC2, INSTANCE_NOTICES[2]),
        "noted",
        "interruptible reservation reclaims the instance in two minutes; its termination removes it",
    ),
    _aws(
        aws_kind(EC2, INSTANCE_NOTICES[3]),
        "noted",
        "interruptible reservation reclaims the instance in two minutes; its termination removes it",
    ),
    _aws(
        aws_kind(EC2, CAPACITY_NOTICES[0]),
        "reconcile",
        "new capacity: rediscover, including the before-launch topology of capacity reservations",
    ),
    _aws(
        aws_kind(EC2, CAPACITY_NOTICES[1]),
        "reconcile",
        "new capacity: rediscover, including the before-launch topology of capacity reservations",
    ),
    _aws(
        aws_kind(EC2, CAPACITY_NOTICES[2]),
        "noted",
        "instances of the block terminate in about 10 minutes; their terminations remove them",
    ),
    _aws(
        aws_kind(EC2, CAPACITY_NOTICES[3]),
        "noted",
        "instances of the block terminate in about 10 minutes; their terminations remove them",
    ),
    _aws(
        TAG_CHANGE,
        "upsert",
        "an EC2 instance's tags changed; membership is a tag (TOPOCAST_FILTERS tag:KEY=...): re-read it, in or out"
        " of the cluster. The rule delivers only changes of the membership keys; discover ignores the others",
    ),
    _aws(aws_kind(SCHEDULE, SCHEDULED), "reconcile", "an EventBridge schedule rule", None),
    _aws(aws_kind(TOPOCAST, RECONCILE), "reconcile", "the reconcile schedule or an operator", "schedule"),
    _aws(AWS_RECHECK, "upsert", _RECHECK, "recheck", True),
    _aws(SCHEDULER_INPUT, "reconcile", "an EventBridge Scheduler target's own Input (any JSON object)", None),
    _aws(TEXT_RECONCILE, "reconcile", "a plain-text 'reconcile' message body", None),
    _aws(
        aws_kind(S3, OBJECT_CREATED),
        "reconcile",
        "an upload (S3 to EventBridge): rediscover from the uploads; objects outside the uploads are ignored",
        None,
    ),
    # ----- AWS: S3 event notifications (the bucket's uploads notification) -------------------------------------
    _aws(
        S3_UPLOAD,
        "reconcile",
        "an on-prem upload: rediscover from the uploads; objects outside the uploads are ignored",
        "s3-notification",
    ),
    _aws(S3_REMOVED, "ignored", "removing an upload changes no fabric until the next upload", None),
    _aws(S3_TEST, "ignored", "S3 sends one test event when the notification is configured", "s3-notification"),
    # ----- AWS: the rest of the subscribed sources (well-formed, nothing to do; never dead-lettered) ---------
    _aws(
        aws_kind(AUTOSCALING, ASG_FAILURES[0]),
        "ignored",
        "the launch failed, so no instance joined the group; the group retries and Launch Successful adds it",
        None,
    ),
    _aws(
        aws_kind(AUTOSCALING, ASG_FAILURES[1]),
        "ignored",
        "the termination failed and the instance stays; a later termination removes it, the next reconcile"
        " re-reads one a lifecycle action took out",
        None,
    ),
    _aws(
        aws_kind(AUTOSCALING, "*"),
        "ignored",
        "an Auto Scaling event that changes no group membership (instance refresh, warm pool, scaling activity)",
        None,
    ),
    _aws(
        aws_kind(EC2, "*"),
        "ignored",
        "an EC2 event that moves no instance in or out of the cluster (e.g. an AMI state change, a CloudTrail call)",
        None,
    ),
    _aws(
        aws_kind(TAG, "*"),
        "ignored",
        "a tag event of another resource than an EC2 instance (or an effective tag policy notice)",
        None,
    ),
    _aws("aws/*", "rejected", "a source topocast does not subscribe to", None),
    # ----- GCP: Admin Activity audit logs (Eventarc, one trigger per methodName) -------------------------------
    *(
        _gcp(f"{v}compute.instances.insert", "upsert", "VM created: re-read it", _ADMIN)
        for v in _ANY_VERSION  # unversioned: what a MIG (the Google APIs service agent) writes
    ),
    *(_gcp(f"{v}compute.instances.start", "upsert", _REREAD, _ADMIN) for v in _ANY_VERSION),
    *(_gcp(f"{v}compute.instances.resume", "upsert", _REREAD, _ADMIN) for v in _ANY_VERSION),
    *(_gcp(f"{v}compute.instances.delete", "remove", "VM deleted", _ADMIN) for v in _ANY_VERSION),
    *(_gcp(f"{v}compute.instances.stop", "remove", "VM stopped", _ADMIN) for v in _ANY_VERSION),
    *(_gcp(f"{v}compute.instances.suspend", "remove", "VM suspended", _ADMIN) for v in _ANY_VERSION),
    *(
        _gcp(
            f"{v}compute.instances.setLabels",
            "upsert",
            "labels are cluster membership (TOPOCAST_GCP_LABEL): re-read the VM, in or out of the cluster (the entry"
            " carries the new labels only, so any relabelling is re-read; the read decides)",
            _ADMIN,
        )
        for v in API_VERSIONS
    ),
    *(_gcp(f"{v}compute.instances.bulkInsert", "reconcile", "creates many VMs at once", _ADMIN) for v in API_VERSIONS),
    _gcp(
        "compute.instances.repair.recreateInstance",
        "upsert",
        "MIG autohealing recreated the VM: " + _MAINTENANCE,
        _ADMIN,
        True,
    ),
    # ----- GCP: System Event audit logs (Logging sink -> Pub/Sub -> discover) -----------------------------------
    _gcp("compute.instances.preempted", "remove", "Compute Engine preempted the (Spot) VM", _SYSTEM),
    _gcp(
        "compute.instances.upcomingMaintenance",
        "noted",
        "host maintenance is scheduled; the terminate / restart entries that follow move the VM",
        _SYSTEM,
    ),
    _gcp("compute.instances.hostError", "upsert", "host error: " + _MAINTENANCE, _SYSTEM, True),
    _gcp(
        "compute.instances.automaticRestart", "upsert", "restarted after a host event: " + _MAINTENANCE, _SYSTEM, True
    ),
    _gcp(
        "compute.instances.terminateOnHostMaintenance",
        "upsert",
        "GPU VMs stop for host maintenance: " + _MAINTENANCE,
        _SYSTEM,
        True,
    ),
    _gcp("compute.instances.migrateOnHostMaintenance", "upsert", "live-migrated: " + _MAINTENANCE, _SYSTEM, True),
    _gcp(
        "compute.instances.guestTerminate",
        "upsert",
        "the guest OS shut the VM down: re-read until it is out",
        _SYSTEM,
        True,
    ),
    _gcp("compute.instances.*", "ignored", "an audit-log method that does not change cluster membership", None),
    # ----- GCP: other CloudEvents --------------------------------------------------------------------------------
    _gcp(
        GCP_PUBSUB,
        "reconcile",
        "a reconcile request on the events topic (JSON, the text 'reconcile', or empty); an audit-log entry"
        " from the Logging sink takes its method's row",
        "log-sink",
    ),
    _gcp(GCP_RECONCILE, "reconcile", "a Cloud Scheduler HTTP job", "schedule"),
    _gcp(GCP_RECHECK, "upsert", _RECHECK, "recheck", True),
    _gcp("gcp/*", "rejected", "a CloudEvent type topocast does not handle", None),
)

_METHOD_PREFIXES = tuple(f"{v}compute." for v in _ANY_VERSION)
_BY_KIND: dict[tuple[str, str], EventKind] = {(k.cloud, k.kind): k for k in TABLE}
assert len(_BY_KIND) == len(TABLE), "duplicate kinds in the event table"


def lookup(cloud: Cloud, kind: str) -> EventKind | None:
    """The row of ``kind`` (exact), or ``None`` when the table does not name it."""
    return _BY_KIND.get((cloud, kind))


def outcome_of(
    row: EventKind,
    *,
    instance: str | None = None,
    reason: str | None = None,
    cluster: str | None = None,
    time: datetime | None = None,
    event_id: str | None = None,
    detail: dict[str, str] | None = None,
) -> changes.EventOutcome:
    """The outcome the table's ``row`` prescribes.

    ``rejected`` raises :class:`~topocast.model.changes.UnsupportedEvent`.
    """
    why = reason or row.reason
    if row.action in ("upsert", "remove"):
        if instance is None:
            raise ValueError(f"{row.kind}: an {row.action} needs the instance")
        return changes.InstanceChange(
            instance, row.action, row.kind, time, event_id, row.follow and row.action == "upsert", detail or {}
        )
    if row.action == "reconcile":
        return changes.Reconcile(row.kind, why, cluster, time, event_id)
    if row.action == "noted":
        return changes.Noted(row.kind, why, (instance,) if instance else (), event_id)
    if row.action == "ignored":
        return changes.Ignored(row.kind, why, event_id)
    raise changes.UnsupportedEvent(why)


def gcp_methods(route: Route) -> list[str]:
    """Audit-log methodNames the GCP module delivers by ``route`` (``eventarc-audit-log`` or ``log-sink``)."""
    return [k.kind for k in TABLE if k.cloud == "gcp" and k.route == route and k.kind.startswith(_METHOD_PREFIXES)]


#: EventBridge rules of the AWS module (name -> source), each matching the table's ``eventbridge`` rows;
#: an event of these sources the table does not name takes the source's ``<source>/*`` row (ignored)
AWS_RULES: dict[str, str] = {
    "ec2-state": EC2,
    "ec2-notices": EC2,
    "autoscaling": AUTOSCALING,
    "tag-change": TAG,
}


def aws_rule_patterns() -> dict[str, dict[str, Any]]:
    """The EventBridge event patterns that deliver exactly the table's ``eventbridge`` rows.

    ``ec2-state`` carries the instance states (``detail.state``), ``ec2-notices`` the warnings and
    capacity notices, ``autoscaling`` the group events (the module adds ``detail.AutoScalingGroupName``),
    ``tag-change`` the tag changes of EC2 instances (the module adds ``detail.changed-tag-keys``: the
    membership tag keys of its ``ec2_filters``).
    """
    rows = [k for k in TABLE if k.cloud == "aws" and k.route == "eventbridge"]
    states = [k.kind.partition("#")[2] for k in rows if k.kind.startswith(f"{STATE}#")]
    notices = sorted({k.kind.partition("/")[2] for k in rows if k.kind.startswith(f"{EC2}/") and "#" not in k.kind})
    asg = sorted({k.kind.partition("/")[2].partition("#")[0] for k in rows if k.kind.startswith(f"{AUTOSCALING}/")})
    return {
        "ec2-state": {
            "source": [EC2],
            "detail-type": [STATE_CHANGE],
            "detail": {"state": states},
        },
        "ec2-notices": {"source": [EC2], "detail-type": notices},
        "autoscaling": {"source": [AUTOSCALING], "detail-type": asg},
        "tag-change": {
            "source": [TAG],
            "detail-type": [TAG_CHANGE_TYPE],
            "detail": {"service": ["ec2"], "resource-type": ["instance"]},
        },
    }


def markdown_table() -> str:
    """The table as Markdown, as ``docs/events.md`` carries it."""
    lines = ["| cloud | kind | action | follow | delivered by | why |", "|---|---|---|---|---|---|"]
    for k in TABLE:
        follow = "yes" if k.follow else ""
        lines.append(f"| {k.cloud} | `{k.kind}` | {k.action} | {follow} | {k.route or '-'} | {k.reason} |")
    return "\n".join(lines) + "\n"
