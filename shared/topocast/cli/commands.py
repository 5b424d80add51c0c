"""The ``topocast`` commands: the small ones here, one module per larger one (framework: :mod:`topocast.cli.parser`).

Adding a command (argparse underneath; nothing is imported until a command runs, so
``topocast render`` starts fast)::

    @command("node-topology", error_code=2)          # "events explain" makes a sub-command
    @option("--graph", type=Path, required=True, help="Graph JSON.")
    @option("--json", dest="as_json", flag=True, help="Print JSON.")
    def node_topology(a: Namespace) -> int | None:
        \"\"\"One line of help (the first docstring line).\"\"\"
        from topocast.node_topology_cli import run   # import inside: keeps startup lazy
        return run(a.graph, a.as_json)               # None or 0 = success, else the exit code

``option`` takes ``argparse.add_argument`` keywords; its extras: the destination is the
long flag's name (``--block-sizes`` -> ``a.block_sizes``), ``flag=True`` makes a boolean
``--x/--no-x`` pair (default False unless ``default=True``), ``many=True`` a repeatable
option collected into a list (empty when not given). A :class:`~topocast.errors.TopocastError`
raised by a command prints as one line and exits ``error_code`` (2 by default); so does an
``OSError`` (a file that cannot be read or written); ``raise fail("message", code)`` does the
same for a check in the command itself. ``group("events", "one line of help")`` declares a
command group; ``@command("events explain")`` then adds to it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import textwrap
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path
from typing import Any

from topocast.cli.parser import COMMANDS, PROG, STARTED, Handler, command, fail, group, option, run
from topocast.errors import TopocastError

__all__ = ["main"]


def _parse_sizes(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise fail(f"--block-sizes must be comma-separated integers, got {text!r}") from None


def _formats_epilog() -> str:
    from topocast.renderers import RENDERERS

    text = "formats: " + ", ".join(RENDERERS) + ", or all (every format; several formats need --out)"
    return textwrap.fill(text, 78, subsequent_indent="  ")


def _provider_names(*, connectors: bool = False) -> str:
    """The registered providers (``connectors``: those whose folder builds its SDK clients, so they run
    outside the functions' roots); the registry's tables, no provider module is imported."""
    from topocast.providers import CONNECTORS, PROVIDERS

    *first, last = [name for name in PROVIDERS if not connectors or name in CONNECTORS]
    return ", ".join(first) + " or " + last


def _default(text: str, field: str) -> str:
    """``text`` and the default of the controller's setting ``field`` (written once, in config.py)."""
    from topocast.agents.controller import ControllerSettings

    return f"{text} (default: {ControllerSettings.model_fields[field].default:g})."


def _live_max_share() -> float:
    from topocast.slurm.live import LIVE_MAX_SHARE  # only when pull's parser is built (its help)

    return LIVE_MAX_SHARE


def _kubernetes_formats_epilog() -> str:
    from topocast.renderers import kubernetes_formats  # imports those renderers: only when publish's parser is built

    text = "formats: " + ", ".join(kubernetes_formats()) + " (default: all of them)"
    return textwrap.fill(text, 78, subsequent_indent="  ")


# ----- commands ------------------------------------------------------------------------------


@command("render", epilog=_formats_epilog, fast_exit=True)
@option("--graph", type=Path, metavar="FILE", help="Normalized graph JSON ('-' = stdin).")
@option("--model", type=Path, metavar="FILE", help="Topograph simulation model YAML.")
@option(
    "--format",
    "-f",
    dest="fmt",
    many=True,
    metavar="FORMAT",
    help="Output format (repeatable, or 'all'). Default: slurm-tree.",
)
@option("--block-sizes", help="Slurm BlockSizes, e.g. 18,72 (inferred if omitted).")
@option("--options", dest="options_file", type=Path, help="JSON/YAML file with RenderOptions (topologies, labels...).")
@option("--skeleton", flag=True, help="Omit node lists (Slinky dynamic nodes).")
@option("--out", type=Path, metavar="DIR", help="Directory to write one file per format (and manifest.json).")
@option("--previous", type=Path, metavar="FILE", help="html: highlight what changed since this earlier graph JSON.")
@option(
    "--topograph-compat",
    flag=True,
    help="Topograph's rules where topocast differs (BlockSizes from the smallest block, blockNNN names, "
    "a no-topology switch).",
)
@option(
    "--list-options",
    nargs="?",
    const="all",
    metavar="FORMAT",
    help="Print the options (RenderOptions fields, for --options) each format reads, or FORMAT's, and exit.",
)
@option(
    "--slurm-version",
    metavar="RELEASE",
    help="The Slurm the files are for, e.g. 26.05: blocks below the base block size are kept from 25.05 on, "
    "left out before and when not given (the report says which).",
)
@option("--block-names", choices=["domain", "position"], help="Block names: the domain's ID (default) or blockNNN.")
@option(
    "--with-no-topology-switch",  # not --no-...: argparse's BooleanOptionalAction reads that as the negation
    dest="no_topology_switch",
    flag=True,
    help="slurm-tree: list nodes without fabric under a pseudo-switch no-topology (a second root) "
    "instead of leaving them out.",
)
def render(a: Namespace) -> None:
    """Render a graph or a Topograph model to scheduler configs."""
    from topocast.cli.render import TargetFlags, list_options, run_render

    if a.list_options is not None:
        sys.stdout.write(list_options(None if a.list_options == "all" else a.list_options))
        return
    sizes = _parse_sizes(a.block_sizes)
    fmts = a.fmt or ["slurm-tree"]
    # before any rendering: a 10k-node render takes seconds and warns per format, then could not be written
    if a.out is None and (len(fmts) > 1 or "all" in fmts):
        raise fail("several formats need --out DIR (one file per format)")
    if a.out is not None:
        _check_out_dir(a.out)
    target = TargetFlags(a.slurm_version, a.block_names, a.no_topology_switch)
    run_render(a.graph, a.model, fmts, sizes, a.options_file, a.skeleton, a.out, a.topograph_compat, a.previous, target)


def _check_out_dir(out: Path) -> None:
    """Refuse, before rendering, an ``--out DIR`` that cannot be one: a file there, a file on the way, or a
    directory this user may not write. Nothing is created here (a bad input later must leave nothing behind);
    what only the write can tell (a read-only file system for root) is the render's own one-line error."""
    if out.exists() and not out.is_dir():
        raise fail(f"--out {out}: is a file, not a directory (give a directory for the rendered files)")
    existing = next(p for p in (out, *out.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        raise fail(f"--out {out}: cannot create it: {existing} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "write in it" if existing == out else f"create it in {existing}"
        raise fail(f"--out {out}: cannot {where} (permission denied); choose a directory you can write")


_SLURM_ROOT_HELP = "Use the Slurm in this chroot/prefix (e.g. /var/cache/topocast/slurm-sid for 26.05)."


@command("validate-slurm")
@option("--topology", type=Path, required=True, help="topology.conf (tree or block) or topology.yaml to check.")
@option("--slurm-conf", type=Path, help="slurm.conf whose nodes the file must cover (default: a generated one).")
@option("--slurm-root", type=Path, help=_SLURM_ROOT_HELP)
@option("--slurmctld", help="slurmctld binary to use (inside --slurm-root if given).")
@option("--scontrol", help="scontrol binary to use (inside --slurm-root if given).")
def validate_slurm(a: Namespace) -> int:
    """Check a Slurm topology file with a throwaway slurmctld of the installed version, plus what Slurm accepts but
    should never ship."""
    from topocast.cli.slurm import run_validate_slurm

    return run_validate_slurm(
        a.topology, a.slurm_conf, slurm_root=a.slurm_root, slurmctld=a.slurmctld, scontrol=a.scontrol
    )


@command("node-topology")
@option("--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile, the instance metadata).")
@option("--source", required=True, help="The published topology file: ssm:///..., s3://, gs://, file://.")
@option("--hostname", help="Slurm node name (default: this host's short name).")
@option("--instance-id", help="Find the node by cloud instance ID (needs --graph).")
@option("--graph", help="The rendered graph.json (for --instance-id); '{generation}' = the source's generation.")
@option("--json", dest="as_json", flag=True, help="Print node, topology, source and sha256 as JSON.")
def node_topology(a: Namespace) -> None:
    """Print this node's Topology= value (for slurmd --conf "Topology=..." in cloud-node boot scripts)."""
    from topocast.cli.slurm import run_node_topology

    run_node_topology(a.source, hostname=a.hostname, instance_id=a.instance_id, graph_source=a.graph, as_json=a.as_json)


@command("schema")
@option("--out", type=Path, metavar="FILE", help="Write the JSON Schema to this file instead of stdout.")
def schema(a: Namespace) -> None:
    """Print the JSON Schema of the topology graph."""
    from topocast.model.graph import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if a.out:
        from topocast.safeio.files import write_out

        write_out(a.out, text)
    else:
        sys.stdout.write(text)


def _provider_flags() -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    from topocast.cli.discover import provider_flags

    return provider_flags()


@command("discover", more_options=_provider_flags)
@option("--provider", help=lambda: "Topology source (required): " + _provider_names() + ".")
@option("--cluster", default="default", help="Cluster name written into the graph.")
@option("--input", dest="inputs", type=Path, many=True, help="ibnetdiscover: output file (repeatable).")
@option("--compute-endpoint", help="gcp: Compute API endpoint override (tests, private endpoints).")
@option("--kubeconfig", help="k8s-labels: kubeconfig (default $KUBECONFIG).")
@option("--option", many=True, metavar="KEY=VALUE", help="A provider option (repeatable; JSON values parse).")
@option("--list-options", flag=True, help="Print the options of --provider (without it: every provider's) and exit.")
@option("--overlay", dest="overlays", many=True, help="Merge a second source: SOURCE:FIELD=VALUE,... (repeatable).")
@option("--previous", metavar="GRAPH", help="The last graph to build on (health record times; ibnetdiscover outages).")
@option("--out", type=Path, metavar="FILE", help="Write the graph JSON to this file instead of stdout.")
def discover(a: Namespace) -> None:
    """One-shot discovery with your own credentials: prints the normalized graph JSON.

    Each provider's own flags follow (``--list-options`` prints every option, with its flags and variable).
    """
    from topocast.cli.discover import discover_args, run_discover

    # never a silent guess: the wrong cloud's error would be the first thing seen
    if a.provider is None and not a.list_options:
        from topocast.providers import PROVIDERS

        raise fail(f"discover needs --provider, one of: {', '.join(PROVIDERS)}")
    run_discover(discover_args(vars(a)), a.out)


@command("publish", epilog=_kubernetes_formats_epilog)
@option("--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile, the instance metadata).")
@option("--graph", type=Path, help="Normalized graph JSON to publish.")
@option("--store", help="A deployment's store: s3://bucket/prefix or gs://bucket/prefix.")
@option("--cluster", default="default", help="--store: the cluster name.")
@option("--generation", type=int, help="--store: this generation (default: the latest).")
@option("--kubeconfig", help="kubeconfig (default $KUBECONFIG, ~/.kube/config).")
@option("--context", help="kubeconfig context.")
@option("--in-cluster", flag=True, help="Use the pod's service account (CronJob).")
@option(
    "--format", "-f", dest="fmt", many=True, metavar="FORMAT", help="A Kubernetes format (repeatable; listed below)."
)
@option("--options", dest="options_file", type=Path, help="RenderOptions JSON/YAML file.")
@option("--k8s-options", type=Path, help="KubernetesPublisherConfig JSON/YAML file.")
@option("--dry-run", flag=True, help="Read the cluster and print the plan; write nothing.")
@option("--server-dry-run", flag=True, help="Like --dry-run, writes sent with dryRun=All.")
@option("--qps", type=float, help="Client-side requests per second (default 50).")
@option("--burst", type=int, help="Client-side burst (default 100).")
@option("--concurrency", type=int, help="Node PATCHes in flight (default 8).")
@option("--json", dest="as_json", flag=True, help="Print the full report as JSON.")
@option(
    "--min-node-share",
    type=float,
    help="Refuse, applying nothing, when the cluster holds fewer of the graph's nodes (default 0.9; 0: off).",
)
def publish(a: Namespace) -> int:
    """Publish a graph (or a deployment's latest generation) to Kubernetes with your kubeconfig."""
    from topocast.cli.publish import PublishArgs, run_publish

    return run_publish(
        PublishArgs(
            a.graph,
            a.store,
            a.cluster,
            a.generation,
            a.kubeconfig,
            a.context,
            a.in_cluster,
            a.fmt,
            a.options_file,
            a.k8s_options,
            a.dry_run,
            a.server_dry_run,
            a.qps,
            a.burst,
            a.concurrency,
            a.as_json,
            a.min_node_share,
        )
    )


@command("controller")
@option("--cluster", default="default", help="Cluster name written into the graph.")
@option(
    "--provider",
    default="k8s-labels",
    help=lambda: "Topology source, one that builds its own clients: " + _provider_names(connectors=True) + ".",
)
@option("--option", many=True, metavar="KEY=VALUE", help="A provider option (repeatable; JSON values parse).")
@option("--namespace", default="topocast", help="Namespace of the Lease and the state ConfigMap.")
@option("--lease-name", default="topocast-controller", help="Lease for leader election (state: NAME-state).")
@option("--identity", help="This replica's identity in the Lease (default: the pod name, $POD_NAME, or random).")
@option("--kubeconfig", help="kubeconfig (default: in-cluster when run in a pod, else $KUBECONFIG).")
@option("--in-cluster", flag=True, help="Use the pod's service account.")
@option("--k8s-options", type=Path, help="KubernetesPublisherConfig JSON/YAML file (labels, client, formats).")
@option("--options", dest="options_file", type=Path, help="RenderOptions JSON/YAML file.")
@option("--quiet", type=float, help=lambda: _default("Debounce: seconds without a change before publishing", "quiet"))
@option(
    "--max-wait",
    type=float,
    help=lambda: _default("Debounce: publish at the latest this long after a change", "max_wait"),
)
@option("--leading-edge", flag=True, help="Publish a lone change after a quiet period at once.")
@option("--reconcile", type=float, default=900.0, help="Seconds between full reconciles.")
@option("--watch-window", type=int, default=10, help="Seconds per watch window (the API server's timeoutSeconds).")
@option(
    "--max-loss",
    type=float,
    help=lambda: _default("Guard: hold a graph that loses more than this share of nodes", "max_loss"),
)
@option("--listen", type=int, default=8080, help="Port of /healthz, /readyz and /metrics (0: none).")
@option(
    "--capacity-seconds", type=float, default=60.0, help="Seconds between capacity readings for /metrics (0: none)."
)
@option("--capacity-pods", flag=True, help="Count nodes with pods as allocated (LISTs every pod; RBAC: pods list).")
def controller(a: Namespace) -> int:
    """Run the pipeline inside a Kubernetes cluster: watch Nodes, debounce, discover, publish (docs/controller.md)."""
    import logging
    import socket

    from topocast.agents.controller import ControllerSettings, build_controller, serve_http
    from topocast.cli.publish import read_mapping
    from topocast.providers.options import parse_option_pairs
    from topocast.safeio.validation import validate

    k8s = read_mapping(a.k8s_options, "--k8s-options") if a.k8s_options else {}
    if "connection" not in k8s:
        in_pod = a.in_cluster or (not a.kubeconfig and os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount"))
        k8s["connection"] = {"auth": "in-cluster"} if in_pod else {"auth": "kubeconfig", "kubeconfig": a.kubeconfig}
    render = read_mapping(a.options_file, "--options") if a.options_file else {}
    identity = a.identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    # the debounce and guard knobs not given keep ControllerSettings' defaults (the functions', from config.py)
    given = {
        k: v for k, v in {"quiet": a.quiet, "max_wait": a.max_wait, "max_loss": a.max_loss}.items() if v is not None
    }
    settings = validate(
        ControllerSettings,
        {
            "cluster": a.cluster, "provider": a.provider, "provider_options": parse_option_pairs(a.option),
            "namespace": a.namespace, "lease_name": a.lease_name, "identity": identity, **given,
            "leading_edge": a.leading_edge, "reconcile_seconds": a.reconcile,
            "watch_window": a.watch_window, "k8s_options": k8s, "render_options": render,
            "capacity_seconds": a.capacity_seconds, "capacity_pods": a.capacity_pods,
        },
        "controller",
        TopocastError,
    )  # fmt: skip
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request is not a journal
    loop = build_controller(settings)
    if a.listen:
        serve_http(loop, a.listen)
    try:
        loop.run()
    except KeyboardInterrupt:
        loop.stop()
    return 0


group("events", "What the functions do with cloud events (docs/events.md).")


@command("events explain")
@option("delivery", type=Path, nargs="?", help="One delivery as a function receives it ('-' = stdin; default stdin).")
@option("--uploads", help="s3://bucket/<prefix>/<cluster>/uploads (S3 uploads).")
def events_explain(a: Namespace) -> int:
    """One JSON line per event: cloud, kind, action, instances, reason. Exit 2 if it would be dead-lettered."""
    from topocast.cli.events import explain

    return explain(a.delivery, a.uploads)


group("collect", "Collect raw fabric data on a fabric-attached host and upload it.")


@command("collect ibnetdiscover", error_code=1)
@option("--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile, the instance metadata).")
@option("--upload", required=True, help="s3://bucket/<prefix>/<cluster>/uploads or gs://...")
@option("--input", type=Path, help="Read this file instead of running the tool.")
@option("--command", default="ibnetdiscover", help="The command to run.")
@option("--host", help="Name of this collector (default: hostname).")
@option("--timeout", type=float, default=300.0, help="Seconds the command may take.")
@option("--host-regex", help="Regex with group 'host' for HCA descriptions (as discover's; checks names).")
@option("--ca", help="Discover through this HCA (ibnetdiscover -C), e.g. a compute HCA, not the storage one.")
@option("--ca-port", type=int, help="...and this port of it (ibnetdiscover -P).")
def collect_ibnetdiscover(a: Namespace) -> None:
    """Run ibnetdiscover (or read --input), upload it with its fabric checksum; unchanged fabrics upload nothing."""
    from topocast.agents.collect import collect_ibnetdiscover as collect

    _check_upload_host(a.host, a.upload)
    result = collect(
        a.input, a.upload, command=a.command, host=a.host, timeout=a.timeout, host_regex=a.host_regex,
        ca=a.ca, ca_port=a.ca_port, warn=lambda line: print(f"topocast: warning: {line}", file=sys.stderr),
    )  # fmt: skip
    state = "uploaded" if result.uploaded else "unchanged, not uploaded"
    print(f"{result.uri}: {state} (fabric sha256 {result.sha256[:16]}, {result.size} bytes)")


@command("collect nvlink", error_code=1)
@option("--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile, the instance metadata).")
@option("--upload", required=True, help="s3://bucket/<prefix>/<cluster>/uploads or gs://...")
@option("--input", type=Path, help="Read this nvidia-smi -q output instead of running it.")
@option("--command", default="nvidia-smi -q", help="The command to run.")
@option("--ibstat", type=Path, help="Read this ibstat output instead of running ibstat.")
@option("--host", help="Name of this host (default: hostname).")
@option("--timeout", type=float, default=120.0, help="Seconds each command may take.")
def collect_nvlink(a: Namespace) -> None:
    """Upload this GPU host's NVLink domain (nvidia-smi -q) and IB port GUIDs (ibstat); unchanged uploads nothing."""
    from topocast.agents.collect_nvlink import collect_nvlink as collect

    _check_upload_host(a.host, a.upload)
    result = collect(
        a.input, a.upload, command=a.command, ibstat_file=a.ibstat, host=a.host, timeout=a.timeout,
        warn=lambda line: print(f"topocast: warning: {line}", file=sys.stderr),
    )  # fmt: skip
    state = "uploaded" if result.uploaded else "unchanged, not uploaded"
    print(f"{result.uri}: {state} (sha256 {result.sha256[:16]}, {result.size} bytes)")


def _check_upload_host(host: str | None, upload: str) -> None:
    """``--upload`` and ``--host`` name the upload's key (``<prefix>/<host>/<file>``): a prefix with an
    empty, ``.`` or ``..`` part, or a host that is not one path segment, is bad input (exit 2), not a
    failed collection."""
    from topocast.agents.collect import split_uri
    from topocast.model.names import check_upload_name

    try:
        split_uri(upload)
        if host is not None:
            check_upload_name(host, "--host")
    except TopocastError as exc:
        raise fail(str(exc)) from None


def _share(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not between 0 and 1")
    return value


@command("pull")
@option("--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile, the instance metadata).")
@option("--source", required=True, help="ssm:///topocast/<cluster>/slurm/topology-tree.conf, s3://..., file://...")
@option("--dest", type=Path, required=True, help="Where Slurm reads it, e.g. /etc/slurm/topology.conf.")
@option("--reconfigure", flag=True, help="Run scontrol reconfigure and verify; roll back on failure.")
@option("--validate", flag=True, default=True, help="Check with a throwaway slurmctld before installing.")
@option("--slurm-conf", type=Path, help="slurm.conf (node list for validation, SLURM_CONF).")
@option("--state-file", type=Path, help="Remember the installed generation here.")
@option("--live", flag=True, help="Apply by scontrol update when only nodes are added or moved (Slurm >= 25.05).")
@option("--forbid-reconfigure", flag=True, help="With --live: never reconfigure; hold and exit 4 (held) with an ALARM.")
@option(
    "--live-max-share",
    type=_share,
    help=lambda: f"With --live: most nodes (share) that may move live (default: {_live_max_share():g}).",
)
@option("--slurm-root", type=Path, help=_SLURM_ROOT_HELP)
@option("--pointer-bucket", help="The only bucket an SSM envelope may point at (the publisher's).")
@option("--pointer-prefix", help="The key prefix such a pointer must be under.")
@option("--allow-node-loss", flag=True, help="Install even if the new file drops >10%% of the installed file's nodes.")
@option("--stale-after", type=int, default=10, help="Fail (exit 7) after this many runs in a row behind.")
@option("--json", dest="as_json", flag=True, help="One JSON object per run on stdout (docs/slurm-pull.md).")
@option("--verbose", flag=True, help="Also print `unchanged` (journal priority debug).")
@option("--check", "--dry-run", dest="check", flag=True, help="Say what a run would do; write nothing, change nothing.")
@option("--watch", flag=True, help="Keep running: pull on each publish notification (--queue-url / --subscription).")
@option("--queue-url", help="With --watch (AWS): the head node's SQS queue of Parameter Store change events.")
@option("--subscription", help="With --watch (GCP): projects/<p>/subscriptions/<s> of the bucket's notifications.")
@option("--fallback-seconds", type=float, default=60.0, help="With --watch: pull anyway after this long.")
@option(
    "--via", nargs=2, metavar=("slurmrestd", "URL"), help="Move nodes live through slurmrestd at URL (implies --live)."
)
@option("--token-from", help="With --via: the Slurm JWT (file, ssm:///, secretsmanager://, ARN, gsm://projects/..).")
def pull(a: Namespace) -> int:
    """Head-node pull agent: fetch, verify sha256, validate, install atomically, reconfigure or update live.

    With --reconfigure, --live or --via, every run (unchanged included) also reads the controller and
    repairs nodes it places elsewhere than the installed file.

    Exit status: 0 installed/unchanged/skipped, 1 failed, 2 usage or source error, 3 refused, 4 held,
    5 rolled back, 6 installed but state not saved, 7 source stale, 8 controller drift repaired,
    9 controller left inconsistent with the file (docs/slurm-pull.md). With --check: the exit status the
    run would have (0 would install or nothing to do, 3 would refuse, 4 would hold)."""
    from topocast.cli.pull import run_pull

    if a.check and a.watch:
        raise fail("--check runs once: not with --watch")
    if a.watch:  # topocast.agents.pull_watch: this command's single pull, run on each notification
        from topocast.agents.pull_watch import run_watch

        once = Namespace(**{**vars(a), "watch": False})
        return run_watch(a.queue_url, a.subscription, a.fallback_seconds, lambda: run_pull(once), a.source)
    return run_pull(a)


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is smaller than the minimum {minimum}")
        return value

    parse.__name__ = "integer"
    return parse


def _seconds(text: str) -> float:
    value = float(text)
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds above 0")
    return value


_seconds.__name__ = "seconds"


#: cloud -> (module, extra that provides it) the demo imports: the simulators (``topocast_sim``) are not in
#: the wheel (a checkout's editable install has them) and need the ``demo`` extra (moto, gcp-storage-emulator)
DEMO_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "aws": (("topocast_sim.demo", "demo"), ("moto", "demo"), ("boto3", "aws")),
    "gcp": (("topocast_sim.gcp_demo", "demo"), ("gcp_storage_emulator", "demo"), ("functions_framework", "gcp")),
}


def missing_demo_extra(cloud: str) -> str | None:
    """One line naming the extra to install when the demo of ``cloud`` cannot run here, else None."""
    import importlib

    for module, extra in DEMO_NEEDS.get(cloud, ()):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing = exc.name or module
            if missing.partition(".")[0] == "topocast_sim":  # the wheel leaves the simulators out
                return (
                    f"`topocast demo --cloud {cloud}` needs the simulators ({missing}), which only a checkout has: "
                    f"git clone the topocast repository, then pip install -e '.[{extra}]' in it"
                )
            # a checkout (the simulators are there): its own editable install with the extra
            return f"`topocast demo --cloud {cloud}` needs {missing}: pip install -e '.[{extra}]' in the checkout"
    return None


@command("demo")
@option("--cloud", default="aws", help="Which pipeline to run: aws or gcp.")
@option("--nodes", type=_count(1), default=256, help="GPU instances in the simulated cluster.")
@option("--events", type=_count(0), help="Instance events in the burst (default: per cloud).")
@option("--out", type=Path, metavar="DIR", help="Output directory (default: out/demo or out/demo-gcp).")
@option("--report", type=Path, help="JSON report path (default: OUT/report.json).")
@option("--quiet", type=_seconds, default=2.0, help="Debounce quiet window in seconds (more than 0).")
@option(
    "--watch",
    action="store_true",
    help="The head node's agent runs pull --watch during the run, woken by the publish's change notification "
    "(SSM change event -> SQS / object finalize -> Pub/Sub), instead of one pull after the pipeline settled.",
)
@option(
    "--leading-edge",
    action="store_true",
    help="Render the first change after an idle period at once (TOPOCAST_DEBOUNCE_LEADING_EDGE).",
)
def demo(a: Namespace) -> int:
    """Run the whole pipeline locally on a simulated cloud account (no credentials needed)."""
    if a.cloud not in ("aws", "gcp"):
        raise fail(f"--cloud must be aws or gcp, got {a.cloud!r}")
    if why := missing_demo_extra(a.cloud):
        raise fail(why)
    from topocast_sim.demo import run_demo, summary

    target = a.out or Path("out/demo" if a.cloud == "aws" else "out/demo-gcp")
    if a.cloud == "aws":
        result = run_demo(
            a.nodes, a.events, target, a.report, quiet=a.quiet, watch=a.watch, leading_edge=a.leading_edge
        )
    else:
        from topocast_sim.gcp_demo import run_gcp_demo

        result = run_gcp_demo(a.nodes, a.events, target, a.report, a.quiet, watch=a.watch, leading_edge=a.leading_edge)
    print(summary(result, target))
    return 0 if result["pull"]["ok"] and result["idle"] else 1


@command("synth")
@option("--nodes", type=_count(1), required=True, help="How many nodes (N).")
@option(
    "--tiers",
    type=_count(1),
    help="Switch tiers above the nodes (1 = leaves only; default: 3, or as many as give one root switch).",
)
@option("--nodes-per-leaf", type=_count(1), default=18, help="Nodes under each leaf switch.")
@option("--fanout", type=_count(1), default=8, help="Children of each upper switch.")
@option("--domain-size", type=_count(0), default=72, help="Nodes per NVLink domain (0 = no domains).")
@option("--name-pattern", help="Node names, str.format with {i} (default: gpu-{i} zero-padded to 6 digits).")
@option("--missing", type=_share, default=0.0, help="Share of nodes without topology (seeded, --seed).")
@option("--seed", type=int, default=7, help="Seed of --missing.")
@option("--cluster", default="synthetic", help="Cluster name written into the graph.")
@option("--format", dest="fmt", help="graph (JSON) or model (Topograph YAML) (default: from -o's suffix, else graph).")
@option("--out", type=Path, metavar="FILE", help="Write to this file instead of stdout (.yaml/.yml: a model).")
def synth(a: Namespace) -> None:
    """Write a synthetic fat-tree cluster as a graph JSON (render --graph, diff, publish) or a Topograph model
    YAML (render --model): test data at any size."""
    from topocast.cli.synth import run_synth
    from topocast.model.synth import tiers_for_one_root

    tiers = a.tiers or tiers_for_one_root(a.nodes, a.nodes_per_leaf, a.fanout)
    shape = {"levels": tiers, "nodes_per_leaf": a.nodes_per_leaf, "fanout": a.fanout}
    shape |= {"domain_size": a.domain_size, "name_pattern": a.name_pattern, "missing_fraction": a.missing}
    shape |= {"seed": a.seed, "cluster": a.cluster}
    print(run_synth(a.nodes, shape, a.fmt, a.out), file=sys.stderr)


@command("package", error_code=1)
@option("--out", type=Path, metavar="DIR", default=Path("dist"), help="Output directory.")
@option("--cloud", default="all", help="aws, gcp or all.")
@option("--python-version", default="3.12", help="Function runtime Python (Terraform: lambda_runtime).")
@option("--platform", default="x86_64", help="Lambda architecture x86_64 or arm64, or a pip platform tag.")
@option(
    "--agent",
    flag=True,
    help="Build the head-node agent instead: OUT/topocast-agent.pyz, one file from this installation, "
    "no package index (--cloud: the SDKs of its sources).",
)
def package(a: Namespace) -> None:
    """Build one deployable archive per function: dist/aws/<stage>.zip (Lambda), dist/gcp/<stage>.zip (sources);
    with --agent, the head node's agent as one file: dist/topocast-agent.pyz."""
    if a.agent:
        from topocast.cli.agent_package import build_agent

        path = build_agent(a.out, a.cloud)
        print(
            f"agent: {path} ({path.stat().st_size / 1e6:.1f} MB; runs with python{sys.version_info[0]}."
            f"{sys.version_info[1]} on {sys.platform})"
        )
        return
    from topocast.cli.package import build_packages

    for name, path in build_packages(a.out, a.cloud, a.python_version, a.platform).items():
        print(f"{name}: {path} ({path.stat().st_size / 1e6:.1f} MB)")


group("health", "Fabric health on the map: what is broken, what it affects, and the scheduler told (docs/health.md).")


@command("health show")
@option("graph", metavar="GRAPH", help="A graph: a file, '-' (stdin), or s3://, gs://, file:// URI.")
@option("--json", dest="as_json", flag=True, help="Print JSON.")
def health_show(a: Namespace) -> int:
    """List each fabric object that is not ok, its source, reason and since when, and the nodes it affects."""
    from topocast.cli.health import run_show

    return run_show(a.graph, a.as_json)


@command("health apply")
@option("graph", metavar="GRAPH", help="A graph: a file, '-' (stdin), or s3://, gs://, file:// URI.")
@option("--target", choices=["slurm", "kubernetes"], default="slurm", help="The scheduler to tell.")
@option("--state-file", type=Path, required=True, help="The damper's state between runs (JSON; created).")
@option("--scontrol", default="scontrol", help="scontrol, or a command prefix ('chroot /srv/sid scontrol').")
@option("--slurm-conf", type=Path, help="slurm.conf of the controller (SLURM_CONF).")
@option("--via", nargs=2, metavar=("slurmrestd", "URL"), help="slurm: drain and resume through slurmrestd at URL.")
@option("--token-from", help="With --via: the Slurm JWT (file, ssm:///, secretsmanager://, ARN, gsm://projects/..).")
@option("--kubeconfig", type=Path, help="kubernetes: this kubeconfig (default: TOPOCAST_K8S_* settings).")
@option("--act-from", choices=["degraded", "impaired"], default="degraded", help="Least severe state acted on.")
@option("--act-after", type=int, default=1, help="Observations in a row an object must be bad before acting.")
@option("--undo-after", type=int, default=1, help="Observations in a row an object must be good before undoing.")
@option("--max-share", type=_share, default=0.1, help="Most of the cluster topocast holds drained (0-1).")
@option("--exclude", many=True, help="Nodes (hostlist) never drained or resumed; repeatable.")
@option("--pause-file", type=Path, help="While this file exists, plan and report but change nothing.")
@option("--dry-run", flag=True, help="Plan and report; change nothing, keep the state file as it was.")
@option("--json", dest="as_json", flag=True, help="Print the report as JSON.")
def health_apply(a: Namespace) -> int:
    """Drain (Slurm) or taint (Kubernetes) the nodes a broken fabric object affects; undo only topocast's own."""
    from topocast.cli.health import run_apply
    from topocast.model.health_plan import HealthPolicy

    try:
        policy = HealthPolicy(a.act_from, a.act_after, a.undo_after, a.max_share)
    except ValueError as exc:
        raise fail(str(exc)) from None
    from topocast.cli.health import KubernetesScheduler, SlurmScheduler

    if a.target == "slurm":
        from topocast.slurm.rest import updater_from_cli

        rest = updater_from_cli(a.via, a.token_from)
        scheduler: Any = SlurmScheduler(a.scontrol, a.slurm_conf, rest.client if rest is not None else None)
    else:
        scheduler = KubernetesScheduler(a.kubeconfig)
    return run_apply(
        a.graph, scheduler, state_file=a.state_file, policy=policy, exclude=a.exclude, pause_file=a.pause_file,
        dry_run=a.dry_run, as_json=a.as_json,
    )  # fmt: skip


@command("health report-faulty")
@option("graph", metavar="GRAPH", help="A graph: a file, '-' (stdin), or s3://, gs://, file:// URI.")
@option("--project", required=True, help="The GCP project of the reservations.")
@option("--state-file", type=Path, required=True, help="What was reported (for the rate limit; JSON, created).")
@option("--send", flag=True, help="Really call reportFaulty (default: dry run, audit lines only).")
@option("--max-per-hour", type=int, default=2, help="Most reports in any hour.")
@option("--cooldown-hours", type=float, default=24.0, help="One sub-block is reported at most once per this.")
@option("--audit-log", type=Path, help="Append each audit line (JSON) to this file too.")
@option("--compute-endpoint", help="Compute API endpoint (private endpoint, or a local fake).")
def health_report_faulty(a: Namespace) -> int:
    """GCP: report the graph's unhealthy reservation sub-blocks as faulty (opt-in, rate-limited, audited)."""
    from topocast.cli.health import run_report_faulty

    return run_report_faulty(
        a.graph, project=a.project, state_file=a.state_file, send=a.send, max_per_hour=a.max_per_hour,
        cooldown_hours=a.cooldown_hours, audit_log=a.audit_log, compute_endpoint=a.compute_endpoint,
    )  # fmt: skip


@command("diff", fast_exit=True)
@option("--region", help="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile, the instance metadata).")
@option(
    "old",
    metavar="OLD",
    help="The earlier graph JSON, topology.conf or topology.yaml: a file, '-' (stdin), or s3://, gs://, file:// URI.",
)
@option("new", metavar="NEW", help="The later one, of the same kind, the same ways.")
@option("--json", dest="as_json", flag=True, help="Print the differences as JSON.")
def diff(a: Namespace) -> int:
    """Show nodes added, removed, moved (old -> new switches) and domains changed between two graphs or two Slurm
    topology files (topology.conf tree or block, topology.yaml); exit 1 if they differ."""
    from topocast.cli.diff import run_diff

    return run_diff(a.old, a.new, a.as_json)


# ----- score, capacity, metrics, history (docs/score.md) ------------------------------------------------
_GRAPH_HELP = "The graph: a graph JSON file or an s3://, gs://, file:// generation URI."
_STORE_HELP = "A deployment's store (s3://bucket/prefix, gs://bucket/prefix, file:///dir or a directory)."


@command("score")
@option("--graph", help=_GRAPH_HELP)
@option("--store", help=_STORE_HELP + " The graph is the generation live when the job started.")
@option("--cluster", default="default", help="--store: the cluster name.")
@option("--nodes", help="The job's nodes as a hostlist, e.g. gpu-[001-016].")
@option("--slurm-job", help="'scontrol show job -d ID' text or slurmrestd job JSON ('-' = stdin).")
@option("--pods", help="kubectl get pods -o json (the workload's pods) or a Kueue Workload's JSON ('-' = stdin).")
@option("--at", help="--store: score against the graph live at this time (default: the job's start).")
@option("--job-name", help="The job's name in the report (default: what the job input says; '(hostlist)').")
@option("--json", dest="as_json", flag=True, help="Print the report as JSON.")
def score(a: Namespace) -> int:
    """Score a job's placement: NVLink domains and switches per tier spanned against the fewest possible."""
    from topocast.cli.score import GraphSource, run_score

    source = GraphSource(a.graph, a.store, a.cluster)
    return run_score(source, a.nodes, a.slurm_job, a.pods, a.at, a.as_json, a.job_name)


def _capacity_options(fn: Handler) -> Handler:
    shared_options: list[tuple[tuple[str, ...], dict[str, Any]]] = [
        (("--graph",), {"help": _GRAPH_HELP}),
        (("--store",), {"help": _STORE_HELP + " The latest generation."}),
        (("--cluster",), {"default": "default", "help": "--store: the cluster name."}),
        (("--slurm-nodes",), {"help": "'scontrol show nodes' text or slurmrestd /nodes JSON ('-' = stdin)."}),
        (("--k8s-nodes",), {"help": "kubectl get nodes -o json (cordoned or not Ready = drained)."}),
        (
            ("--k8s-pods",),
            {"help": "With --k8s-nodes: kubectl get pods -A -o json (a node running one = allocated)."},
        ),
        (("--block-sizes",), {"help": "Slurm BlockSizes of the published topology.conf (inferred if omitted)."}),
        (
            ("--out",),
            {"type": Path, "metavar": "FILE", "help": "Write to this file (atomically) instead of stdout."},
        ),
    ]
    for flags, kwargs in reversed(shared_options):
        fn = option(*flags, **kwargs)(fn)
    return fn


@command("capacity")
@_capacity_options
@option("--json", dest="as_json", flag=True, help="Print the report as JSON.")
@option("--html", type=Path, metavar="FILE", help="Also write the fabric view with an occupancy panel to FILE.")
def capacity(a: Namespace) -> int:
    """Free, allocated and drained nodes per NVLink domain, leaf and block; the largest job that fits; fragmentation."""
    from topocast.cli.score import GraphSource, run_capacity

    source = GraphSource(a.graph, a.store, a.cluster)
    sizes = _parse_sizes(a.block_sizes)
    return run_capacity(source, a.slurm_nodes, a.k8s_nodes, a.k8s_pods, sizes, a.as_json, False, a.out, a.html)


@command("metrics")
@_capacity_options
def metrics(a: Namespace) -> int:
    """The capacity figures as Prometheus text (node-exporter textfile collector: --out DIR/topocast.prom)."""
    from topocast.cli.score import GraphSource, run_capacity

    source = GraphSource(a.graph, a.store, a.cluster)
    sizes = _parse_sizes(a.block_sizes)
    return run_capacity(source, a.slurm_nodes, a.k8s_nodes, a.k8s_pods, sizes, False, True, a.out)


@command("history")
@option("--store", required=True, help=_STORE_HELP)
@option("--cluster", default="default", help="The cluster name.")
@option("--node", help="One node's changes (with --at: where it was then).")
@option("--at", help="A time (ISO 8601, e.g. 2026-12-01T10:00Z; UTC without a zone): the generation live then.")
@option("--out", type=Path, metavar="FILE", help="With --at: write the graph live then to this file.")
@option("--json", dest="as_json", flag=True, help="Print JSON.")
def history(a: Namespace) -> int:
    """The stored generations over time: when nodes joined, moved or left; where a node was; the graph at a time."""
    from topocast.cli.history import run_history

    return run_history(a.store, a.cluster, a.node, a.at, a.out, a.as_json)


def main() -> None:  # console-script entry point
    from topocast.cli.journal import journal_stderr

    journal_stderr()  # under systemd: a priority on every line, repeats counted
    started = COMMANDS.get(tuple(sys.argv[1:2]))
    if started is not None and started.fast_exit:
        # A file-in, file-out process that ends with os._exit: its objects live until the end, so a
        # cyclic collection only walks them (~0.1 s per full pass over a 100k-node graph's objects).
        gc.disable()
        # For the same reason the views renderers share are opened here and left open: the command's
        # own block joins this one, and closing it would free the graph and every view one by one.
        from topocast.model.fabric import shared_views

        views = shared_views()
        views.__enter__()
    try:
        code = run()
    except (RecursionError, MemoryError) as exc:  # a last line of defence: the inputs are capped where read
        print(f"{PROG}: error: input too large or nested too deeply ({type(exc).__name__})", file=sys.stderr)
        code = 2
    if STARTED and STARTED[-1].fast_exit:
        # Tearing down a 100k-node graph object by object costs ~0.2 s of CPU for nothing: the
        # command's files are written and closed, so flush the standard streams and leave.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
