"""What every renderer is, takes and returns.

A renderer is a :class:`Renderer`: a format's name, file, media type and target (``kind``), the
:class:`RenderOptions` fields it reads (``reads``), and a pure ``render(graph, options) -> Artifact``.
Each renderer module exposes one as ``RENDERER`` (a :class:`FormatRenderer`), registered by one line
in ``renderers/__init__.py``. Options are one pydantic model (validated once at the boundary: CLI flags,
env config); each renderer declares and reads only the fields it needs (``tests/test_renderer_registry.py``
checks each module's ``options.<field>`` reads against its ``reads``; ``topocast render --list-options``
prints them).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from topocast.errors import HostlistError
from topocast.model.hostlist import EXPAND_LIMIT, count
from topocast.model.names import check_topology_name

if TYPE_CHECKING:
    from topocast.model.graph import TopologyGraph

__all__ = [
    "DEFAULT_ACCELERATOR_KEY",
    "DEFAULT_SUBDOMAIN_KEY",
    "DEFAULT_TIER_PREFIX",
    "KUBERNETES_KINDS",
    "OBJECTS_WANTED",
    "Artifact",
    "BlockNameOptions",
    "FormatRenderer",
    "LabelScheme",
    "RenderOptions",
    "Renderer",
    "RendererKind",
    "SlinkyNaming",
    "SlinkyOptions",
    "TopologySpec",
    "parse_release",
    "topology_name_problem",
]

DEFAULT_TIER_PREFIX = "fabric.topograph.run/tier-"
DEFAULT_ACCELERATOR_KEY = "accelerator.topograph.run/domain"
DEFAULT_SUBDOMAIN_KEY = "accelerator.topograph.run/sub-domain"


class BlockNameOptions(BaseModel):
    """Name blocks after their nodes (Topograph ``blockName``): regexp + ``${1}`` format."""

    model_config = ConfigDict(extra="forbid")
    node_name_regexp: str
    format: str


class TopologySpec(BaseModel):
    """One named topology in a Slurm >= 25.05 ``topology.yaml``."""

    model_config = ConfigDict(extra="forbid")
    plugin: Literal["tree", "block", "flat", "topology/tree", "topology/block", "topology/flat"]
    nodes: list[str] | None = Field(None, description="Hostlist expressions of the partition's nodes.")
    block_sizes: list[int] | None = None
    block_name: BlockNameOptions | None = None
    cluster_default: bool = False

    @property
    def kind(self) -> str:
        return self.plugin.removeprefix("topology/")


def topology_name_problem(name: str) -> str | None:
    """Why ``name`` may not be a key of ``topologies``, as one line, or None.

    The rule is the one ``topocast pull`` and ``node-topology`` apply to the topology.yaml they read
    (:func:`topocast.model.names.check_topology_name`): a name they refuse must never be rendered, and a
    ``,`` or ``:`` in it would also split a Slinky spec (``x,y:s1:l1``) into parts that mean other things.
    """
    problem = check_topology_name(name)
    if problem is None:
        return None
    shown = repr(name) if len(name) <= 40 else f"{name[:40]!r}..."
    return f"topology {shown}: {problem} (topocast pull and node-topology refuse it)"


_RELEASE = re.compile(r"(\d{2})\.(\d{2})(?:\.\d{1,3})?")


def parse_release(text: str) -> tuple[int, int] | None:
    """``"26.05"`` / ``"26.05.5"`` -> ``(26, 5)``; anything else None (Slurm numbers releases YY.MM)."""
    m = _RELEASE.fullmatch(text.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


class LabelScheme(BaseModel):
    """Which Kubernetes label keys carry the topology (Topograph v1 keys by default)."""

    model_config = ConfigDict(extra="forbid")
    tier_prefix: str = DEFAULT_TIER_PREFIX
    #: explicit closest-first keys; when given, tiers beyond the list are not labelled
    fabric_keys: list[str] | None = None
    accelerator_key: str = DEFAULT_ACCELERATOR_KEY
    subdomain_key: str = DEFAULT_SUBDOMAIN_KEY


class SlinkyNaming(BaseModel):
    """How slurm-operator names the Slurm node that runs on a Kubernetes node (see renderers/slinky.py)."""

    model_config = ConfigDict(extra="forbid")
    mode: Literal["hostname", "hostname-override", "ordinal", "map"] = "hostname"
    #: ordinal mode: the NodeSet's name; Slurm nodes are ``<nodeset>-<ordinal>``
    nodeset: str | None = None
    #: ordinal mode: Kubernetes node -> ordinal of the NodeSet pod running there
    ordinals: dict[str, int] = Field(default_factory=dict)
    #: map mode: Kubernetes node -> Slurm node name
    names: dict[str, str] = Field(default_factory=dict)


class SlinkyOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    naming: SlinkyNaming = Field(default_factory=SlinkyNaming)
    namespace: str = "slurm"
    configmap: str = "slurm-config-extra"
    key: str = "topology.conf"
    #: which Slurm format goes under ``key``
    content: Literal["slurm-tree", "slurm-block", "slurm-yaml"] = "slurm-tree"


class RenderOptions(BaseModel):
    """Every knob a renderer may read. Defaults reproduce Topograph's defaults."""

    model_config = ConfigDict(extra="forbid")

    block_sizes: list[int] | None = Field(None, description="Slurm BlockSizes; inferred when None.")
    block_name: BlockNameOptions | None = Field(
        None,
        description="Name blocks after their nodes (Topograph blockName): node_name_regexp and a format "
        "with ${1}; None = block_names decides.",
    )
    topologies: dict[str, TopologySpec] | None = Field(
        None, description="Named topologies for slurm-yaml; None = one cluster-wide topology per plugin."
    )
    skeleton_only: bool = Field(False, description="Omit node lists (Slinky dynamic nodes).")
    labels: LabelScheme = Field(
        default_factory=LabelScheme,
        description="Which label keys carry the topology: tier_prefix, fabric_keys, accelerator_key, "
        "subdomain_key (Topograph's v1 keys by default).",
    )
    kueue_api_version: Literal["v1beta2", "v1beta1", "v1alpha1"] = Field(
        "v1beta2", description="apiVersion of the Kueue Topology object (the Kueue release installed decides)."
    )
    topology_object_name: str = Field("topocast", description="metadata.name of Kueue/KAI Topology objects.")
    slinky: SlinkyOptions = Field(
        default_factory=SlinkyOptions,
        description="The Slinky ConfigMap: naming (how slurm-operator names Slurm nodes), namespace, configmap, "
        "key, and content (the Slurm format under key).",
    )
    cluster_default: str = Field("tree", description="slurm-yaml without topologies: which one is default.")
    topograph_compat: bool = Field(
        False,
        description="Topograph's rules where topocast differs on purpose (BlockSizes base = smallest block, "
        "blocks named blockNNN by position, nodes without topology under a no-topology switch).",
    )
    block_names: Literal["domain", "position"] | None = Field(
        None,
        description="Slurm block names: 'domain' (from the domain's own ID, stable across generations) or "
        "'position' (blockNNN, Topograph's); None = 'position' with topograph_compat, else 'domain'.",
    )
    slurm_version: str | None = Field(
        None,
        description="The Slurm release the files are for (e.g. '26.05'): decides what happens to blocks smaller "
        "than the base block size; None = a file every release that reads the format accepts.",
    )
    no_topology_switch: bool = Field(
        False,
        description="slurm-tree: list nodes without fabric information under a pseudo-switch 'no-topology' "
        "(a second root) instead of leaving them out; always on with topograph_compat.",
    )
    leave_out_domains_from: Literal["degraded", "impaired"] | None = Field(
        None,
        description="Block topologies leave out the accelerator domains whose health (a domain or capacity_block "
        "record) is this bad or worse, instead of draining their nodes (docs/health.md); None = keep every domain.",
    )

    @field_validator("block_sizes")
    @classmethod
    def _sizes(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and not v:
            return None
        return v

    @field_validator("slurm_version")
    @classmethod
    def _release(cls, v: str | None) -> str | None:
        if v is not None and parse_release(v) is None:
            raise ValueError(f"slurm_version {v!r} is not a Slurm release such as '26.05' or '24.11.5'")
        return v

    @property
    def slurm_release(self) -> tuple[int, int] | None:
        """(major, minor) of :attr:`slurm_version`, or None when not set."""
        return parse_release(self.slurm_version) if self.slurm_version else None

    @property
    def positional_block_names(self) -> bool:
        return (self.block_names or ("position" if self.topograph_compat else "domain")) == "position"

    @property
    def keeps_no_topology_switch(self) -> bool:
        return self.no_topology_switch or self.topograph_compat

    @field_validator("topologies")
    @classmethod
    def _topology_names(cls, v: dict[str, TopologySpec] | None) -> dict[str, TopologySpec] | None:
        for name in v or {}:
            problem = topology_name_problem(name)
            if problem:
                raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _node_cap(self) -> RenderOptions:
        """One node-name cap across every topology's hostlists (counted, not expanded)."""
        total = 0
        for spec in (self.topologies or {}).values():
            try:
                total += count(spec.nodes or [])
            except HostlistError:
                continue  # the renderer names the topology and the bad hostlist
            if total > EXPAND_LIMIT:
                raise ValueError(f"topologies: the node lists expand to more than {EXPAND_LIMIT} names in total")
        return self


@dataclass(frozen=True)
class Artifact:
    """One rendered output: text to write, plus structured objects for API publishers."""

    format: str
    filename: str
    content: str
    media_type: str
    node_count: int
    objects: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.content.encode()).hexdigest()


#: False while :func:`topocast.renderers.render_many` renders for files only: a renderer whose API
#: objects are extra work (not the source of its text) may then leave ``Artifact.objects`` empty.
OBJECTS_WANTED: ContextVar[bool] = ContextVar("OBJECTS_WANTED", default=True)


#: what a format is for: a Slurm topology file, Kubernetes node labels, Kubernetes API objects
#: (Kueue / KAI Topology, Volcano HyperNodes, the Slinky ConfigMap), or a file for people and tools
RendererKind = Literal["slurm", "kubernetes-labels", "kubernetes-objects", "file"]
KUBERNETES_KINDS: tuple[RendererKind, ...] = ("kubernetes-labels", "kubernetes-objects")


class Renderer(Protocol):
    """One output format: what the registry holds (``renderers/__init__.py``) and every caller renders through."""

    @property
    def name(self) -> str:
        """The format's name (``--format``, ``TOPOCAST_FORMATS``, ``Artifact.format``)."""
        ...

    @property
    def filename(self) -> str: ...

    @property
    def media_type(self) -> str: ...

    @property
    def kind(self) -> RendererKind: ...

    @property
    def reads(self) -> tuple[str, ...]:
        """The :class:`RenderOptions` fields the render reads (its own options; the rest it ignores)."""
        ...

    def render(self, graph: TopologyGraph, options: RenderOptions) -> Artifact: ...


@dataclass(frozen=True)
class FormatRenderer:
    """A :class:`Renderer` made of a module's constants and its pure ``render`` function."""

    name: str
    filename: str
    media_type: str
    kind: RendererKind
    reads: tuple[str, ...]
    render: Callable[[TopologyGraph, RenderOptions], Artifact]

    def __post_init__(self) -> None:
        unknown = sorted(set(self.reads) - set(RenderOptions.model_fields))
        if unknown:  # a typo here would hide an option from --list-options
            raise TypeError(f"renderer {self.name!r} reads unknown options {unknown}")
