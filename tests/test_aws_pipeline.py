"""The AWS pipeline end to end on a moto server: EventBridge -> SQS -> discover -> S3 -> render -> SSM.

The real Lambda handlers run, invoked the way Lambda's SQS event source mapping
invokes them (:class:`topocast_sim.aws_pipeline.LocalAwsPipeline`); EC2's topology
call is topocast's wire-compatible simulator inside moto. Debounce windows and
visibility timeouts pass on the simulated clock (``real_time=False``: nothing here
measures latency; ``bench/latency.py`` does).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from topocast.agents.pull import fetch, pull
from topocast.model.graph import load_graph
from topocast.model.hostlist import expand
from topocast_sim import ec2 as ec2_sim
from topocast_sim import simclock
from topocast_sim.aws_pipeline import LocalAwsPipeline

CLUSTER = "c1"
TAG = ("topocast:cluster", CLUSTER)


@pytest.fixture
def pipeline(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> LocalAwsPipeline:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    return LocalAwsPipeline(CLUSTER, quiet=1.0, max_wait=4.0, real_time=False)


def launch(pl: LocalAwsPipeline, n: int, **kw) -> list[str]:
    return ec2_sim.generate_cluster(pl.ec2, n, cluster_tag=TAG, **kw)


def published_tree(pl: LocalAwsPipeline):
    return fetch(f"ssm:///topocast/{CLUSTER}/slurm/topology-tree.conf", ssm=pl.ssm, s3=pl.s3)


def graph_names(pl: LocalAwsPipeline) -> list[str]:
    stored = pl.runtime.graphs.latest()
    return stored.graph.node_names() if stored else []


def test_launch_burst_becomes_one_render_and_one_publish(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """500 launch events arriving in waves, discover running in between: one render, one publish
    (``bench/latency.py`` times a 1,000-event burst)."""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    pl = LocalAwsPipeline(CLUSTER, quiet=4.0, max_wait=60.0, real_time=False)
    emitted = 0
    for wave in range(10):  # instances keep launching: discover runs see new nodes and write generations
        ids = launch(pl, 10, name_prefix=f"w{wave}-gpu-")
        emitted += pl.emit_state_changes(ids * 5)  # EventBridge is at-least-once: duplicates too
        pl.pump_discover()
        pl.pump_render()  # the single timer is not due while the burst goes on
        assert pl.runtime.counters.renders == 0
    assert emitted == 500
    assert pl.run_until_idle(timeout=60)
    c = pl.runtime.counters
    assert c.events == 500
    assert c.discover_runs >= 5 and c.generations >= 5  # several generations were written...
    assert (c.renders, c.publishes) == (1, 1)  # ...and rendered and published once, after the quiet window
    assert len(graph_names(pl)) == 100
    assert published_tree(pl).generation == pl.runtime.graphs.latest().generation


def test_churn_still_publishes_at_least_every_max_wait(pipeline: LocalAwsPipeline) -> None:
    pl = pipeline  # quiet 1 s, max wait 4 s: a change every 0.5 s never goes quiet
    render_times: list[float] = []
    start = simclock.now()  # the clock the debouncer and moto's SQS read: 15 s of churn without waiting them
    wave, longest_round = 0, 0.0
    while simclock.now() - start < 15:
        round_start = simclock.now()
        pl.emit_state_changes(launch(pl, 2, name_prefix=f"c{wave}-"))
        wave += 1
        pl.pump_discover()
        before = pl.runtime.counters.renders
        pl.pump_render()
        pl.pump_publish()
        if pl.runtime.counters.renders > before:
            render_times.append(simclock.now() - start)
        simclock.advance(0.5)
        longest_round = max(longest_round, simclock.now() - round_start)
    assert len(render_times) >= 2, render_times
    gaps = [b - a for a, b in zip([0.0, *render_times], render_times, strict=False)]
    # max wait, plus SQS's whole-second delays, plus a pump round to note the first change and one to
    # see the timer: this test pumps by hand, so a slow machine's rounds are part of the bound
    assert max(gaps) <= 4.0 + 1.0 + 2 * longest_round, (gaps, longest_round)


@pytest.mark.slow  # botocore's adaptive limiter sleeps for real after throttles; test_aws_discovery keeps the rule
def test_throttled_ec2_still_yields_the_right_graph(pipeline: LocalAwsPipeline) -> None:
    pl = pipeline
    ids = launch(pl, 250)
    ec2_sim.inject_faults(1 / 3, code="RequestLimitExceeded")
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=60)
    ec2_sim.clear_faults()
    assert sum(ec2_sim.injected_counts().values()) > 0  # faults really happened
    assert len(graph_names(pl)) == 250
    assert "Nodes=gpu-[000-015]" in published_tree(pl).content.decode()


def test_failing_s3_writes_are_retried_and_no_event_is_lost(pipeline: LocalAwsPipeline) -> None:
    pl = pipeline
    ids = launch(pl, 30)
    from botocore.exceptions import EndpointConnectionError

    fails = {"left": 6}  # the store tries 4 times: one discover run fails, its retry succeeds

    def flaky_put(params, **kwargs):
        if fails["left"] > 0:
            fails["left"] -= 1
            raise EndpointConnectionError(endpoint_url="http://s3.injected")

    pl.runtime.s3.meta.events.register("before-call.s3.PutObject", flaky_put)
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=60)
    assert fails["left"] == 0
    assert pl.stats.failed_records == 30  # the store gave up once: the whole batch came back and was retried
    assert len(graph_names(pl)) == 30
    assert published_tree(pl).generation >= 1
    assert pl.dlq_messages() == []


def test_null_capacity_block_keeps_the_node_and_marks_it_pending(pipeline: LocalAwsPipeline) -> None:
    pl = pipeline
    ids = launch(pl, 18, block_size=18, capacity_block_lag=1, instance_type="p6e-gb200.36xlarge")
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=30)
    nodes = pl.runtime.graphs.latest().graph.nodes
    assert len(nodes) == 18
    assert all(n.accelerator_pending and n.fabric for n in nodes)  # kept, with its fabric, domain pending
    pl.request_reconcile()  # the next call reports the capacity block
    assert pl.run_until_idle(timeout=30)
    nodes = pl.runtime.graphs.latest().graph.nodes
    assert {n.accelerator for n in nodes} != {None} and not any(n.accelerator_pending for n in nodes)


def test_losing_half_the_nodes_is_held_until_a_reconcile_confirms(pipeline: LocalAwsPipeline) -> None:
    pl = pipeline
    ids = launch(pl, 40)
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=30)
    first = published_tree(pl)
    assert "gpu-[032-039]" in first.content.decode()

    gone = ids[20:]
    pl.ec2.terminate_instances(InstanceIds=gone)
    pl.emit_state_changes(gone, state="terminated")
    assert pl.run_until_idle(timeout=30)
    diag = (pl.runtime.counters, pl.stats, pl.runtime.debouncer.state(CLUSTER))
    assert pl.runtime.counters.held == 1, diag
    assert published_tree(pl).content == first.content  # the last good config stays
    assert len(graph_names(pl)) == 20  # the graph itself is current; only the publish is held

    pl.request_reconcile()  # a full scan sees the same loss: confirmed, published
    assert pl.run_until_idle(timeout=30)
    now = published_tree(pl)
    assert now.generation > first.generation
    assert "gpu-[032-039]" not in now.content.decode()


def test_corrupt_graph_stops_render_and_the_last_publish_stays(pipeline: LocalAwsPipeline) -> None:
    pl = pipeline
    ids = launch(pl, 20)
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=30)
    good = published_tree(pl)
    stored = pl.runtime.graphs.latest()
    key = pl.runtime.graphs.generation_key(stored.generation)
    pl.s3.put_object(Bucket=pl.bucket, Key=key, Body=b'{"schema_version": 1, "cluster": "c1", "nodes": [{"na')
    pl.runtime.debouncer.note_change(CLUSTER, stored.generation + 1)  # as if discover wrote again
    pl.run_until_idle(timeout=8)
    assert pl.runtime.counters.renders == 1  # the second render failed (retried, then dead-lettered)
    reasons = [m["MessageAttributes"]["topocast-reject-reason"]["StringValue"] for m in pl.dlq_messages()]
    assert any("not valid JSON" in r or "sha256" in r for r in reasons), reasons
    assert published_tree(pl).content == good.content


def test_malformed_events_go_to_the_dlq_with_the_reason(pipeline: LocalAwsPipeline) -> None:
    pl = pipeline
    ids = launch(pl, 4)
    pl.sqs.send_message(QueueUrl=pl.queues.events, MessageBody="{not json")
    pl.sqs.send_message(QueueUrl=pl.queues.events, MessageBody="[" * 100_000)  # RecursionError in json.loads
    pl.sqs.send_message(
        QueueUrl=pl.queues.events,
        MessageBody=json.dumps(
            {"source": "aws.ec2", "detail-type": "EC2 Instance State-change Notification", "detail": {"state": "x"}}
        ),
    )
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=30)
    assert len(graph_names(pl)) == 4  # the valid events in the same batch were processed
    dead = pl.dlq_messages()
    reasons = sorted(m["MessageAttributes"]["topocast-reject-reason"]["StringValue"] for m in dead)
    assert len(dead) == 3
    assert any("not JSON" in r for r in reasons)
    assert any("nested deeper than 64 levels" in r for r in reasons)
    assert any("detail.instance-id" in r or "detail.state" in r for r in reasons)
    assert pl.runtime.counters.malformed == 3


def test_pull_agent_installs_into_a_real_controller(pipeline: LocalAwsPipeline, slurm_controller_factory) -> None:
    pl = pipeline
    ids = launch(pl, 32, nodes_per_leaf=8)
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=30)
    names = graph_names(pl)
    ctl = slurm_controller_factory(names, "SwitchName=old Nodes=" + ",".join(names) + "\n")
    source = f"ssm:///topocast/{CLUSTER}/slurm/topology-tree.conf"
    outcome = pull(source, ctl.topology_path, reconfigure=True, validate=True, slurm_conf=ctl.conf_path)
    assert outcome.ok and outcome.action == "installed", outcome.detail
    shown = ctl.show_topology()
    leaves = [sw for sw, info in shown.items() if info.level == 0]
    assert len(leaves) == 4 and "old" not in shown
    assert all(len(shown[leaf].nodes) == 8 for leaf in leaves)
    again = pull(source, ctl.topology_path, reconfigure=True, validate=True, slurm_conf=ctl.conf_path)
    assert again.action == "unchanged"


def test_demo_command_writes_its_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    from cli_runner import invoke

    out = tmp_path / "demo"
    result = invoke(["demo", "--nodes", "64", "--events", "200", "--out", str(out), "--quiet", "1"])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["events"] == 200
    assert (report["renders"], report["publishes"]) == (1, 1)
    assert report["nodes"] == 66 and report["nodes_without_topology"] == 2
    assert report["api_calls"] == report["ec2_api_calls"] >= 2 and report["settle_seconds"] > 0
    graph = load_graph(out / "graph.json")  # feeds render --graph, diff and render --previous
    assert len(graph.nodes) == 66
    conf = (out / "topology.conf").read_text()
    # the CPU login nodes have no fabric: left out of the tree, which keeps one root
    assert "login-" not in conf and "no-topology" not in conf
    assert conf.splitlines()[0].startswith("SwitchName=nn-") and "Switches=" in conf.splitlines()[0]
    labels = json.loads((out / "labels.json").read_text())
    assert len(labels) == 66
    assert "<svg" in (out / "topology.html").read_text()


def test_kubernetes_publisher_is_wired_through_the_runtime(aws_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """publishers=ssm,kubernetes: the same generation reaches SSM and node labels (matched by providerID)."""
    from k8s_fake_apiserver import NODES, FakeKubeApiServer

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    fake = FakeKubeApiServer(token="t0k").start()
    try:
        monkeypatch.setenv("TOPOCAST_K8S_ENDPOINT", fake.url)
        monkeypatch.setenv("TOPOCAST_K8S_TOKEN", "t0k")
        pl = LocalAwsPipeline(CLUSTER, quiet=1.0, max_wait=4.0, publishers=("ssm", "kubernetes"), real_time=False)
        ids = launch(pl, 12, nodes_per_leaf=4)
        for i, iid in enumerate(ids):  # Kubernetes names differ from the Slurm names; providerID links them
            fake.add_node(f"ip-10-0-0-{i}", {"team": "ml"}, provider_id=f"aws:///us-east-1a/{iid}")
        pl.emit_state_changes(ids)
        assert pl.run_until_idle(timeout=30)
        assert pl.runtime.counters.publishes == 1
        graph = pl.runtime.graphs.latest().graph
        by_id = {n.id: n for n in graph.nodes}
        for i, iid in enumerate(ids):
            labels = fake.get(NODES, f"ip-10-0-0-{i}")["metadata"]["labels"]
            assert labels["team"] == "ml"  # foreign label untouched
            assert labels["fabric.topograph.run/tier-0"] == by_id[iid].fabric[0]
    finally:
        fake.stop()


def test_onprem_upload_triggers_discover_render_publish(
    aws_env: str, monkeypatch: pytest.MonkeyPatch, conformance_dir: Path
) -> None:
    """topocast collect -> S3 ObjectCreated -> events queue -> discover (ibnetdiscover) -> render -> SSM."""
    from topocast.agents.collect import collect_ibnetdiscover

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    pl = LocalAwsPipeline("dgx", quiet=1.0, max_wait=4.0, provider="ibnetdiscover", real_time=False)
    example = conformance_dir / "inputs" / "ibnetdiscover" / "example.out"
    uploads = pl.runtime.settings.uploads_uri
    assert collect_ibnetdiscover(example, uploads, host="ufm-01", s3_client=pl.s3).uploaded
    assert pl.run_until_idle(timeout=30)
    c = pl.runtime.counters
    assert (c.discover_runs, c.generations, c.renders, c.publishes) == (1, 1, 1, 1)
    conf = fetch("ssm:///topocast/dgx/slurm/topology-tree.conf", ssm=pl.ssm, s3=pl.s3).content.decode()
    graph = pl.runtime.graphs.latest().graph
    for node in graph.nodes:
        if node.fabric:  # every host is listed on its own leaf's line
            line = next(ln for ln in conf.splitlines() if ln.startswith(f"SwitchName={node.fabric[0]} Nodes="))
            assert node.name in expand(line.split("Nodes=")[1])
    # the same fabric collected again uploads nothing: no event, no new generation
    assert not collect_ibnetdiscover(example, uploads, host="ufm-01", s3_client=pl.s3).uploaded
    assert pl.run_until_idle(timeout=10)
    assert pl.runtime.counters.discover_runs == 1


class LambdaContext:
    function_name = "topocast-discover"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:topocast-discover"
    aws_request_id = "req-1"


def test_lambda_entry_point_logs_json_with_cluster_and_emits_emf_metrics(
    aws_env: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """functions/discover/handler.py as Lambda loads it: Powertools JSON logs and EMF metrics on stdout."""
    import importlib.util

    from topocast.aws import handlers, lambda_tools

    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "topocast")
    # Powertools binds the stream when its Logger is first built (maybe under another test's capture)
    lambda_tools.tools().logger.registered_handler.stream = sys.stdout
    pl = LocalAwsPipeline(CLUSTER, quiet=1.0, max_wait=4.0, real_time=False)
    ids = launch(pl, 6)
    pl.emit_state_changes(ids)
    messages = pl._receive_batch(pl.queues.events, 100, 300.0)
    event = {"Records": [{"messageId": m["MessageId"], "body": m["Body"]} for m in messages]}
    spec = importlib.util.spec_from_file_location(
        "handler", Path(handlers.__file__).parents[3] / "functions" / "discover" / "handler.py"
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    handlers.use_runtime(pl.runtime)
    try:
        response = module.handler(event, LambdaContext())
    finally:
        handlers.use_runtime(None)
    assert response == {"batchItemFailures": []}
    lines = [json.loads(ln) for ln in capsys.readouterr().out.splitlines() if ln.startswith("{")]
    emf = [ln for ln in lines if "_aws" in ln]
    names = {m["Name"] for ln in emf for d in ln["_aws"]["CloudWatchMetrics"] for m in d["Metrics"]}
    assert {"EventsReceived", "DiscoverRuns", "Ec2ApiCalls", "Nodes", "GraphGenerations"} <= names
    assert emf[0]["EventsReceived"] in (6, [6.0]) and emf[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "topocast"
    logs = [ln for ln in lines if ln.get("message", "").startswith("discovered 6 node(s)")]
    assert logs and logs[0]["cluster"] == CLUSTER and logs[0]["generation"] == 1
    assert logs[0]["function_name"] == "topocast-discover"


@pytest.mark.parametrize("where", ["ssm", "s3"])
def test_onprem_domains_file_gives_nodes_their_nvlink_domain(
    where: str, aws_env: str, monkeypatch: pytest.MonkeyPatch, conformance_dir: Path
) -> None:
    """TOPOCAST_DOMAINS_URI: a plain CSV the operator keeps in SSM or in the uploads area of the bucket."""
    from topocast.agents.collect import collect_ibnetdiscover

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    example = conformance_dir / "inputs" / "ibnetdiscover" / "example.out"
    csv = "host,domain,subdomain\na05-p1-dgx-01-c01,nvl72-a,rack1\na05-p1-dgx-01-c03,nvl72-a,rack1\n"
    pl = LocalAwsPipeline("dgx", quiet=1.0, max_wait=4.0, provider="ibnetdiscover", real_time=False)
    if where == "ssm":
        pl.ssm.put_parameter(Name="/topocast/dgx/domains", Value=csv, Type="String")
        uri = "ssm:///topocast/dgx/domains"
    else:
        uri = f"{pl.runtime.settings.uploads_uri}/domains.csv"
        pl.s3.put_object(Bucket=pl.bucket, Key=uri.split("/", 3)[3], Body=csv.encode())
    settings = pl.runtime.settings
    pl.runtime.settings = settings.model_copy(
        update={"provider_env": {**settings.provider_env, "TOPOCAST_DOMAINS_URI": uri}}
    )
    collect_ibnetdiscover(example, pl.runtime.settings.uploads_uri, host="ufm-01", s3_client=pl.s3)
    assert pl.run_until_idle(timeout=30)
    nodes = {n.name: n for n in pl.runtime.graphs.latest().graph.nodes}
    assert (nodes["a05-p1-dgx-01-c01"].accelerator, nodes["a05-p1-dgx-01-c01"].subdomain) == ("nvl72-a", "rack1")
    assert nodes["a06-p1-dgx-02-c01"].accelerator is None
    block = fetch("ssm:///topocast/dgx/slurm/topology-block.conf", ssm=pl.ssm, s3=pl.s3).content.decode()
    assert "a05-p1-dgx-01-c[01,03]" in block


def test_the_event_source_cuts_batches_like_lambda(pipeline: LocalAwsPipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    """6 MB of records per invocation at most, and never held past half the visibility timeout."""
    import topocast_sim.aws_pipeline as sim

    pl = pipeline
    pl.sqs.purge_queue(QueueUrl=pl.queues.events)  # S3's s3:TestEvent from provisioning
    body = "x" * 200_000
    for _ in range(40):
        pl.sqs.send_message(QueueUrl=pl.queues.events, MessageBody=body)
    first = pl._receive_batch(pl.queues.events, 10_000, 300.0)
    assert 20 <= len(first) <= 30, "40 records of 200 kB are 8 MB: the first batch stops below 6 MB"
    assert sum(len(m["Body"]) + 700 for m in first) <= 6 * 1024 * 1024
    rest = pl._receive_batch(pl.queues.events, 10_000, 300.0)
    ids = [m["MessageId"] for m in first + rest]
    assert len(ids) == len(set(ids)) == 40, "the remainder is the next batch, nothing redelivered"

    for _ in range(10):
        pl.sqs.send_message_batch(
            QueueUrl=pl.queues.events, Entries=[{"Id": str(i), "MessageBody": "small"} for i in range(10)]
        )
    # a queue with a 60 s visibility timeout (Terraform's smallest function timeout, 10 s, times 6):
    # each receive takes "10 s", so the 300 s window must end at 30 s
    monkeypatch.setattr(pl, "_visibility", lambda url: 60.0)
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(sim.time, "monotonic", lambda: float(next(clock)))
    held = pl._receive_batch(pl.queues.events, 10_000, 300.0)
    monkeypatch.undo()
    assert len(held) <= 40, f"received {len(held)} messages over more than the 30 s half visibility timeout"
    assert pl.stats.max_held_seconds <= 40


def test_events_of_subscribed_sources_it_does_not_act_on_are_acknowledged_not_dead_lettered(
    pipeline: LocalAwsPipeline,
) -> None:
    """The discover Lambda's batch handler takes a failed Auto Scaling launch as explain does: ignored."""
    from topocast.aws.handlers import discover_batch

    pl = pipeline
    failed = {
        "version": "0",
        "id": "12345678-1234-1234-1234-123456789012",
        "detail-type": "EC2 Instance Launch Unsuccessful",
        "source": "aws.autoscaling",
        "time": "1970-01-01T00:00:00Z",
        "region": "us-west-2",
        "resources": ["auto-scaling-group-arn"],
        "detail": {"StatusCode": "Failed", "AutoScalingGroupName": "g1", "EC2InstanceId": "", "StatusMessage": "x"},
    }
    bodies = [failed, {**failed, "detail-type": "EC2 Instance Terminate Unsuccessful"},
              {**failed, "source": "aws.rds", "detail-type": "RDS DB Instance Event"}]  # fmt: skip
    records = [{"messageId": f"m{i}", "receiptHandle": "r", "body": json.dumps(b)} for i, b in enumerate(bodies)]
    assert discover_batch({"Records": records}, pl.runtime) == {"batchItemFailures": []}
    reasons = [m["MessageAttributes"]["topocast-reject-reason"]["StringValue"] for m in pl.dlq_messages()]
    assert len(reasons) == 1 and "source='aws.rds'" in reasons[0]  # only the source it does not subscribe to


@pytest.mark.slow
@pytest.mark.parametrize("apart", [False, True], ids=["one-batch", "reconcile-during-debounce"])
def test_a_reconcile_meeting_a_loss_before_its_publish_confirms_it(pipeline: LocalAwsPipeline, apart: bool) -> None:
    """Six of 40 stop (15 %, over the guard's limit) and the reconcile comes before their publish: in the
    same discover batch as their events, or after their incremental read while the render waits. The
    events (or that read) and the reconcile's full read agree: nothing is held, the map is right."""
    pl = pipeline
    ids = launch(pl, 40)
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=30)
    pl.ec2.stop_instances(InstanceIds=ids[:6])
    pl.emit_state_changes(ids[:6], state="stopped")
    if apart:
        assert pl.pump_discover() == 6  # the incremental read; its timer waits out the quiet window
    pl.request_reconcile()
    assert pl.run_until_idle(timeout=30)
    names = set(graph_names(pl))
    assert (pl.runtime.counters.held, len(names), pl.runtime.publish_state.load_published().nodes) == (
        0, 34, sorted(names),
    )  # fmt: skip


@pytest.mark.slow
def test_a_reconcile_that_suddenly_reads_half_the_cluster_is_held(pipeline: LocalAwsPipeline) -> None:
    """No event explains it and no earlier read saw it: the guard still stops an unexplained mass loss."""
    pl = pipeline
    ids = launch(pl, 40)
    pl.emit_state_changes(ids)
    assert pl.run_until_idle(timeout=30)
    first = published_tree(pl)
    pl.ec2.delete_tags(Resources=ids[:20], Tags=[{"Key": TAG[0]}])  # the filters now match half, silently
    pl.request_reconcile()
    assert pl.run_until_idle(timeout=30)
    assert (pl.runtime.counters.held, published_tree(pl).content, len(graph_names(pl))) == (1, first.content, 20)
