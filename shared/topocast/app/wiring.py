"""The cloud-neutral half of a composition root: the cloud's adapters in, the use cases' bundles out.

``topocast.aws.root.AwsRuntime`` and ``topocast.gcp.root.GcpRuntime`` subclass :class:`CompositionRoot`
and supply each adapter as a property typed with its port (a ``cached_property`` that creates the
adapter and its client on first use). So mypy checks every adapter against its port (an adapter whose
method signature differs from the port's is an incompatible override), and a stage's bundle touches
only the adapters that stage calls: a function builds only its own clients (cold start), and its role
needs only their calls. What the bundles take from the settings is read here, once, by keyword.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from functools import cached_property

from topocast.app import metrics as m
from topocast.app.metrics import MetricCounts, report_quarantined
from topocast.config import Settings, with_slurm_version
from topocast.pipeline.objects import ObjectStore, cluster_base, read_good_uploads
from topocast.ports.debounce import DebouncePolicy
from topocast.ports.protocols import (
    ArtifactStore,
    Debouncer,
    DiscoverPorts,
    GraphStore,
    GuardOverride,
    Metrics,
    Publisher,
    PublishHandoff,
    PublishPorts,
    PublishState,
    Rechecks,
    RenderPorts,
)
from topocast.providers.base import Provider

__all__ = ["CompositionRoot"]


class CompositionRoot(ABC):
    """One cluster's adapters (supplied by the cloud's root) and the bundles of its three use cases."""

    settings: Settings
    #: the Metrics port every use case counts through
    metrics: Metrics

    @property
    @abstractmethod
    def counters(self) -> MetricCounts:
        """What this process counted (the demo and tests read it)."""

    # ----- the cloud's adapters, one per port -----------------------------------------------------------
    @property
    @abstractmethod
    def objects(self) -> ObjectStore:
        """The pipeline's bucket (uploads, operator files, publishers that write objects)."""

    @property
    @abstractmethod
    def graphs(self) -> GraphStore: ...

    @property
    @abstractmethod
    def artifacts(self) -> ArtifactStore: ...

    @property
    @abstractmethod
    def publish_state(self) -> PublishState: ...

    @property
    @abstractmethod
    def debouncer(self) -> Debouncer:
        """Built with :attr:`debounce_policy` and ``on_reset=self.debounce_state_reset`` (a damaged state is
        counted on every cloud)."""

    @property
    @abstractmethod
    def handoff(self) -> PublishHandoff: ...

    @property
    @abstractmethod
    def rechecks(self) -> Rechecks | None:
        """None when this deployment cannot deliver a re-check later (one read decides)."""

    @property
    @abstractmethod
    def override(self) -> GuardOverride: ...

    @abstractmethod
    def provider(self) -> Provider:
        """The configured topology source, built through the registry (``topocast.providers``)."""

    @abstractmethod
    def publishers(self) -> Sequence[Publisher]:
        """The configured publishers, built through the registry (``topocast.publish``)."""

    # ----- what every cloud shares ----------------------------------------------------------------------
    def uploads(self) -> Mapping[str, bytes]:
        """Each host's upload; a bad one is quarantined (logged, counted) and the host's last good one stands in."""
        from topocast.providers.onprem import ibnetdiscover

        s = self.settings
        regex = s.provider_options().get("host_regex")
        # the same parse and build as discovery: an upload discovery cannot use is quarantined here
        uploads = read_good_uploads(
            self.objects,
            cluster_base(s.prefix, s.cluster, "uploads"),
            lambda data, uri: ibnetdiscover.check_upload(data, uri, host_regex=regex),
        )
        report_quarantined(uploads.quarantined, self.metrics)
        return uploads.texts

    @cached_property
    def debounce_policy(self) -> DebouncePolicy:
        """The debounce knobs, built once from the settings; the cloud's debouncer is built with it."""
        return DebouncePolicy.from_settings(self.settings)

    def debounce_state_reset(self, cluster: str) -> None:
        """The debouncer's ``on_reset``: it replaced a damaged state record (and logged why)."""
        self.metrics.count(m.DEBOUNCE_STATE_RESETS)

    # ----- one bundle per use case ----------------------------------------------------------------------
    def discover_ports(self) -> DiscoverPorts:
        s = self.settings
        return DiscoverPorts(
            cluster=s.cluster,
            graphs=self.graphs,
            provider=self.provider,
            debouncer=self.debouncer,
            publish_state=self.publish_state,
            artifacts=self.artifacts,
            handoff=self.handoff,
            metrics=self.metrics,
            full_scan_threshold=s.full_scan_threshold,
            rechecks=self.rechecks,
            follow_rechecks=s.follow_rechecks,
            follow_interval=s.follow_interval,
            set_aside_limit=s.guard_max_loss,
        )

    def render_ports(self) -> RenderPorts:
        s = self.settings
        return RenderPorts(
            cluster=s.cluster,
            graphs=self.graphs,
            artifacts=self.artifacts,
            publish_state=self.publish_state,
            debouncer=self.debouncer,
            handoff=self.handoff,
            metrics=self.metrics,
            formats=s.formats,
            render_options=with_slurm_version(s.render_options, s.slurm_version),
        )

    def publish_ports(self) -> PublishPorts:
        s = self.settings
        return PublishPorts(
            cluster=s.cluster,
            graphs=self.graphs,
            artifacts=self.artifacts,
            publish_state=self.publish_state,
            publishers=self.publishers,
            override=self.override,
            metrics=self.metrics,
            guard_max_loss=s.guard_max_loss,
        )
