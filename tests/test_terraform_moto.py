"""Apply ``examples/aws-account`` against a moto server, drive an EC2 event through it, destroy it.

What this proves beyond ``terraform validate``: the AWS provider accepts every
resource as written (moto runs the same create/read calls AWS would get), an
EC2 state-change event put on the default bus reaches the deployed events queue
through the deployed rule, the events queue's trigger points at the discover
function, and ``terraform destroy`` leaves nothing behind.

Two moto behaviours are adjusted for the duration of the test (and restored):

* moto matches *every* event against a schedule rule (a rule without a pattern)
  and ignores the target's ``Input``; AWS never delivers bus events to schedule
  rules. Without the fix the reconcile rule would forward all events.
* moto runs a Lambda in Docker when a message reaches a queue with an event
  source mapping. Here the invocation is recorded and reported as failed, so the
  message stays on the queue, where the test reads it.

The module's ``restrict_dlq_sources`` is turned off (through an override file)
because moto ignores ``RedriveAllowPolicy`` and the provider would wait for it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from terraform_support import check, cli_config, copy_terraform, require_aws_mirror, require_terraform
from terraform_support import run as tf

pytestmark = pytest.mark.infra  # terraform apply against moto

REGION = "us-east-1"
CLUSTER = "tfmoto"  # unique: moto backends are shared by every moto server in this process
SERVICES = ("s3", "sqs", "events", "lambda", "iam", "dynamodb", "ssm", "sts", "cloudwatch", "logs", "eks")


@pytest.fixture
def moto_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """A private moto server; yields its URL and the list of (function ARN, body) trigger invocations."""
    pytest.importorskip("moto", reason="moto[server] is needed (pip install -e .[dev])")
    from moto.awslambda.models import LambdaBackend
    from moto.events.models import EventPattern
    from moto.server import ThreadedMotoServer

    invocations: list[tuple[str, str]] = []

    def no_bus_events_for_schedules(self: Any, event: Any) -> bool:
        return bool(self._pattern) and original_matches(self, event)

    def record_batch(self: Any, function_arn: str, messages: Any, queue_arn: str) -> bool:
        invocations.extend((function_arn, m.body) for m in messages)
        return False  # "the function failed": the messages stay on the queue

    original_matches = EventPattern.matches_event
    monkeypatch.setattr(EventPattern, "matches_event", no_bus_events_for_schedules)
    monkeypatch.setattr(LambdaBackend, "send_sqs_batch", record_batch)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}", invocations
    finally:
        server.stop()


def _packages(dest: Path) -> Path:
    """Real (tiny) Lambda zips with the real handler file; moto stores them, nothing runs them."""
    from topocast.cli.package import write_zip

    repo = Path(__file__).resolve().parent.parent
    for stage in ("discover", "render", "publish"):
        handler = (repo / "functions" / stage / "handler.py").read_bytes()
        write_zip(dest / f"{stage}.zip", [("handler.py", handler)])
    return dest


def _override(endpoint: str) -> str:
    endpoints = "\n".join(f'    {s} = "{endpoint}"' for s in SERVICES)
    return f"""
provider "aws" {{
  access_key                  = "test"
  secret_key                  = "test"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  s3_use_path_style           = true
  endpoints {{
{endpoints}
  }}
}}

module "topocast" {{
  restrict_dlq_sources = false
}}
"""


def _client(service: str, endpoint: str) -> Any:
    import boto3

    return boto3.client(
        service, endpoint_url=endpoint, region_name=REGION, aws_access_key_id="test", aws_secret_access_key="test"
    )


def _receive_all(sqs: Any, url: str, want: int, deadline: float) -> list[dict[str, Any]]:
    bodies: list[dict[str, Any]] = []
    while time.monotonic() < deadline and len(bodies) < want:
        resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=60)
        bodies += [json.loads(m["Body"]) for m in resp.get("Messages", [])]
    # anything else that arrived meanwhile
    resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=60)
    return bodies + [json.loads(m["Body"]) for m in resp.get("Messages", [])]


def test_example_applies_routes_an_ec2_event_to_discover_and_destroys_cleanly(
    tmp_path: Path, moto_endpoint: tuple[str, list[tuple[str, str]]]
) -> None:
    require_terraform()
    config = cli_config(tmp_path, require_aws_mirror())
    endpoint, invocations = moto_endpoint
    example = copy_terraform(tmp_path) / "examples" / "aws-account"
    (example / "moto_override.tf").write_text(_override(endpoint))
    packages = _packages(tmp_path / "dist")
    tf_vars = [
        f"-var=region={REGION}",
        f"-var=cluster={CLUSTER}",
        f"-var=package_dir={packages}",
        "-var=bucket_force_destroy=true",
    ]
    check(tf(["init", "-backend=false", "-input=false"], example, config), "terraform init")
    applied = False
    try:
        check(
            tf(["apply", "-auto-approve", "-parallelism=30", *tf_vars], example, config, timeout=300),
            "terraform apply against moto",
        )
        applied = True
        outputs = json.loads(check(tf(["output", "-json"], example, config), "terraform output"))
        queues = outputs["queue_urls"]["value"]
        functions = outputs["function_names"]["value"]

        events, sqs, lam = _client("events", endpoint), _client("sqs", endpoint), _client("lambda", endpoint)
        sent = events.put_events(
            Entries=[
                {
                    "Source": "aws.ec2",
                    "DetailType": "EC2 Instance State-change Notification",
                    "Detail": json.dumps({"instance-id": "i-0123456789abcdef0", "state": "running"}),
                },
                {  # filtered out by the rule: topology is unknown while pending
                    "Source": "aws.ec2",
                    "DetailType": "EC2 Instance State-change Notification",
                    "Detail": json.dumps({"instance-id": "i-0123456789abcdef1", "state": "pending"}),
                },
                {  # no Auto Scaling groups configured in the example: no rule for these
                    "Source": "aws.autoscaling",
                    "DetailType": "EC2 Instance Launch Successful",
                    "Detail": json.dumps({"EC2InstanceId": "i-0123456789abcdef2", "AutoScalingGroupName": "x"}),
                },
            ]
        )
        assert sent["FailedEntryCount"] == 0
        bodies = _receive_all(sqs, queues["events"], 1, time.monotonic() + 10)
        assert [(b["source"], b["detail-type"], b["detail"]) for b in bodies] == [
            (
                "aws.ec2",
                "EC2 Instance State-change Notification",
                {"instance-id": "i-0123456789abcdef0", "state": "running"},
            )
        ], "exactly the running-state event must reach the events queue, as an EventBridge envelope"

        discover_arn = lam.get_function(FunctionName=functions["discover"])["Configuration"]["FunctionArn"]
        assert invocations and {arn for arn, _ in invocations} == {discover_arn}, (
            "the events queue's trigger must invoke the discover function"
        )
        config_env = lam.get_function_configuration(FunctionName=functions["discover"])["Environment"]["Variables"]
        assert config_env["TOPOCAST_CLUSTER"] == CLUSTER
        assert config_env["TOPOCAST_TIMER_QUEUE_URL"] == queues["timer"]
        assert lam.get_function_concurrency(FunctionName=functions["discover"])["ReservedConcurrentExecutions"] == 1
    finally:
        if applied or (example / "terraform.tfstate").exists():
            check(
                tf(["destroy", "-auto-approve", "-parallelism=30", *tf_vars], example, config, timeout=300),
                "terraform destroy against moto",
            )
    state = json.loads((example / "terraform.tfstate").read_text())
    assert [r for r in state["resources"] if r["mode"] == "managed" and r["instances"]] == []
    ours = f"topocast-{CLUSTER}"
    left = {
        "queues": [u for u in _client("sqs", endpoint).list_queues().get("QueueUrls", []) if ours in u],
        "functions": [
            f["FunctionName"]
            for f in _client("lambda", endpoint).list_functions()["Functions"]
            if f["FunctionName"].startswith(ours)
        ],
        "buckets": [b["Name"] for b in _client("s3", endpoint).list_buckets()["Buckets"] if b["Name"].startswith(ours)],
        "rules": [r["Name"] for r in _client("events", endpoint).list_rules(NamePrefix=ours)["Rules"]],
        "tables": [t for t in _client("dynamodb", endpoint).list_tables()["TableNames"] if t.startswith(ours)],
        "roles": [
            r["RoleName"] for r in _client("iam", endpoint).list_roles()["Roles"] if r["RoleName"].startswith(ours)
        ],
    }
    assert not any(left.values()), f"terraform destroy left resources behind: {left}"
