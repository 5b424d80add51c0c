"""Function configuration, read once from environment variables (``TOPOCAST_*``).

Terraform sets these on every function (see ``infra/terraform/modules/*``); the
one-shot CLI builds the same model from flags. Every variable of a setting is listed in
:data:`ENV_VARS` with its meaning; a provider's own variables (``TOPOCAST_FILTERS``,
``TOPOCAST_GCP_ZONES``, ...) are declared next to its options (its ``Options`` model, see
:mod:`topocast.providers.options`), and :func:`env_table` lists both, so the wiring test can check
that what Terraform passes is exactly what the code reads.

Lists are separated by ``;`` (EC2 filter values may contain commas), JSON
values start with ``{``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from topocast.errors import TopocastError
from topocast.renderers.base import RenderOptions
from topocast.safeio.validation import check_json_depth, describe

__all__ = [
    "DEFAULT_DEBOUNCE_LEADING_EDGE",
    "DEFAULT_DEBOUNCE_MAX_WAIT",
    "DEFAULT_DEBOUNCE_QUIET",
    "DEFAULT_FORMATS",
    "DEFAULT_GUARD_MAX_LOSS",
    "ENV_VARS",
    "SECTIONS",
    "AwsWiring",
    "DiscoverySettings",
    "GcpWiring",
    "PublishSettings",
    "RenderSettings",
    "Settings",
    "StorageSettings",
    "env_table",
    "provider_env_vars",
    "settings_from_env",
    "with_slurm_version",
]

DEFAULT_FORMATS = ["slurm-tree", "slurm-block", "slurm-yaml", "k8s-labels", "graph", "html"]
#: the debounce settings' defaults, written once: :class:`RenderSettings` and
#: :class:`topocast.ports.debounce.DebouncePolicy` both take them from here (Terraform's variables match)
DEFAULT_DEBOUNCE_QUIET = 15.0
DEFAULT_DEBOUNCE_MAX_WAIT = 120.0
DEFAULT_DEBOUNCE_LEADING_EDGE = False
#: the publish guard's limit (TOPOCAST_GUARD_MAX_LOSS): the share of published nodes one publish may lose
DEFAULT_GUARD_MAX_LOSS = 0.10

#: env var -> (Settings field, description) of every setting; with the providers' own variables, :func:`env_table`
ENV_VARS: dict[str, tuple[str, str]] = {
    "TOPOCAST_CLUSTER": ("cluster", "cluster name (graph, keys, parameter paths)"),
    "TOPOCAST_PROVIDER": ("provider", "topology source: a registered provider (topocast discover --list-options)"),
    "TOPOCAST_PROVIDER_OPTIONS": (
        "provider_settings",
        "the provider's options as a JSON object (over its own variables, see env_table)",
    ),
    "TOPOCAST_BUCKET": ("bucket", "S3/GCS bucket for graphs and rendered artifacts"),
    "TOPOCAST_PREFIX": ("prefix", "key prefix inside the bucket"),
    "TOPOCAST_FULL_SCAN_THRESHOLD": ("full_scan_threshold", "instance events in one batch above which discover scans"),
    "TOPOCAST_FOLLOW_RECHECKS": (
        "follow_rechecks",
        "re-reads of a VM through host maintenance / a restart until it is steady, at most (0: one read decides)",
    ),
    "TOPOCAST_FOLLOW_INTERVAL_SECONDS": ("follow_interval", "seconds between those re-reads (SQS: at most 900)"),
    "TOPOCAST_FORMATS": ("formats", "formats render writes (';' or ',')"),
    "TOPOCAST_RENDER_OPTIONS": ("render_options", "RenderOptions as JSON"),
    "TOPOCAST_SLURM_VERSION": (
        "slurm_version",
        "the Slurm release the files are for, e.g. 26.05 (render_options.slurm_version): what happens to blocks "
        "below the base block size; unset: files every release accepts",
    ),
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
    # ----- GCP (topocast.gcp; see docs/gcp.md) -----
    "TOPOCAST_GCP_PROJECT": ("gcp_project", "GCP project ID that owns the cluster's VMs (and the bucket)"),
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
    #: TOPOCAST_PROVIDER_OPTIONS: options by name, over the provider's own variables
    provider_settings: dict[str, Any] = Field(default_factory=dict)
    #: the raw ``TOPOCAST_*`` variables no setting owns: the providers' own (``TOPOCAST_FILTERS``, ...),
    #: read by the configured provider's Options model only when it is built (so a function's cold start
    #: imports no provider module to read its settings)
    provider_env: dict[str, str] = Field(default_factory=dict)
    #: merged sources read after the provider (providers/overlay.py grammar; parsed when it is built)
    overlays: list[str] = Field(default_factory=list)

    def provider_options(self) -> dict[str, Any]:
        """The options of the configured provider (``ProviderInputs.options``): what its Options model
        takes from its variables, then ``TOPOCAST_PROVIDER_OPTIONS`` over them."""
        from topocast.providers import registered_options_model
        from topocast.providers.options import env_options

        model = registered_options_model(self.provider)
        own = env_options(model, self._variable) if model is not None else {}
        return {**own, **self.provider_settings}

    def _variable(self, name: str) -> str | None:
        """A provider's variable: a setting's own (TOPOCAST_GCP_PROJECT), else the raw value kept."""
        field = ENV_VARS[name][0] if name in ENV_VARS else None
        if field is not None and field in type(self).model_fields:
            value = getattr(self, field)
            return None if value is None else str(value)
        return self.provider_env.get(name)


class RenderSettings(_Section):
    """What render writes, and when (debounce)."""

    formats: list[str] = Field(default_factory=lambda: list(DEFAULT_FORMATS))
    render_options: RenderOptions = Field(default_factory=RenderOptions)
    #: TOPOCAST_SLURM_VERSION: the target Slurm, one variable for what render_options.slurm_version says
    slurm_version: str | None = None
    debounce_quiet: float = Field(DEFAULT_DEBOUNCE_QUIET, gt=0)
    debounce_max_wait: float = Field(DEFAULT_DEBOUNCE_MAX_WAIT, gt=0)
    #: off by default: a burst then costs one render, not two; on, a lone change skips the quiet window
    debounce_leading_edge: bool = DEFAULT_DEBOUNCE_LEADING_EDGE

    @model_validator(mode="after")
    def _one_slurm_version(self) -> RenderSettings:
        version, given = self.slurm_version, self.render_options.slurm_version
        if version is not None:
            if given is not None and given != version:
                raise ValueError(
                    f"TOPOCAST_SLURM_VERSION ({version}) and TOPOCAST_RENDER_OPTIONS slurm_version ({given}) disagree"
                )
            with_slurm_version(self.render_options, version)  # a bad release fails here, when settings load
        return self

    @model_validator(mode="after")
    def _known_formats(self) -> RenderSettings:
        """A misspelt TOPOCAST_FORMATS fails when settings load, not at the first render (no module is imported)."""
        from topocast.renderers import RENDERERS

        unknown = [f for f in self.formats if f not in RENDERERS]
        if unknown or not self.formats:
            named = f"unknown format(s) {', '.join(map(repr, unknown))}" if unknown else "no format"
            raise ValueError(f"TOPOCAST_FORMATS: {named}; known: {', '.join(RENDERERS)}")
        return self

    @model_validator(mode="after")
    def _quiet_within_max_wait(self) -> RenderSettings:
        if self.debounce_quiet > self.debounce_max_wait:
            raise ValueError(
                f"TOPOCAST_DEBOUNCE_QUIET_SECONDS ({self.debounce_quiet:g}) must be at most "
                f"TOPOCAST_DEBOUNCE_MAX_WAIT_SECONDS ({self.debounce_max_wait:g})"
            )
        return self


def with_slurm_version(options: RenderOptions, version: str | None) -> RenderOptions:
    """``options`` for the target Slurm ``version`` (TOPOCAST_SLURM_VERSION), when one is given."""
    if version is None:
        return options
    return RenderOptions.model_validate({**options.model_dump(exclude_unset=True), "slurm_version": version})


class PublishSettings(_Section):
    """Where publish pushes to, and the blast-radius guard."""

    publishers: list[str] = Field(default_factory=lambda: ["ssm"])
    ssm_prefix: str | None = None
    ssm_advanced_tier: bool = False
    guard_max_loss: float = Field(DEFAULT_GUARD_MAX_LOSS, ge=0, le=1)
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
    """Which project the GCP functions serve and how they reach the APIs and each other."""

    gcp_project: str | None = None
    compute_endpoint: str | None = None
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


_LISTS = {"formats", "publishers"}
_JSON = {"render_options", "k8s_options", "provider_settings"}
_LISTS |= {"overlays"}  # SOURCE:FIELD=VALUE,...: items are ','-separated, so overlays split on ';' only


def provider_env_vars() -> dict[str, str]:
    """Every registered provider's own variables (its Options model's ``OptionSpec.env`` and
    ``ENV_OBJECT``), with what they mean: ``"gcp: zones to list ..."``. Imports the provider modules."""
    from topocast.providers import provider_models
    from topocast.providers.options import OptionSpec, option_specs

    users: dict[str, list[str]] = {}
    text: dict[str, str] = {}
    for name, model in provider_models().items():
        specs = [(s.env, s.env_help or (f.description or "")) for _, f, s in option_specs(model) if s.env]
        whole = getattr(model, "ENV_OBJECT", None)
        if isinstance(whole, OptionSpec) and whole.env:
            specs.append((whole.env, whole.env_help))
        for var, meaning in specs:
            if var not in users or name not in users[var]:
                users.setdefault(var, []).append(name)
            text.setdefault(var, meaning)
    return {var: f"{'/'.join(users[var])}: {text[var]}" for var in users}


def env_table() -> dict[str, tuple[str, str]]:
    """Every ``TOPOCAST_*`` variable the functions read -> (the Settings field holding it, description):
    :data:`ENV_VARS`, then each provider's own variables (held raw in ``provider_env``)."""
    own = {var: ("provider_env", text) for var, text in provider_env_vars().items() if var not in ENV_VARS}
    return {**ENV_VARS, **own}


def _split(value: str, field: str) -> list[str]:
    seps = ";" if field == "overlays" else ";,"
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
        elif field in _JSON:
            try:
                check_json_depth(raw, var, TopocastError)
                data[field] = json.loads(raw)
            except (json.JSONDecodeError, RecursionError) as exc:
                raise TopocastError(f"{var} is not valid JSON: {exc}") from None
        elif field == "ssm_advanced_tier":
            data[field] = raw.strip().lower() in {"1", "true", "yes", "on"}
        else:
            data[field] = raw
    # kept raw: which of them a provider reads is its Options model's business (see provider_options)
    data["provider_env"] = {k: v for k, v in env.items() if k.startswith("TOPOCAST_") and k not in ENV_VARS and v}
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        var = next((v for v, (f, _) in ENV_VARS.items() if f == field), field)  # name the env var, not the field
        where = f" {var}" if var else ""  # a check across variables names them in its message
        raise TopocastError(f"bad configuration{where}: {describe(exc)}") from None
