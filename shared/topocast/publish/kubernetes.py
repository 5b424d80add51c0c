"""``KubernetesPublisher``: bring a cluster to the rendered desired state with as few API calls as the change needs.

The registry's ``PUBLISHERS["kubernetes"]`` (:func:`from_inputs`) builds it from the functions'
settings the same way on every cloud; it needs the ``k8s`` extra (lightkube), so the registry
imports this module only when a runtime publishes to Kubernetes.

One publish, in order:

1. discovery and reads for the scheduler objects (see :mod:`topocast.k8s.objects`);
2. Topology objects whose levels shrink (so Kueue stops using a level before its
   labels disappear);
3. node labels: one LIST, then one PATCH per node whose owned labels differ
   (see :mod:`topocast.k8s.labels`); a node the server refuses (403, 422, ...) is
   reported with the server's Status and the others go on, only an outage stops;
4. the remaining objects (growing Topologies only if every node label landed),
   then deletion of HyperNodes topocast created that are no longer desired.

A partial publish is safe to repeat: the next one lists again and patches only
what is still wrong, so a retry converges without redoing finished nodes.
The outcome (:attr:`KubernetesPublishReport.state`) is ``ok``, ``done with
refusals`` (published: a permanent refusal would fail every retry the same way)
or ``incomplete`` (an outage: not published, retried).

Every publish converges on the *live* state: nothing is skipped because an
annotation says it was written before. Hand edits (labels, Topology levels,
HyperNode members, the Slinky ConfigMap) are found, counted as drift
(``report.drift``, the ``Drift`` metric in :attr:`K8sPublishResult.metrics`) and
repaired in the same publish.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx2
from lightkube.core.exceptions import ApiError
from pydantic import BaseModel, ConfigDict, Field, field_validator

from topocast.config import DEFAULT_GUARD_MAX_LOSS
from topocast.k8s.client import ClientSettings, K8sConnection, KubeClient, build_client, connection_from_options
from topocast.k8s.inputs import PublishInputError, decode_files, labels_from_graph
from topocast.k8s.labels import (
    DEFAULT_INSTANCE_ANNOTATION,
    DEFAULT_MATCH,
    DesiredNode,
    LabelPlan,
    MatchBy,
    NodeRefusal,
    PatchOutcome,
    list_cluster_nodes,
    plan_labels,
    rotated,
    send_patches,
)
from topocast.k8s.objects import KINDS, DryRun, ObjectPublisher, ObjectReport, PendingObject
from topocast.model.graph import TopologyGraph
from topocast.model.hostlist import compact_str
from topocast.ports.records import PublishResult
from topocast.renderers import formats as renderer_formats
from topocast.renderers import kubernetes_formats
from topocast.renderers.base import Artifact, LabelScheme, RenderOptions

__all__ = [
    "K8sPublishResult",
    "KubernetesPublishReport",
    "KubernetesPublisher",
    "KubernetesPublisherConfig",
    "foreign_cluster",
    "from_inputs",
    "from_settings",
    "sample_names",
]


class KubernetesPublisherConfig(BaseModel):
    """Everything the Kubernetes publisher can be told (CLI flags and env map onto this)."""

    model_config = ConfigDict(extra="forbid")

    connection: K8sConnection = Field(default_factory=K8sConnection)
    client: ClientSettings = Field(default_factory=ClientSettings)
    formats: list[str] = Field(
        default_factory=lambda: list(kubernetes_formats()),
        description="Artifact formats this publisher writes if given (default: every Kubernetes format).",
    )
    labels: LabelScheme = Field(default_factory=LabelScheme, description="Decides which label keys topocast owns.")
    match_by: list[MatchBy] = Field(list(DEFAULT_MATCH), min_length=1)
    instance_annotation: str = DEFAULT_INSTANCE_ANNOTATION
    node_selector: dict[str, str] | None = Field(None, description="Only consider nodes with these labels.")
    list_page_size: int | None = Field(None, ge=1, description="Page the node LIST (None = one request).")
    concurrency: int = Field(
        32,
        ge=1,
        le=64,
        description="Node PATCHes in flight (all share the adaptive QPS limit); bounds the load whatever qps says.",
    )
    max_consecutive_failures: int = Field(
        5,
        ge=1,
        description="Node PATCH outages in a row (5xx, connection errors, 429 after retries) that stop the "
        "publish; a node the server refuses (403, 422, ...) never counts.",
    )
    slinky_node_annotations: bool = Field(False, description="Also set topology.slinky.slurm.net/spec per node.")
    max_conflict_retries: int = Field(3, ge=0)
    recreate_immutable_topology: bool = True
    discovery_ttl: float = Field(600.0, ge=0, description="Seconds to reuse API discovery between publishes.")
    min_node_share: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Share of the graph's nodes the cluster must hold, or the publish is refused before anything is "
        "applied (a kubeconfig pointing at another cluster); None: 1 - TOPOCAST_GUARD_MAX_LOSS (0.9); 0 turns it off.",
    )
    dry_run: DryRun = Field(
        "off",
        description="client: read and plan, write nothing; server: send every write with dryRun=All (validated, "
        "not persisted).",
    )

    @field_validator("formats")
    @classmethod
    def _kubernetes_formats(cls, v: list[str]) -> list[str]:
        """A format this publisher does not write (a typo, a Slurm file) is refused, not silently skipped."""
        known = kubernetes_formats()
        unknown = [f for f in v if f not in known]
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)}: not a Kubernetes format (this publisher writes {', '.join(known)})"
            )
        return v


@dataclass
class KubernetesPublishReport:
    """What a publish did. Lists name nodes/objects; ``counts()`` is the short form for logs and metrics."""

    nodes_patched: list[str] = field(default_factory=list)
    nodes_unchanged: int = 0
    nodes_gone: list[str] = field(default_factory=list)
    #: nodes the API server refused (admission, validation; 403, 422, 409 after resends): node -> its Status.
    #: A permanent answer: the rest of the cluster is labelled and the publish is done with refusals.
    nodes_refused: dict[str, NodeRefusal] = field(default_factory=dict)
    #: nodes whose PATCH met an outage (5xx, connection errors, 429 after retries): the publish is incomplete
    nodes_failed: dict[str, str] = field(default_factory=dict)
    nodes_not_attempted: list[str] = field(default_factory=list)
    nodes_missing_in_cluster: list[str] = field(default_factory=list)
    nodes_missing_in_graph: list[str] = field(default_factory=list)
    #: why nothing was applied: the cluster holds too few of the graph's nodes (another cluster?)
    refused_cluster: str | None = None
    labels_set: int = 0
    labels_removed: int = 0
    matched_by: dict[str, int] = field(default_factory=dict)
    objects_applied: list[str] = field(default_factory=list)
    objects_unchanged: list[str] = field(default_factory=list)
    objects_deleted: list[str] = field(default_factory=list)
    objects_held: list[str] = field(default_factory=list)
    #: objects found edited away from what topocast last wrote: label -> differing fields (repaired)
    objects_drifted: dict[str, list[str]] = field(default_factory=dict)
    #: nodes whose owned labels were edited after topocast set them (repaired)
    nodes_drifted: list[str] = field(default_factory=list)
    #: "off", "client" or "server": with a dry run nothing above was persisted
    dry_run: str = "off"
    #: dry run only: node -> {"set": {...}, "remove": [...], "annotate": {...}}
    node_changes: dict[str, dict[str, Any]] = field(default_factory=dict)
    api_versions: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    api_calls: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when nothing is left that a retry could do: the cluster matches the desired state except for
        the nodes the server refused (warnings allowed; :attr:`state` tells the two apart)."""
        return not (
            self.errors or self.nodes_failed or self.nodes_not_attempted or self.objects_held or self.refused_cluster
        )

    @property
    def state(self) -> str:
        """``ok``; ``done with refusals`` (every node the server accepts is labelled, the refused ones are
        reported: retrying cannot change a permanent answer); or ``incomplete`` (an outage, an error or a
        held object: the publish is retried)."""
        if not self.ok:
            return "incomplete"
        return "done with refusals" if self.nodes_refused else "ok"

    def refusals(self) -> list[tuple[str, list[str], str]]:
        """Refused nodes by class: ``(kind, nodes, one server message)``, the largest class first."""
        by_kind: dict[str, list[str]] = {}
        for node, refusal in self.nodes_refused.items():
            by_kind.setdefault(refusal.kind, []).append(node)
        if self.nodes_gone:
            by_kind["404 NotFound (deleted since the LIST)"] = list(self.nodes_gone)
        classes = []
        for kind, nodes in sorted(by_kind.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            first = self.nodes_refused.get(nodes[0])
            classes.append((kind, sorted(nodes), first.message if first else ""))
        return classes

    @property
    def drift(self) -> int:
        """Objects and nodes found edited by hand since topocast last wrote them (the ``Drift`` metric)."""
        return len(self.objects_drifted) + len(self.nodes_drifted)

    def counts(self) -> dict[str, int]:
        return {
            "drift": self.drift,
            "nodes_patched": len(self.nodes_patched),
            "nodes_unchanged": self.nodes_unchanged,
            "nodes_missing_in_cluster": len(self.nodes_missing_in_cluster),
            "nodes_missing_in_graph": len(self.nodes_missing_in_graph),
            "nodes_refused": len(self.nodes_refused),
            "nodes_gone": len(self.nodes_gone),
            "nodes_failed": len(self.nodes_failed),
            "nodes_not_attempted": len(self.nodes_not_attempted),
            "labels_set": self.labels_set,
            "labels_removed": self.labels_removed,
            "objects_applied": len(self.objects_applied),
            "objects_unchanged": len(self.objects_unchanged),
            "objects_deleted": len(self.objects_deleted),
            "warnings": len(self.warnings),
            "errors": len(self.errors),
            "api_requests": int(self.api_calls.get("requests", 0)),
        }

    def summary(self) -> str:
        c = self.counts()
        parts = [f"{k.replace('_', ' ')}={v}" for k, v in c.items() if v]
        state = self.state
        text = f"{state.upper() if state == 'incomplete' else state}: " + (", ".join(parts) or "nothing to do")
        if self.dry_run != "off":
            text = f"dry run ({self.dry_run}, nothing written) " + text.replace("patched", "to patch").replace(
                "applied", "to apply"
            ).replace("deleted", "to delete")
        if self.nodes_missing_in_cluster:
            text += f"; not in cluster: {sample_names(self.nodes_missing_in_cluster)}"
        if self.nodes_missing_in_graph:
            text += f"; not in graph: {sample_names(self.nodes_missing_in_graph)}"
        for kind, nodes, message in self.refusals()[:3]:
            text += f"; refused {kind}: {len(nodes)} node(s) {sample_names(nodes, 60)}"
            text += f" ({nodes[0]}: {message[:160]})" if message else ""
        if self.refused_cluster:
            text += f"; {self.refused_cluster}"
        for problem in (*self.errors[:3], *(f"{n}: {e}" for n, e in list(self.nodes_failed.items())[:3])):
            text += f"; {problem}"
        return text

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class K8sPublishResult(PublishResult):
    """The shared :class:`PublishResult` plus the full report."""

    report: KubernetesPublishReport = field(default_factory=KubernetesPublishReport)

    @property
    def drift(self) -> int:
        return self.report.drift

    @property
    def metrics(self) -> dict[str, int]:
        """Counts for the pipeline to emit (``Drift`` = hand edits found and repaired)."""
        c = self.report.counts()
        return {
            "Drift": c["drift"],
            "NodesPatched": c["nodes_patched"],
            "NodesRefused": c["nodes_refused"],
            "ObjectsApplied": c["objects_applied"],
            "ObjectsDeleted": c["objects_deleted"],
            "ApiRequests": c["api_requests"],
            "Throttled": int(self.report.api_calls.get("throttled", 0)),
        }

    @classmethod
    def of(cls, report: KubernetesPublishReport) -> K8sPublishResult:
        written = [f"node/{n}" for n in report.nodes_patched] + report.objects_applied
        written += [f"deleted {o}" for o in report.objects_deleted]
        skipped = [f"{o}: already current" for o in report.objects_unchanged]
        if report.nodes_unchanged:
            skipped.append(f"{report.nodes_unchanged} node(s): labels already current")
        skipped += [f"node/{n}: not in the graph" for n in report.nodes_missing_in_graph]
        skipped += [f"node/{n}: refused, {r.kind}: {r.message}" for n, r in report.nodes_refused.items()]
        return cls(report.ok, report.summary(), written, skipped, report)


def sample_names(names: list[str], limit: int = 120) -> str:
    """Names as a compact hostlist (``gpu-[0000-0015]``), cut at ``limit`` characters: a bounded sample."""
    try:
        text = compact_str(sorted(names))
    except Exception:  # names that are not hostlist-friendly: plain list
        text = ",".join(sorted(names))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _field(manifest: Any, name: str) -> Any:
    if manifest is None:
        return None
    if isinstance(manifest, Mapping):
        return manifest.get(name)
    return getattr(manifest, name, None)


def _by_format(artifacts: Mapping[str, Artifact] | Iterable[Artifact]) -> dict[str, Artifact]:
    if isinstance(artifacts, Mapping):
        return {a.format: a for a in artifacts.values()}
    return {a.format: a for a in artifacts}


class KubernetesPublisher:
    """Publishes ``k8s-labels``, ``kueue``, ``kai``, ``volcano`` and ``slinky`` artifacts to one cluster.

    ``graph_source(generation)`` is optional: with it, node labels carry instance IDs
    (for provider-ID matching) and the Slinky node annotations can be computed; the
    pipeline passes ``lambda g: graph_store.get(g).graph``.
    """

    name = "kubernetes"

    def __init__(
        self,
        config: KubernetesPublisherConfig | None = None,
        *,
        client_factory: Callable[[], KubeClient] | None = None,
        owns_key: Callable[[str], bool] | None = None,
        render_options: RenderOptions | None = None,
        graph_source: Callable[[int], TopologyGraph] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config or KubernetesPublisherConfig()
        if render_options is not None and render_options.labels != self.config.labels:
            raise ValueError("render_options.labels and the publisher's labels scheme differ; pass the same scheme")
        self._client_factory = client_factory or (lambda: build_client(self.config.connection, self.config.client))
        self._owns_key = owns_key
        self._render_options = render_options or RenderOptions(labels=self.config.labels)
        self._graph_source = graph_source
        self._rng = rng or random.Random()
        self._discovery: dict[str, str | None] = {}
        self._discovered_at = 0.0
        #: ``progress(done, total)`` of the node PATCHes (the CLI's bar or periodic lines); None = silent
        self.progress: Callable[[int, int], None] | None = None

    # ----- the shared publisher protocol ----------------------------------------------------------------
    def publish(
        self,
        manifest: Any,
        artifacts: Mapping[str, bytes] | Mapping[str, Artifact] | Iterable[Artifact],
        *,
        node_annotations: Mapping[str, Mapping[str, str]] | None = None,
    ) -> K8sPublishResult:
        """``artifacts`` is ``{file name: bytes}`` as the publish stage passes it (decoded with the
        manifest), or rendered :class:`Artifact` objects when called in-process."""
        generation = _field(manifest, "generation")
        report = KubernetesPublishReport()
        graph_cache: list[TopologyGraph | None] = []

        def graph() -> TopologyGraph | None:  # read at most once, and only when needed
            if not graph_cache:
                given = _field(manifest, "graph")
                if given is None and self._graph_source is not None and generation is not None:
                    try:
                        given = self._graph_source(int(generation))
                    except Exception as exc:  # a storage hiccup degrades matching, it does not stop the publish
                        report.warnings.append(f"graph of generation {generation} unavailable: {exc}")
                graph_cache.append(given)
            return graph_cache[0]

        try:
            arts = self._artifacts(manifest, artifacts, graph, report)
        except PublishInputError as exc:
            report.errors.append(str(exc))
            return K8sPublishResult.of(report)
        wants_graph = self.config.slinky_node_annotations and node_annotations is None
        report = self.run(
            arts,
            generation=None if generation is None else str(generation),
            node_annotations=node_annotations,
            graph=graph() if wants_graph else None,
            report=report,
        )
        return K8sPublishResult.of(report)

    def _artifacts(
        self,
        manifest: Any,
        artifacts: Mapping[str, bytes] | Mapping[str, Artifact] | Iterable[Artifact],
        graph: Callable[[], TopologyGraph | None],
        report: KubernetesPublishReport,
    ) -> dict[str, Artifact]:
        if not (isinstance(artifacts, Mapping) and any(isinstance(v, bytes | bytearray) for v in artifacts.values())):
            return _by_format(artifacts)  # type: ignore[arg-type]
        arts = decode_files(manifest, artifacts, self.config.formats)  # type: ignore[arg-type]
        labels = arts.get("k8s-labels")
        if labels is None:
            return arts
        source = graph()
        if source is not None:
            rich = labels_from_graph(source, self._render_options, labels)
            if rich is not None:
                arts["k8s-labels"] = rich
                return arts
            report.warnings.append(
                f"{labels.filename} differs from a render of the graph with this publisher's options; "
                "matching without instance IDs"
            )
        elif "provider-id" in self.config.match_by:
            report.warnings.append(
                f"{labels.filename} carries no instance IDs and no graph_source is set: nodes match by "
                "annotation/name (and by provider ID only where it ends in the node name, as on GCE)"
            )
        return arts

    # ----- the detailed API ------------------------------------------------------------------------------
    def run(
        self,
        artifacts: Mapping[str, Artifact] | Iterable[Artifact],
        *,
        generation: str | None = None,
        node_annotations: Mapping[str, Mapping[str, str]] | None = None,
        graph: Any = None,
        report: KubernetesPublishReport | None = None,
    ) -> KubernetesPublishReport:
        cfg = self.config
        arts = {f: a for f, a in _by_format(artifacts).items() if f in cfg.formats}
        if report is None:
            report = KubernetesPublishReport()
        report.dry_run = cfg.dry_run
        started = time.monotonic()
        kc = self._client_factory()
        try:
            for art in arts.values():
                report.warnings.extend(f"{art.format}: {w}" for w in art.warnings)
            obj_report = ObjectReport()
            objects = ObjectPublisher(
                kc,
                obj_report,
                self._discovery_cache(),
                cfg.max_conflict_retries,
                cfg.recreate_immutable_topology,
                cfg.dry_run,
            )
            # The node LIST and the label plan come first: they are reads, and they tell whether this is the
            # cluster the graph describes before any object is applied.
            plan: LabelPlan | None = None
            if "k8s-labels" in arts:
                annotations = self._node_annotations(node_annotations, graph, report)
                plan = self._plan_labels(kc, arts["k8s-labels"], annotations, report)
                if plan is not None and self._refuse_cluster(plan, report):
                    return report
            pending: list[PendingObject] = []
            for fmt in renderer_formats("kubernetes-objects"):
                if fmt in arts:
                    pending += objects.prepare(KINDS[fmt], arts[fmt].objects, generation)
            for obj in pending:
                if obj.before_labels:
                    objects.apply(obj)
            labels_ok = plan is not None or "k8s-labels" not in arts
            if plan is not None:
                labels_ok = self._send_labels(kc, plan, report)
            after: list[PendingObject] = []
            for obj in pending:
                if obj.before_labels:
                    continue
                if obj.kind.has_levels and obj.changed and not labels_ok:
                    report.objects_held.append(obj.label)
                    report.warnings.append(
                        f"{obj.label}: not updated because node labelling is incomplete "
                        "(its new levels would hide unlabelled nodes); the next publish retries"
                    )
                    continue
                after.append(obj)
            # Hundreds of HyperNodes: applied `concurrency` at a time, like the node PATCHes.
            objects.apply_all(after, cfg.concurrency)
            objects.collect_garbage()
            report.objects_applied = obj_report.applied
            report.objects_unchanged = obj_report.unchanged
            report.objects_deleted = obj_report.deleted
            report.objects_drifted = obj_report.drifted
            report.api_versions = obj_report.api_versions
            report.warnings += obj_report.warnings
            report.errors += obj_report.errors
        finally:
            report.api_calls = kc.transport.stats.snapshot()
            report.seconds = round(time.monotonic() - started, 3)
            kc.close()
        return report

    def _discovery_cache(self) -> dict[str, str | None]:
        if time.monotonic() - self._discovered_at > self.config.discovery_ttl:
            self._discovery = {}
            self._discovered_at = time.monotonic()
        return self._discovery

    def _owns(self) -> Callable[[str], bool]:
        if self._owns_key is not None:
            return self._owns_key
        from topocast.renderers.k8s_labels import owns_key

        scheme = self.config.labels
        return lambda key: owns_key(key, scheme)

    def _node_annotations(
        self,
        given: Mapping[str, Mapping[str, str]] | None,
        graph: Any,
        report: KubernetesPublishReport,
    ) -> Mapping[str, Mapping[str, str]]:
        if given is not None or not self.config.slinky_node_annotations:
            return given or {}
        if graph is None:
            report.warnings.append(
                "slinky_node_annotations is on but the publish carried no graph; annotations skipped"
            )
            return {}
        from topocast.renderers.slinky import node_annotations

        return node_annotations(graph, self._render_options)

    def _plan_labels(
        self,
        kc: KubeClient,
        artifact: Artifact,
        annotations: Mapping[str, Mapping[str, str]],
        report: KubernetesPublishReport,
    ) -> LabelPlan | None:
        """The node LIST and the label plan (reads only); None, with the error reported, when either fails."""
        cfg = self.config
        try:
            desired = [DesiredNode.from_object(o, annotations.get(str(o.get("node")))) for o in artifact.objects]
        except ValueError as exc:
            report.errors.append(str(exc))
            return None
        ann_keys = {cfg.instance_annotation} | {k for a in annotations.values() for k in a}
        try:
            cluster = list_cluster_nodes(kc, ann_keys, cfg.node_selector, cfg.list_page_size)
        except (ApiError, httpx2.HTTPError) as exc:
            detail = f"{exc.status.code} {exc.status.message}" if isinstance(exc, ApiError) else str(exc)
            report.errors.append(f"listing nodes failed: {detail}")
            return None
        return plan_labels(cluster, desired, self._owns(), cfg.match_by, cfg.instance_annotation)

    def _refuse_cluster(self, plan: LabelPlan, report: KubernetesPublishReport) -> bool:
        """Refuse (report it, apply nothing) when the cluster holds too few of the graph's nodes: a kubeconfig
        pointing at another cluster must not receive this graph's Topologies, HyperNodes and ConfigMap.
        A client dry run only warns (it writes nothing and its plan shows what would happen)."""
        share = self.config.min_node_share
        share = 1 - DEFAULT_GUARD_MAX_LOSS if share is None else share
        matched = len(plan.patches) + len(plan.unchanged)  # graph nodes paired with a cluster node
        reason = foreign_cluster(matched + len(plan.missing_in_cluster), matched, share)
        if reason is None:
            return False
        report.nodes_missing_in_cluster = plan.missing_in_cluster
        report.nodes_missing_in_graph = plan.missing_in_graph
        if self.config.dry_run == "client":
            report.warnings.append(reason)
            return False
        report.refused_cluster = reason
        return True

    def _send_labels(self, kc: KubeClient, plan: LabelPlan, report: KubernetesPublishReport) -> bool:
        cfg = self.config
        if cfg.dry_run == "client":
            outcome = PatchOutcome(patched=sorted(p.node for p in plan.patches))
        else:
            # A random start, so that no run of nodes keeps the head of every retry (see `rotated`).
            order = rotated(plan.patches, self._rng.randrange(max(1, len(plan.patches))))
            outcome = send_patches(
                kc,
                order,
                cfg.concurrency,
                cfg.max_consecutive_failures,
                dry_run=cfg.dry_run == "server",
                max_conflict_retries=cfg.max_conflict_retries,
                progress=self.progress,
            )
        if cfg.dry_run != "off":
            report.node_changes = {
                p.node: {
                    "set": dict(p.set_labels),
                    "remove": list(p.remove_labels),
                    "annotate": dict(p.set_annotations),
                }
                for p in plan.patches
            }
        done = set(outcome.patched)
        for patch in plan.patches:
            if patch.node in done:
                report.labels_set += len(patch.set_labels)
                report.labels_removed += len(patch.remove_labels)
        report.nodes_patched = outcome.patched
        report.nodes_drifted = sorted(p.node for p in plan.patches if p.drifted and p.node in done)
        report.nodes_unchanged = len(plan.unchanged)
        report.nodes_gone = outcome.gone
        report.nodes_refused = outcome.refused
        report.nodes_failed = outcome.failed
        report.nodes_not_attempted = outcome.not_attempted
        report.nodes_missing_in_cluster = plan.missing_in_cluster
        report.nodes_missing_in_graph = plan.missing_in_graph
        report.matched_by = dict(plan.matched_by)
        report.warnings += plan.warnings
        if outcome.stopped is not None:
            report.errors.append(
                f"node labels stopped by an outage: {outcome.stopped}; {len(outcome.not_attempted)} node(s) "
                "not attempted (the next publish retries them and the failed ones)"
            )
        # Refused nodes do not hold the growing Topologies: a node pool that refuses forever must not keep
        # every other node's new levels from Kueue/KAI (degrade per node); those nodes are reported.
        return not (outcome.failed or outcome.not_attempted)


#: how an operator publishes to a cluster holding few of the graph's nodes anyway (both ways named in the refusal)
MIN_NODE_SHARE_OVERRIDE = "--min-node-share 0 (TOPOCAST_K8S_OPTIONS: min_node_share)"


def foreign_cluster(wanted: int, matched: int, min_share: float) -> str | None:
    """Why a cluster holding ``matched`` of the graph's ``wanted`` nodes is not the one the graph describes,
    or None when it holds at least ``min_share`` of them (an empty graph has nothing to compare)."""
    if wanted == 0 or matched >= min_share * wanted:
        return None
    return (
        f"the cluster holds {matched} of the graph's {wanted} nodes ({matched / wanted:.0%}, fewer than "
        f"{min_share:.0%}): not the cluster this graph describes? nothing was applied; "
        f"{MIN_NODE_SHARE_OVERRIDE} publishes anyway"
    )


def from_settings(settings: Any, graph_source: Callable[[int], Any]) -> KubernetesPublisher:
    """``TOPOCAST_K8S_OPTIONS`` (KubernetesPublisherConfig as JSON); the connection may instead come from
    ``TOPOCAST_K8S_<FIELD>`` variables. The label scheme is the render stage's, so ownership agrees."""
    options = dict(settings.k8s_options)
    options.setdefault("labels", settings.render_options.labels.model_dump())
    options["connection"] = connection_from_options(options)
    if options.get("min_node_share") is None:  # the guard's share, unless given
        options["min_node_share"] = 1 - settings.guard_max_loss
    return KubernetesPublisher(
        KubernetesPublisherConfig.model_validate(options),
        render_options=settings.render_options,
        graph_source=graph_source,
    )


def from_inputs(inputs: Any) -> KubernetesPublisher:
    """Registry factory (``PUBLISHERS["kubernetes"]``): :func:`from_settings` with the runtime's graph source."""
    return from_settings(inputs.settings, inputs.graph_source)
