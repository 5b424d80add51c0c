"""Function configuration, read once from environment variables (``TOPOCAST_*``).

Terraform sets these on every function (see ``infra/terraform/modules/*``); the
one-shot CLI builds the same model from flags. Every variable is listed in
:data:`ENV_VARS` with its meaning, so the wiring test can check that what
Terraform passes is exactly what the code reads.

Lists are separated by ``;`` (EC2 filter values may contain commas), JSON
values start with ``{``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from topocast.errors import TopocastError
from topocast.renderers.base import RenderOptions
from topocast.safeio.validation import check_json_depth, describe

DEFAULT_FORMATS = ["slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "graph", "html"]

#: env var -> (Settings field, description). The single source of truth for the wiring test and docs.
ENV_VARS: dict[str, tuple[str, str]] = {
    "TOPOCAST_CLUSTER": ("cluster", "cluster name (graph, keys, parameter paths)"),
    "TOPOCAST_PROVIDER": ("provider", "topology source: aws, gcp, ibnetdiscover, netq, k8s-labels, oci, nebius"),
    "TOPOCAST_PROVIDER_OPTIONS": (
        "provider_settings",
        "options of a provider the variables below do not cover (oci, nebius, ...) as a JSON object",
    ),
    "TOPOCAST_BUCKET": ("bucket", "S3/GCS bucket for graphs and rendered artifacts"),
    "TOPOCAST_PREFIX": ("prefix", "key prefix inside the bucket"),
    "TOPOCAST_FILTERS": ("filters", "cluster membership, EC2 filter syntax NAME=V1,V2 separated by ';'"),
    "TOPOCAST_NAME_FROM": ("name_from", "node name source: tag:<key>, private-dns, instance-id, template:<fmt>"),
    "TOPOCAST_INSTANCE_TYPES": ("instance_types", "optional instance-type allow list (';')"),
    "TOPOCAST_ZONES": ("zones", "optional zone allow list (';')"),
    "TOPOCAST_RESERVED_NODES": (
        "reserved_nodes",
        "topology before launch: capacity reservation -> Slurm node names, cr-ID=HOSTLIST;... or a JSON object",
    ),
    "TOPOCAST_FULL_SCAN_THRESHOLD": ("full_scan_threshold", "instance events in one batch above which discover scans"),
    "TOPOCAST_FOLLOW_RECHECKS": (
        "follow_rechecks",
        "re-reads of a VM through host maintenance / a restart until it is steady, at most (0: one read decides)",
    ),
    "TOPOCAST_FOLLOW_INTERVAL_SECONDS": ("follow_interval", "seconds between those re-reads (SQS: at most 900)"),
    "TOPOCAST_FORMATS": ("formats", "formats render writes (';' or ',')"),
    "TOPOCAST_RENDER_OPTIONS": ("render_options", "RenderOptions as JSON"),
    "TOPOCAST_DEBOUNCE_QUIET_SECONDS": ("debounce_quiet", "quiet window before a render"),
    "TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS": ("debounce_max_wait", "longest a change waits for a render"),
    "TOPOCAST_DEBOUNCE_LEADING_EDGE": (
        "debounce_leading_edge",
        "the first change after a quiet window renders at once (the rest of a burst debounces); default false",
    ),
    "TOPOCAST_STATE_TABLE": ("state_table", "DynamoDB table holding debounce state"),
    "TOPOCAST_TIMER_QUEUE_URL": ("timer_queue_url", "SQS queue of debounce timers (render's trigger)"),
    "TOPOCAST_PUBLISH_QUEUE_URL": ("publish_queue_url", "SQS queue of rendered manifests (publish's trigger)"),
    "TOPOCAST_DLQ_URL": ("dlq_url", "where discover sends malformed events, with the reason"),
    "TOPOCAST_EVENTS_QUEUE_URL": ("events_queue_url", "discover's own queue: delayed re-checks of followed instances"),
    "TOPOCAST_PUBLISHERS": ("publishers", "publish targets: ssm, kubernetes (';')"),
    "TOPOCAST_SSM_PREFIX": ("ssm_prefix", "SSM path for Slurm artifacts (default /topocast/<cluster>/slurm)"),
    "TOPOCAST_SSM_ADVANCED_TIER": ("ssm_advanced_tier", "allow Advanced-tier (8 KB) parameters"),
    "TOPOCAST_GUARD_MAX_LOSS": ("guard_max_loss", "fraction of published nodes a publish may lose"),
    "TOPOCAST_GUARD_OVERRIDE_PARAMETER": ("guard_override_parameter", "SSM parameter an operator sets to a generation"),
    "TOPOCAST_K8S_OPTIONS": ("k8s_options", "Kubernetes publisher options as JSON"),
    "TOPOCAST_SLURMREST_URL": (
        "slurmrest_url",
        "slurmrestd publisher: http(s)://host:port the publish function reaches",
    ),
    "TOPOCAST_SLURMREST_TOKEN": (
        "slurmrest_token",
        "slurmrestd publisher: where the Slurm JWT is (ssm:///name, secretsmanager://name, an ARN, gsm://projects/..)",
    ),
    "TOPOCAST_SLURMREST_MAX_SHARE": (
        "slurmrest_max_share",
        "slurmrestd publisher: most nodes (share of the cluster) one publish moves live (default 0.1)",
    ),
    "TOPOCAST_SLURMREST_FORMAT": (
        "slurmrest_format",
        "slurmrestd publisher: the format the controller runs (slurm-tree, slurm-block, slurm-yaml)",
    ),
    "TOPOCAST_OVERLAYS": (
        "overlays",
        "merged sources after the provider, SOURCE:FIELD=VALUE[,...] separated by ';', e.g. "
        "k8s-labels:domain=nvidia.com/gpu.clique (providers/overlay.py)",
    ),
    "TOPOCAST_NODE_LABELS": (
        "node_labels",
        "k8s-labels: NodeLabelsConfig as JSON (fabric_keys, accelerator_key, node_selector); the cluster is "
        "reached like the Kubernetes publisher (TOPOCAST_K8S_OPTIONS connection, else TOPOCAST_K8S_*)",
    ),
    # ----- on-prem fabrics (topocast.providers.ibnetdiscover / netq; see docs/onprem.md) -----
    "TOPOCAST_IB_HOST_REGEX": ("ib_host_regex", "ibnetdiscover: regex with group 'host' for HCA descriptions"),
    "TOPOCAST_IB_HCAS": (
        "ib_hcas",
        "ibnetdiscover/netq: the compute fabric's HCAs (device-name patterns, '!' excludes: mlx5_[0-7];!mlx5_8)",
    ),
    "TOPOCAST_IB_GUIDS": ("ib_guids", "ibnetdiscover: the compute fabric's HCA node/port GUIDs (';', '!' excludes)"),
    "TOPOCAST_IB_SWITCHES": ("ib_switches", "ibnetdiscover/netq: switch-name patterns that may be used (!STOR-*)"),
    "TOPOCAST_DOMAINS_URI": ("domains_uri", "on-prem NVLink domains file (CSV or nvidia-smi -q), s3://..."),
    "TOPOCAST_NETQ_URL": ("netq_url", "NetQ API base URL"),
    "TOPOCAST_NETQ_CREDENTIALS": ("netq_credentials", "Secrets Manager / SSM SecureString ARN of NetQ credentials"),
    "TOPOCAST_NETQ_PREMISES": ("netq_premises", "NetQ premises to read (';'); empty = all"),
    # ----- GCP (topocast.gcp; see docs/gcp.md) -----
    "TOPOCAST_GCP_PROJECT": ("gcp_project", "GCP project ID that owns the cluster's VMs"),
    "TOPOCAST_GCP_ZONES": ("gcp_zones", "zones to list (';'); empty: aggregatedList over all zones"),
    "TOPOCAST_GCP_LABEL": ("gcp_labels", "cluster membership, GCE labels KEY=VALUE (';', all must match)"),
    "TOPOCAST_GCP_DOMAIN_TIER": ("gcp_domain_tier", "NVLink domain from physicalHostTopology: subblock, block, none"),
    "TOPOCAST_GCP_READ": ("gcp_read", "GCP: apply a window of changes by auto (cheaper of list/get), list or get"),
    "TOPOCAST_COMPUTE_ENDPOINT": ("compute_endpoint", "Compute Engine API endpoint override (tests, private endpoint)"),
    "TOPOCAST_CLOUDTASKS_ENDPOINT": ("cloudtasks_endpoint", "Cloud Tasks API endpoint override"),
    "TOPOCAST_TASK_QUEUE": ("task_queue", "Cloud Tasks queue projects/P/locations/L/queues/Q (timers, hand-offs)"),
    "TOPOCAST_DISCOVER_URL": ("discover_url", "discover function URL (discover-window tasks)"),
    "TOPOCAST_RENDER_URL": ("render_url", "render function URL (debounce timer tasks)"),
    "TOPOCAST_PUBLISH_URL": ("publish_url", "publish function URL (publish tasks)"),
    "TOPOCAST_TASKS_SERVICE_ACCOUNT": ("tasks_service_account", "service account Cloud Tasks signs OIDC tokens as"),
    "TOPOCAST_DISCOVER_WINDOW_SECONDS": ("discover_window", "GCP: batch instance events this long (0: one by one)"),
}


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StorageSettings(_Section):
    """Which cluster, and where its state lives (graphs, rendered files, guard records)."""

    cluster: str
    bucket: str | None = None
    prefix: str = "topocast"


class DiscoverySettings(_Section):
    """Where the topology comes from (:meth:`provider_options` hands the provider its part)."""

    provider: str = "aws"
    full_scan_threshold: int = Field(100, ge=1)
    follow_rechecks: int = Field(6, ge=0, le=100)
    follow_interval: float = Field(30.0, ge=1, le=900)
    name_from: str | None = None
    # aws
    filters: list[str] = Field(default_factory=list)
    instance_types: list[str] = Field(default_factory=list)
    zones: list[str] = Field(default_factory=list)
    #: raw; AwsDiscoveryConfig.reserved_nodes validates it (providers/aws_capacity.parse_reserved_nodes)
    reserved_nodes: str | dict[str, Any] | None = None
    # on-prem fabrics
    ib_host_regex: str | None = None
    ib_hcas: list[str] = Field(default_factory=list)
    ib_guids: list[str] = Field(default_factory=list)
    ib_switches: list[str] = Field(default_factory=list)
    domains_uri: str | None = None
    netq_url: str | None = None
    netq_credentials: str | None = None
    netq_premises: list[str] = Field(default_factory=list)
    # gcp
    gcp_project: str | None = None
    gcp_zones: list[str] = Field(default_factory=list)
    gcp_labels: list[str] = Field(default_factory=list)
    gcp_domain_tier: str = "subblock"
    gcp_read: str = "auto"
    compute_endpoint: str | None = None
    # k8s-labels (NodeLabelsConfig without the cluster; validated by the provider)
    node_labels: dict[str, Any] = Field(default_factory=dict)
    # every other provider: its own Options model validates this (topocast.providers.options)
    provider_settings: dict[str, Any] = Field(default_factory=dict)
    #: merged sources read after the provider (providers/overlay.py grammar; parsed when it is built)
    overlays: list[str] = Field(default_factory=list)

    def provider_options(self) -> dict[str, Any]:
        """The options of the configured provider (``ProviderInputs.options``), by provider name."""
        by_provider: dict[str, dict[str, Any]] = {
            "aws": {
                "filters": self.filters,
                "instance_types": self.instance_types,
                "zones": self.zones,
                "name_from": self.name_from,
                "reserved_nodes": self.reserved_nodes,
            },
            "gcp": {
                "project": self.gcp_project,
                "zones": self.gcp_zones,
                "labels": self.gcp_labels,
                "name_from": self.name_from,
                "domain_tier": self.gcp_domain_tier,
                "read": self.gcp_read,
            },
            "ibnetdiscover": {
                "host_regex": self.ib_host_regex,
                "domains_uri": self.domains_uri,
                "ib_hcas": self.ib_hcas,
                "ib_guids": self.ib_guids,
                "ib_switches": self.ib_switches,
            },
            "netq": {
                "ib_hcas": self.ib_hcas,
                "ib_switches": self.ib_switches,
                "url": self.netq_url,
                "credentials": self.netq_credentials,
                "premises": self.netq_premises,
                "domains_uri": self.domains_uri,
            },
            "k8s-labels": dict(self.node_labels),
        }
        return by_provider.get(self.provider, dict(self.provider_settings))


class RenderSettings(_Section):
    """What render writes, and when (debounce)."""

    formats: list[str] = Field(default_factory=lambda: list(DEFAULT_FORMATS))
    render_options: RenderOptions = Field(default_factory=RenderOptions)
    debounce_quiet: float = Field(15.0, gt=0)
    debounce_max_wait: float = Field(120.0, gt=0)
    #: off by default: a burst then costs one render, not two; on, a lone change skips the quiet window
    debounce_leading_edge: bool = False


class PublishSettings(_Section):
    """Where publish pushes to, and the blast-radius guard."""

    publishers: list[str] = Field(default_factory=lambda: ["ssm"])
    ssm_prefix: str | None = None
    ssm_advanced_tier: bool = False
    guard_max_loss: float = Field(0.10, ge=0, le=1)
    guard_override_parameter: str | None = None
    k8s_options: dict[str, Any] = Field(default_factory=dict)
    slurmrest_url: str | None = None
    slurmrest_token: str | None = None
    slurmrest_format: Literal["slurm-tree", "slurm-block", "slurm-yaml"] = "slurm-tree"
    slurmrest_max_share: float = Field(0.1, ge=0, le=1)


class AwsWiring(_Section):
    """How the AWS functions reach each other (DynamoDB, SQS)."""

    state_table: str | None = None
    timer_queue_url: str | None = None
    publish_queue_url: str | None = None
    dlq_url: str | None = None
    events_queue_url: str | None = None


class GcpWiring(_Section):
    """How the GCP functions reach each other (Cloud Tasks, function URLs)."""

    cloudtasks_endpoint: str | None = None
    task_queue: str | None = None
    discover_url: str | None = None
    render_url: str | None = None
    publish_url: str | None = None
    tasks_service_account: str | None = None
    discover_window: float = Field(5.0, ge=0)


#: the concerns :class:`Settings` is made of; each ``TOPOCAST_*`` variable belongs to exactly one
SECTIONS: tuple[type[_Section], ...] = (
    StorageSettings, DiscoverySettings, RenderSettings, PublishSettings, AwsWiring, GcpWiring,
)  # fmt: skip


class Settings(StorageSettings, DiscoverySettings, RenderSettings, PublishSettings, AwsWiring, GcpWiring):
    """Every function's configuration: the sections above, read from ``TOPOCAST_*`` by :func:`settings_from_env`.

    Code that needs one concern takes that section's type (the publishers a ``PublishSettings``...);
    the composition roots hold the whole.
    """

    @property
    def uploads_uri(self) -> str:
        """Where on-prem collectors upload raw fabric dumps (their S3 events trigger discover)."""
        return f"s3://{self.bucket}/{self.prefix}/{self.cluster}/uploads"

    @property
    def ssm_path(self) -> str:
        return self.ssm_prefix or f"/topocast/{self.cluster}/slurm"

    def require(self, *names: str) -> None:
        missing = [n for n in names if not getattr(self, n)]
        if missing:
            env = {field: var for var, (field, _) in ENV_VARS.items()}
            raise TopocastError("missing configuration: " + ", ".join(env.get(n, n) for n in missing))


_LISTS = {"filters", "instance_types", "zones", "formats", "publishers", "gcp_zones", "gcp_labels", "netq_premises"}
_JSON = {"render_options", "k8s_options", "node_labels", "provider_settings"}
_LISTS |= {"ib_hcas", "ib_guids", "ib_switches"}  # the compute fabric's ports (providers/port_selection.py)
_LISTS |= {"overlays"}  # SOURCE:FIELD=VALUE,...: items are ','-separated, so overlays split on ';' only


def _split(value: str, field: str) -> list[str]:
    seps = ";" if field in ("filters", "gcp_labels", "overlays") else ";,"
    parts = [value]
    for sep in seps:
        parts = [p for chunk in parts for p in chunk.split(sep)]
    return [p.strip() for p in parts if p.strip()]


def settings_from_env(env: Mapping[str, str] | None = None) -> Settings:
    """Build :class:`Settings` from ``TOPOCAST_*`` variables; errors name the variable."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    for var, (field, _) in ENV_VARS.items():
        raw = env.get(var)
        if raw is None or raw == "":
            continue
        if field in _LISTS:
            data[field] = _split(raw, field)
        elif field in _JSON or (field == "reserved_nodes" and raw.lstrip().startswith("{")):
            try:
                check_json_depth(raw, var, TopocastError)
                data[field] = json.loads(raw)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise TopocastError(f"{var} is not valid JSON: {exc}") from None
        elif field == "ssm_advanced_tier":
            data[field] = raw.strip().lower() in {"1", "true", "yes", "on"}
        else:
            data[field] = raw
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        var = next((v for v, (f, _) in ENV_VARS.items() if f == field), field)  # name the env var, not the field
        raise TopocastError(f"bad configuration {var}: {describe(exc)}") from None
