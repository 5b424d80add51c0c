"""The error contract of every command, walked from the parser (a new command is covered by itself).

For each subcommand and each flag that takes a file (``type=Path``, or a kubeconfig, credentials or CA
file, a positional input): the file missing, empty, binary, truncated, list-shaped, a mapping of
mistyped fields, nested past any parser's depth, one 200 KB line and a directory;
for each flag that takes a cloud URI: ``s3://``, ``gs://`` and ``ssm://`` on a machine with no region,
no credentials and no kubeconfig. What a user sees must be a few lines at most, never a traceback nor
an ``internal error`` (a bug: the contract test found it), and the exit code one of the command's
own (never :data:`~topocast.cli.parser.EXIT_INTERNAL`).

The commands run in this process (``cli_runner.invoke``); every case must end in seconds (a walk that
reached a network or a slurmctld would time out here and fail).
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import invoke

from topocast.cli.parser import COMMANDS, EXIT_INTERNAL, Command
from topocast.providers import PROVIDERS

#: the bad contents of a file-taking flag (None: the path does not exist; "dir": a directory)
BAD_INPUTS: dict[str, bytes | str | None] = {
    "missing": None,
    "empty": b"",
    "binary": b"\xd3\x00\xff\xfe binary \x89PNG\r\n",
    "truncated": b'{"schema_version": 1, "cluster": "c", "nodes": [{"name": "n1", "fab',
    "list": b"[1, 2, 3]\n",
    "mistyped": b'{"apiVersion": [], "clusters": 5, "nodes": "n1", "type": [1], "contexts": {"a": 1}, "Records": 7}',
    # past topocast's depth cap (64) and Python's recursion limit (1,000); not deeper: topology.yaml's
    # pure-Python YAML scanner is quadratic in flow depth (3,000 levels cost 2-3 s per case)
    "nested": b"[" * 1_200,
    "long_line": b"a" * 200_000,  # one line past csv's field limit (128 KiB)
    "dir": "dir",
}
#: a cloud URI a flag may name, on a machine without region or credentials
URIS = ("s3://bucket/prefix/c1/x.json", "gs://bucket/prefix/c1/x.json", "ssm:///topocast/c1/slurm/topology-tree.conf")

#: options that take a file without ``type=Path`` (strings: they may also be a URI or an ARN)
FILE_DESTS = {"kubeconfig", "credentials", "ca_file", "graph", "old", "new", "delivery", "source"}
#: score / capacity / metrics: scheduler output files ('-' = stdin)
FILE_DESTS |= {"slurm_job", "pods", "slurm_nodes", "k8s_nodes", "k8s_pods"}
#: options that take a cloud location
URI_DESTS = {"source", "store", "upload", "uploads", "graph", "old", "new"}
#: options whose value is a URI even for a local file
FILE_URI_DESTS = {"source"}

#: what a command needs besides the flag under test to reach the code reading it (``{good}``: a valid
#: graph JSON, ``{ib}``: ibnetdiscover output, ``{conf}``: a topology.conf, ``{d}``: a scratch directory);
#: by flag, else by command; a command not listed gets ``{good}`` for every required option
CONTEXT: dict[tuple[str, ...], dict[str, list[str]]] = {
    ("discover",): {
        "": ["--provider", "ibnetdiscover", "--input", "{ib}"],
        "kubeconfig": ["--provider", "k8s-labels"],
        "credentials": ["--provider", "netq", "--url", "http://127.0.0.1:9"],
        "ca_file": ["--provider", "netq", "--url", "https://127.0.0.1:9", "--credentials", "{creds}"],
    },
    ("render",): {"": ["--graph", "{good}"], "graph": [], "model": []},
    ("publish",): {"": ["--graph", "{good}", "--dry-run"], "graph": ["--dry-run"], "store": ["--dry-run"]},
    ("pull",): {"": ["--source", "file://{conf}", "--dest", "{d}/etc/topology.conf", "--no-validate"]},
    ("node-topology",): {
        "": ["--source", "file://{conf}", "--hostname", "n1"],
        "graph": ["--source", "file://{conf}", "--instance-id", "i-1"],
    },
    ("validate-slurm",): {"": ["--topology", "{conf}", "--slurmctld", "/nonexistent/slurmctld"]},
    ("diff",): {"": ["{good}", "{good}"], "old": ["{good}"], "new": ["{good}"]},
    ("collect", "ibnetdiscover"): {"": ["--upload", "s3://bucket/p/c1/uploads", "--input", "{ib}"]},
    ("demo",): {"": ["--nodes", "2", "--events", "2", "--quiet", "0.1"]},
    ("synth",): {"": ["--nodes", "3"]},
    ("score",): {
        "": ["--graph", "{good}", "--nodes", "n1"],
        "slurm_job": ["--graph", "{good}"],
        "pods": ["--graph", "{good}"],
        "store": ["--nodes", "n1"],
    },
    ("capacity",): {
        "": ["--graph", "{good}", "--slurm-nodes", "{states}"],
        "slurm_nodes": ["--graph", "{good}"],
        "k8s_nodes": ["--graph", "{good}"],
        "store": ["--slurm-nodes", "{states}"],
        "k8s_pods": ["--graph", "{good}", "--k8s-nodes", "{k8s_nodes}"],
    },
    ("history",): {"": ["--store", "{d}"]},
}
CONTEXT[("metrics",)] = CONTEXT[("capacity",)]
#: flags not walked, with the reason (each costs a whole run before the flag matters)
NOT_WALKED = {
    ("demo", "report"): "written after a whole demo run; its --out is walked",
    ("package", "out"): "builds every function archive (pip) before writing; tests/test_package.py",
}
#: commands whose walk runs a whole pipeline (marked slow)
SLOW = {("demo",)}
#: positionals come first on the command line (their CONTEXT entry fills the others)
POSITIONAL_FIRST = {("diff",): ("old", "new")}


@dataclass(frozen=True)
class Case:
    path: tuple[str, ...]
    flag: str
    value: str
    argv: tuple[str, ...]

    @property
    def id(self) -> str:
        return f"{' '.join(self.path)} {self.flag}={self.value}"


def _actions(cmd: Command) -> list[argparse.Action]:
    return [a for a in cmd.parser()._actions if a.dest not in ("help", "debug")]


def _takes_file(action: argparse.Action) -> bool:
    return action.type is Path or action.dest in FILE_DESTS


def _context(cmd: Command, action: argparse.Action) -> list[str]:
    table = CONTEXT.get(cmd.path)
    if table is not None:
        return list(table.get(action.dest, table.get("", [])))
    out: list[str] = []  # a command nobody described: a valid graph for every other required option
    for other in _actions(cmd):
        if other.dest != action.dest and (other.required or not other.option_strings):
            out += [*other.option_strings[-1:], "{good}"]
    return out


def _argv(cmd: Command, action: argparse.Action, value: str) -> tuple[str, ...]:
    context = _context(cmd, action)
    flag = action.option_strings[-1] if action.option_strings else None
    if flag is None:  # a positional: at its place among the command's positionals
        order = POSITIONAL_FIRST.get(cmd.path, (action.dest,))
        context.insert(order.index(action.dest), value)
        return (*cmd.path, *context)
    drop = {flag}
    cleaned: list[str] = []
    skip = False
    for i, item in enumerate(context):  # the flag under test replaces the context's value of it
        if skip:
            skip = False
            continue
        if item in drop and i + 1 < len(context):
            skip = True
            continue
        cleaned.append(item)
    return (*cmd.path, *cleaned, flag, value)


def cases() -> Iterator[Case]:
    for path, cmd in sorted(COMMANDS.items()):
        for action in _actions(cmd):
            if (path[-1], action.dest) in NOT_WALKED or (*path, action.dest) in NOT_WALKED:
                continue
            if _takes_file(action):
                for kind in BAD_INPUTS:
                    value = f"{{bad_{kind}}}"
                    if action.dest in FILE_URI_DESTS:
                        value = "file://" + value
                    yield Case(path, action.option_strings[-1] if action.option_strings else action.dest, kind,
                               _argv(cmd, action, value))  # fmt: skip
            if action.dest in URI_DESTS:
                for uri in URIS:
                    flag = action.option_strings[-1] if action.option_strings else action.dest
                    yield Case(path, flag, uri.split(":")[0], _argv(cmd, action, uri))
    # the machine that is not set up, without any file: every provider of the registry (a new one is
    # covered without editing this) and a cluster-less publish
    for provider in PROVIDERS:
        extra = ["--project", "p1"] if provider == "gcp" else []
        yield Case(("discover",), "--provider", provider, ("discover", "--provider", provider, *extra))
    yield Case(("publish",), "--graph", "no-kubeconfig", ("publish", "--graph", "{good}"))


CASES = list(cases())


@functools.cache
def _fabric_text() -> str:
    from ib_fabric_gen import fat_tree

    return fat_tree(units=1, hosts_per_unit=2, rails=1).text()


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, str]:
    """Fresh files for every case: a case whose flag writes (``synth -o``, ``discover -o``) replaces the
    file it names, so shared files would let a later case read valid JSON where it expects binary."""
    from topocast.model.graph import Node, TopologyGraph, dump_graph

    root = tmp_path / "contract"
    root.mkdir()
    values = {"d": str(root)}
    for kind, content in BAD_INPUTS.items():
        path = root / f"bad-{kind}"
        if content == "dir":
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        values[f"bad_{kind}"] = str(path)
    graph = TopologyGraph(cluster="c1", provider="x", nodes=[Node(name="n1", id="i-1", fabric=["leaf0", "spine0"])])
    (root / "good.json").write_text(dump_graph(graph))
    (root / "topology.conf").write_text("SwitchName=leaf0 Nodes=n1\n")
    (root / "fabric.ibnetdiscover").write_text(_fabric_text())
    (root / "creds").write_text(json.dumps({"username": "u", "password": "p"}))
    values |= {"good": str(root / "good.json"), "conf": str(root / "topology.conf")}
    values |= {"ib": str(root / "fabric.ibnetdiscover"), "creds": str(root / "creds")}
    (root / "states.txt").write_text("NodeName=n1 State=IDLE\n")
    (root / "k8s-nodes.json").write_text(json.dumps({"items": [{"metadata": {"name": "n1"}}]}))
    values |= {"states": str(root / "states.txt"), "k8s_nodes": str(root / "k8s-nodes.json")}
    return values


@pytest.fixture
def bare_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No region, no credentials, no kubeconfig; nothing reaches a metadata server."""
    for name in list(__import__("os").environ):
        if name.startswith(("AWS_", "GOOGLE_", "CLOUDSDK_", "KUBE", "TOPOCAST_", "GCE_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-key.json"))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("GCE_METADATA_IP", "127.0.0.1:9")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    monkeypatch.chdir(tmp_path)


def test_every_command_is_walked() -> None:
    walked = {c.path for c in CASES} | {(name,) for name, _ in NOT_WALKED}
    assert walked == set(COMMANDS), sorted(set(COMMANDS) - walked)
    # a reviewer's figure: commands x inputs (printed with -s)
    print(f"contract: {len(COMMANDS)} subcommands, {len(CASES)} cases")


def _marks(case: Case) -> list[pytest.MarkDecorator]:
    return [pytest.mark.slow] if case.path in SLOW else []


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=_marks(c)) for c in CASES])
def test_a_bad_input_or_a_bare_machine_is_a_few_lines_never_a_traceback(
    case: Case, inputs: dict[str, str], bare_machine: None
) -> None:
    argv = [a.format(**inputs) for a in case.argv]
    result = invoke(argv)
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.output, result.output
    assert "internal error" not in result.stderr, result.stderr
    assert result.exit_code != EXIT_INTERNAL
    if result.exit_code != 0:  # a failure says why, in a few lines (after the progress a command printed)
        assert result.output.strip(), "a failure without a word"
        said = next((i for i, line in enumerate(lines) if line.startswith("topocast: ")), 0)
        assert len(lines) - said <= 4, result.stderr


@pytest.fixture
def broken_command() -> Iterator[str]:
    """A command with a bug in it, registered for one test."""
    from topocast.cli.parser import command

    def broken(_: argparse.Namespace) -> None:
        """A bug."""
        raise RuntimeError("a bug\nsecond line")

    command("broken-for-test")(broken)
    try:
        yield "broken-for-test"
    finally:
        del COMMANDS[("broken-for-test",)]


def test_an_internal_failure_is_one_line_and_debug_prints_the_traceback(broken_command: str) -> None:
    plain = invoke([broken_command])
    assert (plain.exit_code, plain.stderr) == (
        EXIT_INTERNAL,
        "topocast: internal error: RuntimeError: a bug "
        "(run 'topocast broken-for-test ... --debug' for the traceback)\n",
    )
    for argv in ([broken_command, "--debug"], ["--debug", broken_command]):
        debug = invoke(argv)
        assert debug.exit_code == EXIT_INTERNAL and "Traceback (most recent call last)" in debug.stderr
        assert debug.stderr.endswith("topocast: internal error: RuntimeError: a bug\n")


def test_version_and_help_conventions() -> None:
    from topocast import __version__

    assert invoke(["--version"]).stdout == f"topocast {__version__}\n"
    pull = invoke(["pull", "--help"]).stdout
    assert "(default: on)" in pull and "(default: 0.1)" in pull  # --validate, --live-max-share
    assert "-o FILE, --out FILE" in invoke(["discover", "--help"]).stdout
    assert "-o DIR, --out DIR" in invoke(["render", "--help"]).stdout
    top = invoke(["--help"]).stdout
    assert "plus what Slurm accepts but should never ship." in " ".join(top.split())
    missing = invoke(["discover"])
    assert (missing.exit_code, missing.stderr) == (
        2,
        "topocast: error: discover needs --provider, one of: " + ", ".join(PROVIDERS) + "\n",
    )
