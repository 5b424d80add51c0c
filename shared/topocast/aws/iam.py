"""The AWS API actions each Lambda function calls: the contract between the code and its IAM roles.

:data:`CALLS` lists, per function, every IAM action its code can call. Four
checks keep it true (see ``tests/test_infra_wiring.py``):

* a static scan of the code reachable from ``functions/<stage>/handler.py``
  finds exactly these actions;
* the role the Terraform module (``infra/terraform/modules/aws/iam.tf``) gives
  the function grants exactly :func:`granted` (``CALLS`` minus
  :data:`NOT_GRANTED`, plus :data:`IMPLIED` and the :data:`CONDITIONAL`
  actions), plus the :data:`PLATFORM` actions, no more;
* an action in :data:`CONDITIONAL` is granted only by ``dynamic "statement"``
  blocks whose ``for_each`` depends on the module input that turns on the code
  path calling it (NetQ credentials only with ``netq_credentials_arn``...), and
  every dynamic statement grants only such actions;
* tests that run a handler against moto can wrap it in :func:`record_calls`
  and assert that every recorded call is in ``CALLS`` (:func:`unexpected`).

botocore operation names map to IAM actions as ``<service>:<OperationName>``
except for the S3 operations in :data:`S3_ACTION_ALIASES` (HeadObject is
authorised by s3:GetObject, ListObjectsV2 by s3:ListBucket).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

STAGES = ("discover", "render", "publish")

CALLS: dict[str, frozenset[str]] = {
    "discover": frozenset(
        {
            "ec2:DescribeInstances",  # providers.aws (Ec2Calls.pages); topology_source = aws only
            "ec2:DescribeInstanceTopology",
            "ec2:DescribeCapacityReservationTopology",  # topology before launch (reserved_nodes)
            "ec2:DescribeCapacityBlockStatus",  # capacity block health (capacity_block_health)
            "s3:GetObject",  # graphs/ (store), rendered/ + state/ (reconcile confirms a held publish), uploads/
            "s3:PutObject",  # graphs/, state/guard-hold.json; on-prem: last-good/, quarantine/ (bad uploads)
            "s3:DeleteObject",  # on-prem only: a bad upload moved out of uploads/ into quarantine/
            "s3:ListBucket",  # uploads/ listing (on-prem ibnetdiscover)
            "dynamodb:GetItem",  # debounce state
            "dynamodb:PutItem",
            "sqs:SendMessage",  # timer queue, events DLQ (rejected), publish queue (confirmed hold), events (re-checks)
            "ssm:GetParameter",  # on-prem only: ssm:// domains file, NetQ credentials in a parameter
            "secretsmanager:GetSecretValue",  # on-prem only: NetQ credentials in a secret
            "eks:DescribeCluster",  # k8s-labels on EKS: the API server endpoint when none is configured
        }
    ),
    "render": frozenset(
        {
            "s3:GetObject",  # graphs/, rendered/latest.json, state/published.json
            "s3:PutObject",  # rendered/
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "sqs:SendMessage",  # timer queue (re-arm), publish queue
        }
    ),
    "publish": frozenset(
        {
            "s3:GetObject",  # graphs/, rendered/, state/
            "s3:PutObject",  # state/, S3 copies of SSM values too large for a parameter
            "s3:DeleteObject",  # state/guard-hold.json once a hold is released
            "ssm:GetParameter",  # current value (never go backwards), guard override
            "ssm:PutParameter",
            "eks:DescribeCluster",  # Kubernetes publisher on EKS (granted only with eks_cluster_name)
            "secretsmanager:GetSecretValue",  # slurmrestd publisher: the Slurm JWT (only with slurmrest_token_arn)
        }
    ),
}

#: actions the code calls on paths the Terraform module cannot configure (yet), so the roles do not
#: grant them: stage -> action -> why (the test's message). Empty since the module passes the NetQ and
#: domains settings; kept so a new unconfigurable path is declared, not silently granted.
NOT_GRANTED: dict[str, dict[str, str]] = {}


@dataclass(frozen=True)
class Conditional:
    """A grant that exists only when one of ``inputs`` (AWS module variables) turns its code path on."""

    inputs: frozenset[str]
    why: str


#: stage -> action -> when the role grants it. Actions of :data:`CALLS` (or, for the key of an input
#: the code reads through another service, :data:`PLATFORM`) that only some configurations need.
CONDITIONAL: dict[str, dict[str, Conditional]] = {
    "discover": {
        "ec2:DescribeInstances": Conditional(frozenset({"topology_source"}), "EC2 discovery (topology_source = aws)"),
        "ec2:DescribeInstanceTopology": Conditional(
            frozenset({"topology_source"}), "EC2 discovery (topology_source = aws)"
        ),
        "ec2:DescribeCapacityReservationTopology": Conditional(
            frozenset({"topology_source"}), "EC2 discovery (topology_source = aws): topology before launch"
        ),
        "ec2:DescribeCapacityBlockStatus": Conditional(
            frozenset({"topology_source"}), "EC2 discovery (topology_source = aws): capacity block health"
        ),
        "secretsmanager:GetSecretValue": Conditional(
            frozenset({"netq_credentials_arn"}), "NetQ credentials in a Secrets Manager secret"
        ),
        "ssm:GetParameter": Conditional(
            frozenset({"netq_credentials_arn", "domains_uri"}),
            "NetQ credentials in an SSM parameter, or an ssm:// NVLink domains file",
        ),
        "s3:DeleteObject": Conditional(
            frozenset({"topology_source", "enable_upload_events"}),
            "on-prem uploads (a bad one is moved to quarantine/)",
        ),
        "eks:DescribeCluster": Conditional(
            frozenset({"topology_source", "eks_cluster_name"}),
            "topology_source = k8s-labels on EKS (eks_cluster_name) without k8s_options.connection.endpoint",
        ),
        "kms:Decrypt": Conditional(
            frozenset({"netq_credentials_kms_key_arn"}),
            "the customer key of the NetQ credentials (Secrets Manager / SSM decrypt with the caller's grant)",
        ),
    },
    "publish": {
        "eks:DescribeCluster": Conditional(frozenset({"eks_cluster_name"}), "the Kubernetes publisher on EKS"),
        "secretsmanager:GetSecretValue": Conditional(
            frozenset({"slurmrest_token_arn"}), "the slurmrestd publisher's Slurm JWT in a Secrets Manager secret"
        ),
    },
}

#: action -> (actions a role needs along with it, why)
IMPLIED: dict[str, tuple[frozenset[str], str]] = {
    "s3:GetObject": (
        frozenset({"s3:ListBucket"}),
        "without s3:ListBucket S3 answers a read of a missing key with 403 instead of 404",
    ),
}

#: what a role needs from the platform rather than from its code: its log group, its queue trigger
#: (Lambda's event source mapping polls with the function's role), a customer KMS key, VPC interfaces
PLATFORM: frozenset[str] = frozenset(
    {
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:GetQueueAttributes",
        "kms:Decrypt",
        "kms:GenerateDataKey",
        "ec2:CreateNetworkInterface",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DeleteNetworkInterface",
        "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses",
    }
)

#: S3 operations authorised by another action
S3_ACTION_ALIASES = {
    "HeadObject": "GetObject",
    "CopyObject": "PutObject",  # and s3:GetObject on the source, which the same role reads anyway
    "ListObjectsV2": "ListBucket",
    "ListObjects": "ListBucket",
    "HeadBucket": "ListBucket",
}


def iam_action(service: str, operation: str) -> str:
    """IAM action for a boto3 service name and botocore operation name (``s3``, ``HeadObject`` -> s3:GetObject)."""
    if service == "s3":
        operation = S3_ACTION_ALIASES.get(operation, operation)
    return f"{service}:{operation}"


def granted(stage: str) -> frozenset[str]:
    """What the Terraform role of ``stage`` grants in its own statements, under some configuration
    (:data:`CONDITIONAL` ones included); the shared :data:`PLATFORM` statements come on top."""
    if stage not in CALLS:
        raise KeyError(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
    calls = CALLS[stage] - set(NOT_GRANTED.get(stage, {}))
    implied = {extra for action in calls if action in IMPLIED for extra in IMPLIED[action][0]}
    return frozenset(calls | implied | CONDITIONAL.get(stage, {}).keys())


def contract_problems() -> list[str]:
    """Inconsistencies inside this module's tables (an empty list when it is coherent)."""
    problems: list[str] = []
    for stage in STAGES:
        for action, cond in CONDITIONAL.get(stage, {}).items():
            if action not in CALLS[stage] and action not in PLATFORM:
                problems.append(f"CONDITIONAL[{stage!r}] has {action}, which is neither in CALLS nor in PLATFORM")
            if action in NOT_GRANTED.get(stage, {}):
                problems.append(f"{stage}: {action} is both CONDITIONAL and NOT_GRANTED")
            if not cond.inputs:
                problems.append(f"CONDITIONAL[{stage!r}][{action!r}] names no module input")
    return problems


def unexpected(stage: str, recorded: Iterable[str]) -> set[str]:
    """Recorded actions (from :func:`record_calls`) that ``CALLS[stage]`` does not list."""
    return set(recorded) - CALLS[stage]


@contextmanager
def record_calls(session: Any = None) -> Iterator[list[str]]:
    """Record the IAM action of every AWS call made by clients created inside the block, in order.

    Hooks botocore's ``before-parameter-build`` event of ``session`` (a ``boto3.Session``;
    default: boto3's default session), which fires for every call, including paginated
    pages and calls answered by a Stubber. Clients created *before* the block are not
    seen: create the runtime inside it. Slice the list to attribute calls to a stage.
    """
    import boto3

    if session is None:
        if boto3.DEFAULT_SESSION is None:
            boto3.setup_default_session()
        session = boto3.DEFAULT_SESSION
    core = session._session  # the botocore session behind the boto3 one
    seen: list[str] = []

    def hook(model: Any, **_: Any) -> None:
        seen.append(iam_action(model.service_model.service_name, model.name))

    core.register("before-parameter-build", hook, unique_id="topocast-record-calls")
    try:
        yield seen
    finally:
        core.unregister("before-parameter-build", unique_id="topocast-record-calls")
