"""The three AWS Lambda handlers: discover, render, publish.

Each handler only parses its SQS batch and calls the shared pipeline; the
wiring (clients, stores, debouncer, publishers) lives in :class:`AwsRuntime`,
built once per Lambda process from ``TOPOCAST_*`` env vars. Tests and the demo
build a runtime themselves and call the same functions.

* **discover** (events queue: EventBridge EC2/ASG events, scheduled reconcile,
  S3 uploads): one discovery per batch. Malformed events go straight to the DLQ
  with the reason (a retry cannot fix them); if discovery fails, every valid
  record is reported as a batch item failure and retried — nothing is lost and
  nothing is written. A reconcile, a first run or a large batch does a full
  scan; a few instance events an incremental update.
* **render** (timer queue): the debouncer decides; a render writes
  ``rendered/<generation>/`` and hands the manifest to the publish queue.
* **publish** (publish queue): blast-radius guard, then the publishers.

Partial batch responses use the Lambda contract
``{"batchItemFailures": [{"itemIdentifier": messageId}]}`` (Powertools'
``BatchProcessor`` for render and publish, where records are independent).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from topocast.config import Settings, settings_from_env
from topocast.errors import ProviderError, StaleGenerationError, TopocastError

log = logging.getLogger("topocast")

#: Metrics names (EMF, namespace from POWERTOOLS_METRICS_NAMESPACE, default "topocast").
M_QUARANTINED = "QuarantinedUploads"
M_EVENTS, M_MALFORMED, M_DISCOVER_RUNS, M_API_CALLS = "EventsReceived", "MalformedEvents", "DiscoverRuns", "Ec2ApiCalls"
M_NODES, M_NO_TOPO, M_GENERATIONS = "Nodes", "NodesWithoutTopology", "GraphGenerations"
M_RENDERS, M_RENDER_FAILED, M_PUBLISHES, M_HELD = "Renders", "RenderFailures", "Publishes", "PublishHeld"
M_DISCOVER_FAILED = "DiscoverFailures"


@dataclass
class Counters:
    """What one process did; the demo and tests read it, EMF metrics mirror it."""

    events: int = 0
    malformed: int = 0
    discover_runs: int = 0
    ec2_api_calls: int = 0
    generations: int = 0
    renders: int = 0
    publishes: int = 0
    held: int = 0
    last_warnings: list[str] = field(default_factory=list)


class AwsRuntime:
    """Clients and pipeline objects for one cluster, created lazily and reused across invocations."""

    def __init__(self, settings: Settings, session: Any = None, region: str | None = None) -> None:
        self.settings = settings
        self.session = session
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        self.counters = Counters()

    def _client(self, service: str) -> Any:
        from topocast.aws.clients import client

        return client(service, self.region, self.session)

    @cached_property
    def s3(self) -> Any:
        return self._client("s3")

    @cached_property
    def ec2(self) -> Any:
        return self._client("ec2")

    @cached_property
    def sqs(self) -> Any:
        return self._client("sqs")

    @cached_property
    def ssm(self) -> Any:
        return self._client("ssm")

    @cached_property
    def dynamodb(self) -> Any:
        return self._client("dynamodb")

    @cached_property
    def graphs(self) -> Any:
        from topocast.aws.s3_store import S3GraphStore

        self.settings.require("bucket")
        return S3GraphStore(self.settings.bucket, self.settings.prefix, self.settings.cluster, self.s3)

    @cached_property
    def artifacts(self) -> Any:
        from topocast.aws.s3_artifacts import S3ArtifactStore

        self.settings.require("bucket")
        return S3ArtifactStore(self.settings.bucket, self.settings.prefix, self.settings.cluster, self.s3)

    @cached_property
    def debouncer(self) -> Any:
        from topocast.aws.debounce import DynamoSqsDebouncer

        s = self.settings
        s.require("state_table", "timer_queue_url")
        return DynamoSqsDebouncer(
            s.state_table,
            s.timer_queue_url,
            self.dynamodb,
            self.sqs,
            quiet=s.debounce_quiet,
            max_wait=s.debounce_max_wait,
        )

    @cached_property
    def publish_state(self) -> Any:
        from topocast.aws.publish_state import S3PublishState

        return S3PublishState(self.settings.bucket, self.settings.prefix, self.settings.cluster, self.s3)

    @cached_property
    def publishers(self) -> list[Any]:
        out: list[Any] = []
        for name in self.settings.publishers:
            if name == "ssm":
                from topocast.aws.ssm_publish import SsmPublisher

                out.append(
                    SsmPublisher(
                        self.settings.ssm_path,
                        self.ssm,
                        self.s3,
                        self.settings.bucket or "",
                        # large values: s3://<bucket>/<prefix>/<cluster>/published/ (what the IAM roles allow)
                        s3_prefix=f"{self.settings.prefix.strip('/')}/{self.settings.cluster}/published",
                        allow_advanced=self.settings.ssm_advanced_tier,
                    )
                )
            elif name in ("kubernetes", "k8s"):
                from topocast.publish.kubernetes import from_settings

                out.append(from_settings(self.settings, lambda generation: self.graphs.get(generation).graph))
            else:
                raise TopocastError(f"TOPOCAST_PUBLISHERS: unknown publisher {name!r} (known: ssm, kubernetes)")
        return out

    def discovery_config(self) -> Any:
        from topocast.providers.aws import AwsDiscoveryConfig

        s = self.settings
        return AwsDiscoveryConfig.from_data(
            {
                "cluster": s.cluster,
                "region": self.region,
                "filters": s.filters,
                "instance_types": s.instance_types,
                "zones": s.zones,
                "name_from": s.name_from,
            },
            "TOPOCAST_* discovery settings",
        )


_RUNTIME: AwsRuntime | None = None


def runtime() -> AwsRuntime:
    """The process-wide runtime (built from env on first use; tests may replace it with :func:`use_runtime`)."""
    global _RUNTIME
    if _RUNTIME is None:
        _RUNTIME = AwsRuntime(settings_from_env())
    return _RUNTIME


def use_runtime(rt: AwsRuntime | None) -> None:
    global _RUNTIME
    _RUNTIME = rt


# ----- powertools (imported lazily so `import topocast.aws.handlers` stays cheap) -----------------
@dataclass
class _Tools:
    logger: Any
    metrics: Any


_TOOLS: _Tools | None = None


def tools() -> _Tools:
    global _TOOLS
    if _TOOLS is None:
        from aws_lambda_powertools import Logger, Metrics

        service = os.environ.get("POWERTOOLS_SERVICE_NAME", "topocast")
        namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "topocast")
        _TOOLS = _Tools(Logger(service=service), Metrics(namespace=namespace, service=service))
    return _TOOLS


def _metric(name: str, value: float, unit: str = "Count") -> None:
    from aws_lambda_powertools.metrics import MetricUnit

    tools().metrics.add_metric(name=name, unit=getattr(MetricUnit, unit), value=value)


def lambda_entry(fn: Any) -> Any:
    """Wrap a handler body with Powertools' Logger context and EMF metric flushing."""

    def wrapper(event: dict[str, Any], context: Any) -> Any:
        t = tools()
        t.logger.append_keys(cluster=runtime().settings.cluster)

        t.metrics.clear_metrics()  # one invocation, one EMF document: nothing carried over from earlier work

        @t.metrics.log_metrics
        @t.logger.inject_lambda_context(clear_state=True)
        def inner(event: dict[str, Any], context: Any) -> Any:
            t.logger.append_keys(cluster=runtime().settings.cluster)
            return fn(event, context)

        return inner(event, context)

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


# ----- discover -----------------------------------------------------------------------------
def _to_dlq(rt: AwsRuntime, record: dict[str, Any], reason: str) -> bool:
    if not rt.settings.dlq_url:
        return False
    rt.sqs.send_message(
        QueueUrl=rt.settings.dlq_url,
        MessageBody=record.get("body", ""),
        MessageAttributes={"topocast-reject-reason": {"DataType": "String", "StringValue": reason[:1000]}},
    )
    return True


def discover_batch(event: dict[str, Any], rt: AwsRuntime | None = None) -> dict[str, Any]:
    """Core of the discover Lambda (no Powertools wrapping): returns the partial batch response."""
    from topocast.aws.events import parse_event
    from topocast.changes import Ignored, InstanceChange, MalformedEvent, Noted, Reconcile, UnsupportedEvent

    rt = rt or runtime()
    records = event.get("Records") or []
    failures: list[str] = []
    valid: list[str] = []
    changes: list[InstanceChange] = []
    reconcile = False
    rejected = 0
    for rec in records:
        mid = rec.get("messageId", "?")
        try:
            parsed = parse_event(rec.get("body", ""))
        except MalformedEvent as exc:
            rt.counters.events += 1
            rt.counters.malformed += 1
            rejected += 1
            unsupported = isinstance(exc, UnsupportedEvent)
            log.warning("rejected event %s: %s", mid, exc, extra={"message_id": mid, "unsupported": unsupported})
            try:
                if not _to_dlq(rt, rec, str(exc)):
                    failures.append(mid)  # no DLQ configured: let the queue's redrive policy move it
            except Exception as dlq_exc:  # the DLQ itself failed: keep the message, retry later
                log.error("could not send event %s to the DLQ: %s", mid, dlq_exc)
                failures.append(mid)
            continue
        if isinstance(parsed, (Ignored, Noted)):
            log.info("%s event %s: %s", type(parsed).__name__.lower(), mid, parsed.reason, extra={"kind": parsed.kind})
            continue
        rt.counters.events += 1
        valid.append(mid)
        if isinstance(parsed, Reconcile):
            reconcile = True
        else:
            changes.append(parsed)
    _metric(M_EVENTS, len(valid) + rejected)
    if rejected:
        _metric(M_MALFORMED, rejected)
    if valid:
        try:
            run_discover(rt, changes, reconcile)
        except Exception as exc:  # nothing was written: every valid record is retried
            _metric(M_DISCOVER_FAILED, 1)
            log.exception("discovery failed; %d event(s) will be retried: %s", len(valid), exc)
            failures.extend(valid)
    return {"batchItemFailures": [{"itemIdentifier": m} for m in failures]}


def discover_graph(rt: AwsRuntime, changes: list[Any], reconcile: bool, previous: Any) -> tuple[Any, bool]:
    """Run the configured provider: (DiscoveryResult, whether it was a full scan)."""
    s = rt.settings
    if s.provider == "aws":
        from topocast.providers.aws import discover_full, discover_instances

        config = rt.discovery_config()
        full = reconcile or previous is None or len(changes) > s.full_scan_threshold
        if full:
            return discover_full(rt.ec2, config, previous), True
        return discover_instances(rt.ec2, config, previous, changes), False
    domains = None
    if s.domains_uri:
        from topocast.providers.domains import parse_domains

        domains = parse_domains(_read_operator_file(rt, s.domains_uri), s.domains_uri)
    if s.provider == "ibnetdiscover":
        from topocast.collect import read_good_uploads
        from topocast.providers import ibnetdiscover

        uploads = read_good_uploads(s.uploads_uri, ibnetdiscover.parse, s3_client=rt.s3)  # bad ones quarantined
        for uri, reason in uploads.quarantined:
            log.error("quarantined upload %s (using the host's last good upload): %s", uri, reason)
            _metric(M_QUARANTINED, 1)
        texts = uploads.texts
        if not texts:
            raise ProviderError(f"no ibnetdiscover uploads under {s.uploads_uri}: run `topocast collect` first")
        kwargs: dict[str, Any] = {"host_regex": s.ib_host_regex} if s.ib_host_regex else {}
        return ibnetdiscover.discover(texts=texts, cluster=s.cluster, domains=domains, **kwargs), True
    if s.provider == "netq":
        from topocast.providers import netq

        s.require("netq_url", "netq_credentials")
        result = netq.discover(
            s.netq_url, credentials=s.netq_credentials, cluster=s.cluster, premises=s.netq_premises or None,
            domains=domains,
        )  # fmt: skip
        return result, True
    raise ProviderError(f"TOPOCAST_PROVIDER={s.provider!r}: the AWS functions run aws, ibnetdiscover or netq")


def _read_operator_file(rt: AwsRuntime, uri: str) -> str:
    """A file an operator maintains by hand (plain text): ``s3://bucket/key`` or ``ssm:///parameter``."""
    if uri.startswith("ssm:///"):
        name = uri.removeprefix("ssm://")
        return rt.ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
    if uri.startswith("s3://"):
        bucket, _, key = uri.removeprefix("s3://").partition("/")
        return rt.s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    raise ProviderError(f"TOPOCAST_DOMAINS_URI must be s3://bucket/key or ssm:///parameter, got {uri!r}")


def run_discover(rt: AwsRuntime, changes: list[Any], reconcile: bool) -> Any:
    """Discover, write a new generation if the content changed, arm the debounce timer."""
    result = None
    write = None
    full = False
    for _attempt in range(5):
        latest = rt.graphs.latest()
        previous = latest.graph if latest else None
        result, full = discover_graph(rt, changes, reconcile, previous)
        rt.counters.discover_runs += 1
        calls = sum(result.api_calls.values())
        rt.counters.ec2_api_calls += calls
        _metric(M_DISCOVER_RUNS, 1)
        _metric(M_API_CALLS, calls)
        try:
            write = rt.graphs.write_if_changed(result.graph, expected_generation=latest.generation if latest else None)
            break
        except StaleGenerationError:
            log.info("a newer graph was written concurrently; discovering again")
    if write is None or result is None:
        raise StaleGenerationError("gave up after 5 concurrent-write conflicts")
    graph = result.graph
    for w in result.warnings:
        log.warning("discovery: %s", w)
    rt.counters.last_warnings = list(result.warnings)
    _metric(M_NODES, len(graph.nodes))
    _metric(M_NO_TOPO, len(graph.nodes_without_topology()))
    log.info(
        "discovered %d node(s) (%d without topology), generation %d%s",
        len(graph.nodes),
        len(graph.nodes_without_topology()),
        write.generation,
        " (new)" if write.changed else " (unchanged)",
        extra={"generation": write.generation, "full_scan": full},
    )
    if write.changed:
        rt.counters.generations += 1
        _metric(M_GENERATIONS, 1)
    # idempotent per generation: also re-arms after a retried batch whose first attempt crashed here
    rt.debouncer.note_change(rt.settings.cluster, write.generation)
    if full:
        _confirm_reconcile(rt, graph)
    return write


def _confirm_reconcile(rt: AwsRuntime, graph: Any) -> None:
    from topocast.pipeline.publish_stage import confirm_on_reconcile

    hold = confirm_on_reconcile(rt.publish_state, graph)
    if hold is not None:
        log.warning("reconcile confirms the held loss of %d node(s); publishing", len(hold.lost))
        manifest = rt.artifacts.latest_manifest()
        if manifest is not None:
            _send_publish(rt, manifest.generation)


# ----- render -------------------------------------------------------------------------------
def _send_publish(rt: AwsRuntime, generation: int) -> None:
    rt.settings.require("publish_queue_url")
    body = {"kind": "topocast.publish", "cluster": rt.settings.cluster, "generation": generation}
    rt.sqs.send_message(QueueUrl=rt.settings.publish_queue_url, MessageBody=json.dumps(body))


def render_record(body: str, rt: AwsRuntime | None = None) -> Any:
    """One timer message: maybe render the latest graph and hand it to publish."""
    from topocast.pipeline.render_stage import render_generation

    rt = rt or runtime()
    decision = rt.debouncer.on_timer(body)
    if not decision.render:
        return decision
    s = rt.settings
    try:
        result = render_generation(rt.graphs, rt.artifacts, None, s.formats, s.render_options)
    except TopocastError as exc:
        _metric(M_RENDER_FAILED, 1)
        log.error("render failed, the last published configuration stays: %s", exc)
        raise
    rt.counters.renders += 1
    _metric(M_RENDERS, 1)
    for w in result.warnings:
        log.warning("render: %s", w)
    last = rt.publish_state.load_published()
    if result.changed or last is None or last.graph_sha256 != result.manifest.graph_sha256:
        _send_publish(rt, result.generation)
    else:
        log.info("generation %d renders to the published artifacts; nothing to publish", result.generation)
    rt.debouncer.mark_rendered(decision.cluster, decision, result.generation)
    return result


# ----- publish ------------------------------------------------------------------------------
def publish_record(body: str, rt: AwsRuntime | None = None) -> Any:
    from topocast.aws.publish_state import read_override
    from topocast.errors import InvalidGraphError
    from topocast.pipeline.publish_stage import load_files, publish_manifest

    rt = rt or runtime()
    try:
        msg = json.loads(body)
        generation = int(msg["generation"])
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise InvalidGraphError(f"publish message is not {{'generation': N}}: {exc}") from None
    manifest = rt.artifacts.get_manifest(generation)
    latest = rt.artifacts.latest_manifest()
    if latest is not None and latest.generation > generation:
        log.info("generation %d superseded by %d; publishing the newer one", generation, latest.generation)
        manifest = latest
    files = load_files(rt.artifacts, manifest)
    override = read_override(rt.settings.cluster, rt.ssm, rt.settings.guard_override_parameter)
    outcome = publish_manifest(
        manifest,
        files,
        rt.publishers,
        graphs=rt.graphs,
        state=rt.publish_state,
        max_loss_fraction=rt.settings.guard_max_loss,
        override=override,
    )
    if outcome.held:
        rt.counters.held += 1
        _metric(M_HELD, 1)
        log.warning("publish of generation %d HELD by the blast-radius guard: %s", manifest.generation, outcome.detail)
    elif outcome.published:
        rt.counters.publishes += 1
        _metric(M_PUBLISHES, 1)
        log.info("published generation %d: %s", manifest.generation, outcome.detail)
    else:
        log.warning("generation %d not fully published: %s", manifest.generation, outcome.detail)
    return outcome


def _sqs_batch(event: dict[str, Any], fn: Any) -> dict[str, Any]:
    from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

    processor = BatchProcessor(event_type=EventType.SQS)
    return process_partial_response(
        event=event, record_handler=lambda record: fn(record.body), processor=processor, context=None
    )


@lambda_entry
def discover_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Lambda: SQS batch of instance events -> one discovery -> new graph generation."""
    return discover_batch(event)


@lambda_entry
def render_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Lambda: debounce timers -> render the latest generation -> publish queue."""
    return _sqs_batch(event, render_record)


@lambda_entry
def publish_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Lambda: manifests -> guard -> SSM / Kubernetes."""
    return _sqs_batch(event, publish_record)
