"""Check a topology.conf (tree or block) or topology.yaml before it ships.

``topocast validate-slurm --topology FILE [--slurm-conf FILE] [--slurm-root DIR]``
calls :func:`validate_topology_file`; the install step calls :func:`validate_topology_text`.

Two independent opinions are combined. Our own parser (:mod:`topofile`,
:mod:`topoyaml`) catches what slurmctld refuses *and* what it accepts but should
never ship; a scratch slurmctld started with the candidate file (free port,
scratch state dir, nodes at 127.0.0.1) gives the ground truth for the Slurm
that is installed (or the one given: a prefix/chroot, or explicit binaries).

Which controller can judge what is decided by its version (``slurmctld -V``):
topology/tree any, topology/block >= 23.02, topology.yaml >= 25.05. A file the
controller is too old for gets one message saying so, never its parse errors.

A file passes only if slurmctld logs no ``fatal:``/``error:`` line for it and
``scontrol show topology`` shows exactly what we parsed (every switch with
the same child switches and nodes below it, every block with the same nodes):
where two parsers disagree, the file means something other than it says.
A controller failure that has nothing to do with the file (cannot start at
all) raises :class:`SlurmControllerError` rather than calling the file bad.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from topocast.errors import TopocastError
from topocast.model.hostlist import compact_str
from topocast.slurm.conffile import slurm_conf_nodes
from topocast.slurm.controller import SlurmController, SlurmControllerError, SlurmInstall
from topocast.slurm.scontrol import Command, parse_show_blocks, parse_show_topology, show_topology_text
from topocast.slurm.topofile import OLDER_SLURM_ONLY, TopologyFile, check_structure, parse_topology
from topocast.slurm.topoyaml import TopologyYaml, looks_like_yaml, parse_topology_yaml

__all__ = [
    "MIN_VERSION",
    "ValidationResult",
    "compare_shown",
    "format_version",
    "parse_candidate",
    "structure_messages",
    "validate_topology_file",
    "validate_topology_text",
    "verify_shown",
]

_TOPOLOGY_WORDS = re.compile(r"topology|switch|block", re.IGNORECASE)
#: what a scratch controller logs when it tries to reach its (imaginary) nodes, e.g. 26.05 with 20,000
#: nodes: ``error: _fwd_tree_thread: Abandon tree forward by n1, ret_cnt:1 forward.cnt:1249``
_NODES_UNREACHABLE = re.compile(r"_fwd_tree_thread|Abandon tree forward")
#: 22.05 logs nodes of slurm.conf that no switch holds as ``error: WARNING: switches lack access to 2 nodes: ...``;
#: the coverage check already warns about them (topocast's tree leaves out nodes without fabric)
_NOT_IN_TREE = re.compile(r"WARNING: switches lack access to \d+ nodes")
_PLACEHOLDER = "topocast-placeholder-node"

#: oldest Slurm that reads each kind of file
MIN_VERSION: dict[str, tuple[int, int]] = {"tree": (0, 0), "block": (23, 2), "yaml": (25, 5)}
_WHAT = {"tree": "topology/tree", "block": "topology/block", "yaml": "topology.yaml"}


@dataclass
class ValidationResult:
    ok: bool
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    summary: str = ""
    #: "tree", "block", "yaml" or "empty"
    kind: str = "empty"
    #: a scratch slurmctld read the file (False: structural checks only)
    controller_checked: bool = False
    #: slurmctld's fatal/error/warning lines for this file
    log: list[str] = field(default_factory=list)
    #: switch (tree), block or topology (yaml) names the file defines, in file order
    names: list[str] = field(default_factory=list)
    #: ``slurmctld -V`` of the controller that checked it, e.g. "26.05"
    version: str | None = None


def format_version(version: tuple[int, int] | None) -> str:
    return f"{version[0]}.{version[1]:02d}" if version else "unknown version"


def parse_candidate(text: str, source: str) -> TopologyFile | TopologyYaml:
    """topology.yaml (by name or content) or topology.conf, parsed."""
    return parse_topology_yaml(text, source) if looks_like_yaml(text, source) else parse_topology(text, source)


def validate_topology_file(
    path: Path,
    slurm_conf: Path | None = None,
    *,
    controller: bool | None = None,
    timeout: float = 10.0,
    install: SlurmInstall | None = None,
) -> ValidationResult:
    """Validate a topology file on disk. See :func:`validate_topology_text`."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise TopocastError(f"{path}: cannot read topology file ({exc.strerror})") from None
    return validate_topology_text(
        data, slurm_conf, source=str(path), controller=controller, timeout=timeout, install=install
    )


def validate_topology_text(
    content: str | bytes,
    slurm_conf: Path | None = None,
    *,
    source: str = "topology.conf",
    controller: bool | None = None,
    timeout: float = 10.0,
    install: SlurmInstall | None = None,
) -> ValidationResult:
    """Validate topology.conf or topology.yaml content.

    ``slurm_conf``: the operator's slurm.conf; its NodeName lines are the nodes
    the file must cover. Without it the nodes named in the file are used.
    ``controller``: True = require a slurmctld run (a controller too old for the
    file is then an error), False = structure only, None = run one if installed.
    ``install``: which Slurm to run (default: the one on this host).
    """
    if isinstance(content, bytes):
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError as exc:
            return ValidationResult(ok=False, errors=[f"{source}: not UTF-8 text ({exc})"], summary="unreadable")
    else:
        text = content
    defined = None
    if slurm_conf is not None:
        defined = slurm_conf_nodes(slurm_conf)
        if not defined:
            raise TopocastError(f"{slurm_conf}: no NodeName= lines found (Include files are not followed)")
    parsed = parse_candidate(text, source)
    if isinstance(parsed, TopologyFile):
        check_structure(parsed, defined)
        kind: str = parsed.kind
        names = list(parsed.switches if parsed.kind == "tree" else parsed.blocks)
    else:
        kind = "yaml"
        names = [t.name for t in parsed.topologies]
        if defined is not None:
            known = set(defined)
            unknown = [n for n in parsed.node_names() if n not in known]
            if unknown:
                parsed.warnings.append(
                    f"{source}: {len(unknown)} node(s) are not defined in slurm.conf: {compact_str(unknown)}"
                )
    result = ValidationResult(
        ok=False,
        errors=list(parsed.errors),
        warnings=list(parsed.warnings),
        summary=parsed.summary(),
        kind=kind,
        names=names,
    )
    nodes = defined if defined is not None else parsed.node_names()
    _controller_check(result, parsed, text, nodes, controller, timeout, install)
    result.ok = not result.errors
    return result


def structure_messages(files: Iterable[tuple[str, str] | TopologyFile]) -> list[str]:
    """What ``validate-slurm`` prints about each ``(file name, content)``, without a controller.

    Its warnings (``warning: ...`` there) as they are and its errors as ``invalid: ...``; for the
    fabric view, which shows them next to the graph they come from. A file may also come as the
    :class:`TopologyFile` its text reads as (:func:`~topocast.slurm.topofile.topology_from_records`).
    """
    out: list[str] = []
    for file in files:
        if isinstance(file, TopologyFile):
            check_structure(file)  # all validate_topology_text does with a file read, without slurm.conf
            warnings, errors = file.warnings, file.errors
        else:
            name, content = file
            result = validate_topology_text(content, source=name, controller=False)
            warnings, errors = result.warnings, result.errors
        out += [*warnings, *(f"invalid: {e}" for e in errors)]
    return out


def _controller_check(
    result: ValidationResult,
    parsed: TopologyFile | TopologyYaml,
    text: str,
    nodes: list[str],
    want: bool | None,
    timeout: float,
    install: SlurmInstall | None,
) -> None:
    if want is False or result.kind == "empty":
        return  # an empty file: the structural error says more than "No switches configured"
    install = install or SlurmInstall.find()
    version = install.version()
    if version is None:
        if want:
            hint = "slurmctld -V fails in that root" if install.root else "apt-get install slurmctld, or --slurm-root"
            raise TopocastError(f"cannot run {install.describe()} ({hint}); cannot run the check")
        result.warnings.append("slurmctld not found: checked the file's structure only")
        return
    result.version = format_version(version)
    if version >= (25, 5):
        result.warnings = [w for w in result.warnings if not w.endswith(OLDER_SLURM_ONLY)]
    needed = MIN_VERSION[result.kind]
    if version < needed:
        message = (
            f"{parsed.source}: slurmctld here is {result.version} ({install.describe()}); "
            f"{_WHAT[result.kind]} needs Slurm >= {format_version(needed)}, so only the file's structure was checked"
        )
        (result.errors if want else result.warnings).append(message)
        return
    yaml_file = isinstance(parsed, TopologyYaml)
    ctl = SlurmController(
        nodes or [_PLACEHOLDER],  # slurmctld needs one node to start
        topology=text,
        # a 20,000-node controller took 21-72 s to start on a loaded 2-core machine: allow 10 s + 1 s per 200 nodes
        start_timeout=max(timeout, 10 + len(nodes) / 200),
        cluster="topocast-check",
        install=install,
        topology_file="topology.yaml" if yaml_file else "topology.conf",
        topology_plugin="topology/block" if result.kind == "block" else "topology/tree",
    )
    # slurmctld names its scratch copy of the file; point the reader at the real one instead
    scratch = [str(ctl.topology_path), install.inside(ctl.topology_path)]

    def relabel(lines: Iterable[str]) -> list[str]:
        out = []
        for line in lines:
            for path in scratch:
                line = line.replace(path, parsed.source)
            out.append(line)
        return out

    try:
        with ctl:
            log = [line for line in relabel(ctl.log_lines()) if _PLACEHOLDER not in line]
            if isinstance(parsed, TopologyYaml):
                shown = {t.name: ctl.show_topology_text(t.name) for t in parsed.topologies if t.file}
            else:
                shown = {"": ctl.show_topology_text()}
    except SlurmControllerError as exc:
        exc.log = relabel(exc.log)
        _controller_refused(result, parsed.source, exc)
        return
    finally:
        ctl.stop()
    result.controller_checked = True
    result.log = log
    for line in log:
        low = line.lower()
        # error: lines are failure (Slurm read something other than the file says); warnings stay warnings.
        # The scratch controller's nodes do not exist: failing to reach them says nothing about the file.
        failed = ("error:" in low or "fatal:" in low) and not _NODES_UNREACHABLE.search(line)
        failed = failed and not _NOT_IN_TREE.search(line)
        (result.errors if failed else result.warnings).append(f"slurmctld log: {line}")
    if isinstance(parsed, TopologyYaml):
        for topo in parsed.topologies:
            if topo.file is not None:
                result.errors.extend(compare_shown(topo.file, shown[topo.name], nodes, f"topology {topo.name!r}: "))
    else:
        result.errors.extend(compare_shown(parsed, shown[""], nodes))
    result.summary += f"; slurmctld {result.version} started with it and shows the same"
    if result.errors:
        result.summary = result.summary.replace(" and shows the same", "")


def _descendants(topo: TopologyFile) -> dict[str, set[str]]:
    memo: dict[str, set[str]] = {}

    def below(name: str, path: frozenset[str]) -> set[str]:
        if name in memo:
            return memo[name]
        sw = topo.switches[name]
        nodes = set(sw.nodes)
        for child in sw.children:
            if child in topo.switches and child not in path:
                nodes |= below(child, path | {child})
        memo[name] = nodes
        return nodes

    return {name: below(name, frozenset({name})) for name in topo.switches}


def compare_shown(topo: TopologyFile, shown_text: str, defined: Iterable[str], prefix: str = "") -> list[str]:
    """Differences between our parse of ``topo`` and ``scontrol show topology`` (nodes limited to ``defined``)."""
    known = set(defined)
    problems: list[str] = []
    if topo.kind == "tree":
        shown = parse_show_topology(shown_text)
        expected = {name: nodes & known for name, nodes in _descendants(topo).items()}
        missing, extra = sorted(set(expected) - set(shown)), sorted(set(shown) - set(expected))
        if missing or extra:
            problems.append(
                f"{prefix}slurmctld shows other switches than the file defines "
                f"(missing: {', '.join(missing) or '-'}; unexpected: {', '.join(extra) or '-'})"
            )
        for name in sorted(set(expected) & set(shown)):
            got = shown[name]
            if set(got.nodes) != expected[name]:
                problems.append(
                    f"{prefix}switch {name!r}: slurmctld puts {compact_str(sorted(got.nodes)) or '-'} below it, "
                    f"the file {compact_str(sorted(expected[name])) or '-'}"
                )
            want_children = {c for c in topo.switches[name].children if c in topo.switches}
            if set(got.switches) != want_children:
                problems.append(
                    f"{prefix}switch {name!r}: slurmctld shows child switches {','.join(sorted(got.switches)) or '-'}, "
                    f"the file {','.join(sorted(want_children)) or '-'}"
                )
    elif topo.kind == "block":
        blocks = parse_show_blocks(shown_text)
        missing, extra = sorted(set(topo.blocks) - set(blocks)), sorted(set(blocks) - set(topo.blocks))
        if missing or extra:
            problems.append(
                f"{prefix}slurmctld shows other blocks than the file defines "
                f"(missing: {', '.join(missing) or '-'}; unexpected: {', '.join(extra) or '-'})"
            )
        for name in sorted(set(topo.blocks) & set(blocks)):
            want_nodes = set(topo.blocks[name].nodes) & known
            if set(blocks[name].nodes) != want_nodes:
                problems.append(
                    f"{prefix}block {name!r}: slurmctld puts {compact_str(sorted(blocks[name].nodes)) or '-'} in it, "
                    f"the file {compact_str(sorted(want_nodes)) or '-'}"
                )
        base = topo.block_sizes[0] if topo.block_sizes else None
        sizes = {b.size for b in blocks.values() if b.size is not None}
        if base is not None and sizes and sizes != {base}:
            problems.append(f"{prefix}slurmctld uses base block size {sorted(sizes)}, the file BlockSizes={base}")
    return problems


def verify_shown(
    text: str, scontrol: Command, env: dict[str, str] | None, defined: list[str], source: str
) -> list[str]:
    """Differences between ``text`` and what the controller shows (every topology of a yaml file)."""
    parsed = parse_candidate(text, source)
    problems: list[str] = []
    if isinstance(parsed, TopologyYaml):
        for t in parsed.topologies:
            if t.file is not None:
                shown = show_topology_text(scontrol, env, name=t.name)
                problems += compare_shown(t.file, shown, defined, f"topology {t.name!r}: ")
    else:
        problems += compare_shown(parsed, show_topology_text(scontrol, env), defined)
    return problems


def _controller_refused(result: ValidationResult, source: str, exc: SlurmControllerError) -> None:
    fatal = [line for line in exc.log if "fatal:" in line]
    about_file = any(_TOPOLOGY_WORDS.search(line) for line in fatal)
    if not about_file and not result.errors:
        # Not the file's fault as far as anyone can tell: do not call it invalid.
        last = fatal[-1] if fatal else (exc.log[-1] if exc.log else "no log output")
        raise SlurmControllerError(f"could not run a scratch slurmctld to check {source}: {exc} ({last})", exc.log)
    result.controller_checked = True
    result.log = list(exc.log)
    reason = fatal[-1] if fatal else str(exc)
    result.errors.append(f"{source}: slurmctld refuses to start with this file: {reason}")
    result.errors.extend(f"slurmctld log: {line}" for line in exc.log if line != reason)
