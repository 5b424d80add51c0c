"""``topocast discover``: run one provider's discovery once and print the normalized graph.

The same provider code the functions run, built through the same registry
(:func:`topocast.providers.build_provider`), with the operator's own credentials
(AWS: the standard environment, profiles, ``AWS_ENDPOINT_URL``; GCP:
application-default credentials; NetQ: a credentials file or secret ARN, resolved by
:mod:`topocast.providers.secrets`). Its SDK clients are built by the provider's own connector
(``topocast.providers.CONNECTORS``) from :func:`shell_means`, bucket uploads included (the connector
asks the shell's ``read_uploads``): nothing here names a provider or a service.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from topocast.errors import ProviderError
from topocast.model.graph import TopologyGraph, dump_graph
from topocast.model.placement import notes_report, set_aside_report
from topocast.providers import (
    PROVIDERS,
    DiscoveryResult,
    ProviderInputs,
    ShellMeans,
    build_provider,
    connect,
    provider_models,
    registered_options_model,
)
from topocast.providers.options import describe_options, option_specs, parse_option_pairs
from topocast.providers.secrets import read_local_text, read_secret
from topocast.safeio.files import write_out


@dataclass
class DiscoverArgs:
    provider: str = "aws"
    cluster: str = "default"
    #: the shell's own inputs: ibnetdiscover dumps, the kubeconfig and Compute endpoint of its clients
    inputs: list[Path] = field(default_factory=list)
    kubeconfig: str | None = None
    compute_endpoint: str | None = None
    overlays: list[str] = field(default_factory=list)
    #: the last graph (a file, '-' or a stored generation URI) the discovery builds on, or None
    previous: str | None = None
    # every provider: --option KEY=VALUE (its Options model validates them); --list-options prints them
    option: list[str] = field(default_factory=list)
    list_options: bool = False
    #: the providers' dedicated flags (:func:`provider_flags`) by argparse destination
    flags: dict[str, Any] = field(default_factory=dict)


def discover_args(parsed: Mapping[str, Any]) -> DiscoverArgs:
    """The parsed ``topocast discover`` command line: the shell's own flags, the providers' flags in ``flags``."""
    own = set(DiscoverArgs.__dataclass_fields__) - {"flags"}
    flags = {k: v for k, v in parsed.items() if k not in own and k not in ("out", "debug")}
    return DiscoverArgs(**{k: v for k, v in parsed.items() if k in own}, flags=flags)


def flag_dest(flag: str) -> str:
    """The argparse destination of a provider flag (``--ib-hca`` -> ``ib_hca``): one per flag name, so
    providers sharing a flag share its value."""
    return flag.lstrip("-").replace("-", "_")


def provider_flags() -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """The dedicated flags the registered providers' Options models declare, as ``option(...)`` arguments:
    one per flag name, its help naming each provider that takes it (``gcp: cluster label; k8s-labels: ...``)."""
    helps: dict[str, dict[str, list[str]]] = {}  # flag -> help text -> the providers it is theirs
    kinds: dict[str, dict[str, Any]] = {}
    for name, model in provider_models().items():
        for _, fld, spec in option_specs(model):
            kind: dict[str, Any] = {"dest": flag_dest(spec.flags[0])} if spec.flags else {}
            if spec.many:
                kind["many"] = True
            elif fld.annotation is bool:
                kind["flag"] = True
            if spec.path:
                kind["type"] = Path
            if spec.metavar:
                kind["metavar"] = spec.metavar
            for flag in spec.flags:
                if kinds.setdefault(flag, kind) != kind:
                    raise ProviderError(f"provider {name!r} declares {flag} unlike another provider: {kind}")
                text = (spec.help or fld.description or "").rstrip(".")
                helps.setdefault(flag, {}).setdefault(text, []).append(name)
    return [
        ((flag,), {**kinds[flag], "help": "; ".join(f"{'/'.join(who)}: {t}" for t, who in helps[flag].items()) + "."})
        for flag in kinds
    ]


def flag_options(model: type[BaseModel], flags: Mapping[str, Any]) -> dict[str, Any]:
    """The options ``model`` takes from its dedicated flags (every one it declares, given or not, as
    argparse left it: None, [] or False when not given), converted by ``OptionSpec.from_flag``."""
    out: dict[str, Any] = {}
    for key, _, spec in option_specs(model):
        if not spec.flags:
            continue
        value = flags.get(flag_dest(spec.flags[0]))
        if isinstance(value, Path):
            value = str(value)
        out[key] = spec.from_flag(spec.flags[0], value) if spec.from_flag is not None else value
    return out


def _require(name: str, model: type[BaseModel], a: DiscoverArgs, options: Mapping[str, Any]) -> None:
    """What ``topocast discover --provider NAME`` cannot run without, named as its flags."""
    if getattr(model, "NEEDS_INPUT", False) and not a.inputs:
        raise ProviderError(f"--provider {name} needs --input FILE (repeatable)")
    required = [(key, spec.required) for key, _, spec in option_specs(model) if spec.required]
    if any(options.get(key) in (None, "", []) for key, _ in required):
        raise ProviderError(f"--provider {name} needs {' and '.join(text for _, text in required)}")


def _local_files(paths: list[Path]) -> Callable[[], dict[str, bytes]]:
    def read() -> dict[str, bytes]:
        out = {}
        for p in paths:
            try:
                out[str(p)] = p.read_bytes()
            except OSError as exc:
                raise ProviderError(f"{p}: cannot read ibnetdiscover output ({exc.strerror})") from None
        return out

    return read


def shell_means(a: DiscoverArgs) -> ShellMeans:
    """What this shell hands every provider's connector: its flags, the Kubernetes reads and bucket uploads
    (the SDKs bring their own credentials chains: AWS environment and profiles, application-default, OCI config)."""
    from topocast.agents.collect import uploads_reader
    from topocast.k8s.nodes_client import KubeListers

    return ShellMeans(
        compute_endpoint=a.compute_endpoint,
        kubeconfig=a.kubeconfig,
        kubernetes=KubeListers(),
        read_uploads=uploads_reader(lambda text: print(f"topocast: warning: {text}", file=sys.stderr)),
    )


def provider_inputs(a: DiscoverArgs) -> ProviderInputs:
    """The flags as the registry's :class:`ProviderInputs` (the functions build theirs from settings): the
    provider's dedicated flags (its Options model says which), then ``--option`` pairs over them."""
    try:
        model = registered_options_model(a.provider)
    except ImportError:
        model = None  # build_provider says why the provider is not available
    options = flag_options(model, a.flags) if model is not None else {}
    if model is not None:
        _require(a.provider, model, a, options)
    options.update(parse_option_pairs(a.option))
    cluster = a.cluster
    default_cluster = getattr(model, "default_cluster", None)
    if cluster == "default" and default_cluster is not None:
        cluster = default_cluster(options) or cluster
    clients = connect(a.provider, shell_means(a), options)  # the provider's own connector (its folder's)
    return ProviderInputs(cluster, options, clients, _local_files(a.inputs), read_local_text, read_secret)


def print_set_aside(graph: TopologyGraph) -> None:
    """``topocast: warning: N set aside ...`` and a bounded sample of ``name: reason`` lines on stderr."""
    lines = set_aside_report(graph)
    if lines:
        print(f"topocast: warning: {lines[0]}", file=sys.stderr)
        print("\n".join(lines[1:]), file=sys.stderr)


def list_options(provider: str | None = None) -> str:
    """The options of ``provider`` (default: every registered provider), from its ``Options`` model."""
    if provider is not None and provider not in PROVIDERS:
        raise ProviderError(f"--provider {provider!r} is not a provider; choose one of: {', '.join(sorted(PROVIDERS))}")
    lines: list[str] = []
    for name in [provider] if provider is not None else sorted(PROVIDERS):
        try:
            model = registered_options_model(name)
        except ImportError as exc:
            lines.append(f"{name}: not available here ({exc})")
            continue
        if model is None:
            lines.append(f"{name}: takes no options")
        else:
            lines.extend(describe_options(name, model))
    return "\n".join(lines) + "\n"


def run_discover(args: DiscoverArgs, out: Path | None) -> DiscoveryResult | None:
    if args.list_options:
        sys.stdout.write(list_options(args.provider))
        return None
    previous = None
    if args.previous:
        from topocast.cli.diff import load_source

        previous = load_source(args.previous)
    provider = build_provider(args.provider, provider_inputs(args), args.overlays, shell_means(args))
    result = provider.discover_full(previous)
    for warning in result.warnings:
        print(f"topocast: warning: {warning}", file=sys.stderr)
    print_set_aside(result.graph)
    for line in notes_report(result.graph):
        print(f"topocast: note: {line.strip()}" if not line.startswith("  ") else line, file=sys.stderr)
    text = dump_graph(result.graph)
    if out is None:
        sys.stdout.write(text)
    else:
        write_out(out, text)
    calls = ", ".join(f"{k}={v}" for k, v in sorted(result.api_calls.items()))
    print(
        f"topocast: {len(result.graph.nodes)} node(s), {len(result.graph.nodes_without_topology())} without "
        f"topology{f', {len(result.graph.unplaced)} set aside' if result.graph.unplaced else ''}"
        f"{f' ({calls})' if calls else ''}",
        file=sys.stderr,
    )
    return result
