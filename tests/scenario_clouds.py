"""One driver interface over both clouds' local pipelines, for the scenario table (test_scenarios.py).

:class:`AwsCloud` drives :class:`topocast_sim.aws_pipeline.LocalAwsPipeline` (the Lambda handlers on a
moto server, EC2 topology simulator); :class:`GcpCloud` drives
:class:`topocast_sim.gcp_pipeline.LocalGcpPipeline` (the functions under functions-framework, the
Compute REST fake, the Cloud Storage emulator, Cloud Tasks over HTTP). Each method does the same
thing to either cloud with that cloud's real adapters; what a row observes (counts, the published
file, the graph) is read the same way, so a row's expected outcome is written once.
"""

from __future__ import annotations

import json
from typing import Any

from topocast.agents.pull import PulledArtifact, fetch
from topocast.app.metrics import MetricCounts

CLUSTER = "c1"


class AwsCloud:
    name = "aws"

    def __init__(
        self, *, quiet: float, max_wait: float, publishers: tuple[str, ...] = ("ssm",), pool: int = 0,
        env: dict[str, str] | None = None, real_time: bool = True,
    ) -> None:  # fmt: skip
        """``real_time=False``: every wait, quiet windows included, is skipped on the simulated clock
        (:class:`~topocast_sim.aws_pipeline.LocalAwsPipeline`); for rows that do not measure latency."""
        from topocast_sim.aws_pipeline import LocalAwsPipeline

        extra: dict[str, Any] = (
            {"k8s_options": json.loads(env["TOPOCAST_K8S_OPTIONS"])} if env and "TOPOCAST_K8S_OPTIONS" in env else {}
        )
        if env and "TOPOCAST_DEBOUNCE_LEADING_EDGE" in env:
            extra["debounce_leading_edge"] = env["TOPOCAST_DEBOUNCE_LEADING_EDGE"]
        self.pl = LocalAwsPipeline(CLUSTER, quiet=quiet, max_wait=max_wait, publishers=publishers,
                                   extra_settings=extra, real_time=real_time)  # fmt: skip
        self.waves = 0

    def start(self) -> AwsCloud:
        return self

    def stop(self) -> None:
        pass

    # ----- the world -------------------------------------------------------------------------------
    def launch(self, n: int) -> list[Any]:
        from topocast_sim import ec2 as ec2_sim

        self.waves += 1
        return ec2_sim.generate_cluster(
            self.pl.ec2, n, cluster_tag=("topocast:cluster", CLUSTER), name_prefix=f"w{self.waves:02d}-gpu-"
        )

    def announce(self, vms: list[Any], copies: int = 1) -> int:
        return self.pl.emit_state_changes(list(vms) * copies)

    def terminate(self, vms: list[Any]) -> None:
        self.pl.ec2.terminate_instances(InstanceIds=list(vms))
        self.pl.emit_state_changes(vms, state="terminated")

    def stop_vms(self, vms: list[Any]) -> None:
        self.pl.ec2.stop_instances(InstanceIds=list(vms))
        self.pl.emit_state_changes(vms, state="stopped")

    def start_vms(self, vms: list[Any], *, announce: bool = True) -> None:
        """Start stopped VMs; ``announce=False`` leaves their events to :meth:`announce_start` (late)."""
        self.pl.ec2.start_instances(InstanceIds=list(vms))
        if announce:
            self.announce_start(vms)

    def announce_start(self, vms: list[Any]) -> None:
        self.pl.emit_state_changes(vms, state="running")

    def reconcile(self) -> None:
        self.pl.request_reconcile()

    def malformed(self) -> None:
        self.pl.sqs.send_message(QueueUrl=self.pl.queues.events, MessageBody="{not json")

    def throttle(self, fraction: float) -> None:
        from topocast_sim import ec2 as ec2_sim

        ec2_sim.inject_faults(fraction, code="RequestLimitExceeded") if fraction else ec2_sim.clear_faults()

    def throttled(self) -> int:
        from topocast_sim import ec2 as ec2_sim

        return sum(ec2_sim.injected_counts().values())

    def fail_writes(self, count: int) -> None:
        """The next ``count`` object writes fail at the connection (before the client's retry layer)."""
        from botocore.exceptions import EndpointConnectionError

        left = {"n": count}

        def flaky(params: Any, **kwargs: Any) -> None:
            if left["n"] > 0:
                left["n"] -= 1
                raise EndpointConnectionError(endpoint_url="http://s3.injected")

        self.pl.runtime.s3.meta.events.register("before-call.s3.PutObject", flaky)

    def allow_generation(self, generation: int) -> None:
        name = f"/topocast/{CLUSTER}/guard/allow-generation"
        self.pl.ssm.put_parameter(Name=name, Value=str(generation), Type="String", Overwrite=True)

    def request_publish(self, generation: int) -> None:
        self.pl.runtime.handoff.request_publish(generation, "scenario", f"scenario-{generation}")

    def node_names(self, vms: list[Any]) -> list[str]:
        resp = self.pl.ec2.describe_instances(InstanceIds=list(vms))
        tags = [{t["Key"]: t["Value"] for t in i.get("Tags", [])} for r in resp["Reservations"] for i in r["Instances"]]
        return sorted(t["Name"] for t in tags)

    def corrupt(self, generation: int) -> None:
        key = self.pl.runtime.graphs.generation_key(generation)
        self.pl.s3.put_object(Bucket=self.pl.bucket, Key=key, Body=b'{"schema_version": 1, "cluster": "c1", "no')

    def expire(self, generation: int) -> None:
        """What the bucket's lifecycle rule (generation_retention_days) does to an old generation."""
        self.pl.s3.delete_object(Bucket=self.pl.bucket, Key=self.pl.runtime.graphs.generation_key(generation))

    def damage_debounce_state(self) -> None:
        """Overwrite the cluster's debounce state item with one the code cannot read (a hand edit)."""
        item = {"cluster": {"S": CLUSTER}, "version": {"N": "7"}, "latest_generation": {"S": "lots"}}
        self.pl.runtime.dynamodb.put_item(TableName=self.pl.runtime.settings.state_table, Item=item)

    # ----- the pipeline ----------------------------------------------------------------------------
    @property
    def runtime(self) -> Any:
        return self.pl.runtime

    def pump(self) -> None:
        self.pl.pump_discover()
        self.pl.pump_render()
        self.pl.pump_publish()

    def idle(self, timeout: float = 60.0) -> bool:
        return self.pl.run_until_idle(timeout=timeout)

    def counts(self) -> MetricCounts:
        return self.pl.runtime.counters

    def published(self) -> PulledArtifact | None:
        try:
            return fetch(f"ssm:///topocast/{CLUSTER}/slurm/topology-tree.conf", ssm=self.pl.ssm, s3=self.pl.s3)
        except Exception:
            return None

    def dead_letters(self) -> list[str]:
        """Reasons of the deliveries dead-lettered so far."""
        resp = self.pl.sqs.receive_message(
            QueueUrl=self.pl.queues.dlq, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=0
        )
        return [m["MessageAttributes"]["topocast-reject-reason"]["StringValue"] for m in resp.get("Messages", [])]


class GcpCloud:
    name = "gcp"

    def __init__(
        self, *, quiet: float, max_wait: float, publishers: tuple[str, ...] = ("gcs",), pool: int = 400,
        env: dict[str, str] | None = None, real_time: bool = True,
    ) -> None:  # fmt: skip
        """``real_time=False``: every wait (quiet and discover windows, retries, leases) is skipped on the
        simulated clock (:class:`~topocast_sim.gcp_pipeline.LocalGcpPipeline`); for rows that do not measure latency."""
        from topocast_sim.gce import generate_cluster
        from topocast_sim.gcp_pipeline import LocalGcpPipeline

        gen = generate_cluster(pool, label=("topocast-cluster", CLUSTER), hosts_per_subblock=8, subblocks_per_block=4)
        self.pool, gen.instances = list(gen.instances), []
        extra = {"TOPOCAST_PUBLISHERS": ";".join(publishers), **(env or {})}
        self.pl = LocalGcpPipeline(
            gen, name=CLUSTER, quiet=quiet, max_wait=max_wait, window=0.3, extra_env=extra, real_time=real_time
        )
        self.rejected = 0

    def start(self) -> GcpCloud:
        from topocast.gcp.root import STATS

        STATS.clear()
        self.pl.start()
        return self

    def stop(self) -> None:
        self.pl.stop()

    # ----- the world -------------------------------------------------------------------------------
    def launch(self, n: int) -> list[Any]:
        vms, self.pool = self.pool[:n], self.pool[n:]
        self.pl.compute.add(vms)
        return vms

    def announce(self, vms: list[Any], copies: int = 1) -> int:
        events = self.pl.insert_events(vms)[1::2] * copies
        self.pl.emit(events)
        return len(events)

    def terminate(self, vms: list[Any]) -> None:
        for inst in vms:
            self.pl.compute.remove(str(inst["zone"]).rsplit("/", 1)[-1], inst["name"])
        deletes = self.pl.insert_events(vms)[1::2]
        for attrs, data in deletes:
            data["protoPayload"]["methodName"] = attrs["methodname"] = "v1.compute.instances.delete"
        self.pl.emit(deletes)

    def _audit(self, vms: list[Any], method: str) -> list[Any]:
        """The completing audit entries of ``method`` (``v1.compute.instances.stop``...) for each VM."""
        entries = self.pl.insert_events(vms)[1::2]
        for attrs, data in entries:
            data["protoPayload"]["methodName"] = attrs["methodname"] = method
        return entries

    def stop_vms(self, vms: list[Any]) -> None:
        for inst in vms:
            self.pl.compute.set_status(str(inst["zone"]).rsplit("/", 1)[-1], inst["name"], "TERMINATED")
        self.pl.emit(self._audit(vms, "v1.compute.instances.stop"))

    def start_vms(self, vms: list[Any], *, announce: bool = True) -> None:
        """Start stopped VMs; ``announce=False`` leaves their events to :meth:`announce_start` (late)."""
        for inst in vms:
            self.pl.compute.set_status(str(inst["zone"]).rsplit("/", 1)[-1], inst["name"], "RUNNING")
        if announce:
            self.announce_start(vms)

    def announce_start(self, vms: list[Any]) -> None:
        self.pl.emit(self._audit(vms, "v1.compute.instances.start"))

    def reconcile(self) -> None:
        self.pl.reconcile()

    def malformed(self) -> None:
        from topocast_sim import eventarc

        attrs = {"specversion": "1.0", "id": "bad-1", "source": "//cloudaudit.googleapis.com",
                 "type": "google.cloud.audit.log.v1.written", "datacontenttype": "text/plain"}  # fmt: skip
        assert eventarc.post(self.pl.servers["discover"].url, attrs, "{not json") == 200

    def throttle(self, fraction: float) -> None:
        self.pl.compute.inject_faults(fraction, status=429)

    def throttled(self) -> int:
        return sum(self.pl.compute.injected.values())

    def fail_writes(self, count: int) -> None:
        self.pl.gcs.proxy.fail_uploads = count

    def allow_generation(self, generation: int) -> None:
        state = self.runtime.publish_state
        state.objects.put(state.override_key, str(generation).encode())

    def request_publish(self, generation: int) -> None:
        self.runtime.handoff.request_publish(generation, "scenario", f"scenario-{generation}")

    def node_names(self, vms: list[Any]) -> list[str]:
        return sorted(inst["name"] for inst in vms)

    def corrupt(self, generation: int) -> None:
        rt = self.runtime
        rt.objects.put(rt.graphs.generation_key(generation), b'{"schema_version": 1, "cluster": "c1", "no')

    def expire(self, generation: int) -> None:
        """What the bucket's lifecycle rule (generation_retention_days) does to an old generation."""
        rt = self.runtime
        rt.objects.delete(rt.graphs.generation_key(generation))

    def damage_debounce_state(self) -> None:
        """Overwrite the cluster's debounce state object with one the code cannot read (a hand edit)."""
        rt = self.runtime
        rt.objects.put(rt.debouncer.states.key(CLUSTER), b'{"phase": "waiting", "latest_generation": "lots"')

    # ----- the pipeline ----------------------------------------------------------------------------
    @property
    def runtime(self) -> Any:
        return self.pl.runtime()

    def pump(self) -> None:
        pass  # Cloud Tasks and Eventarc deliver on their own

    def idle(self, timeout: float = 60.0) -> bool:
        return self.pl.run_until_idle(timeout=timeout)

    def counts(self) -> MetricCounts:
        from topocast.gcp.root import STATS

        return STATS

    def published(self) -> PulledArtifact | None:
        from topocast.gcp.clients import storage_client

        try:
            source = f"gcs://{self.pl.bucket}/topocast/{CLUSTER}/slurm/topology-tree.conf"
            return fetch(source, gcs=storage_client("t", self.pl.gcs.url))
        except Exception:
            return None

    def dead_letters(self) -> list[str]:
        """Cloud Tasks has no DLQ: a dropped delivery is an ERROR log line; the handlers count them."""
        from topocast.gcp.root import STATS

        return ["dropped"] * (STATS["malformed"] + STATS["render_dead_lettered"])


def graph_nodes(cloud: AwsCloud | GcpCloud) -> list[str]:
    stored = cloud.runtime.graphs.latest()
    return stored.graph.node_names() if stored else []


def dumps(outcome: dict[str, Any]) -> str:
    return json.dumps(outcome, sort_keys=True)
