"""The ``topocast`` command framework: commands declared with decorators, parsed by argparse, one error contract.

Every command is a thin shell over the library: parse flags, call the core,
print. The error contract, the same for every command: a user mistake or a machine that is not
set up (no region, no credentials, no cluster, a file missing or unreadable) is one line on stderr
naming the cause and the fix (``topocast: error: ...``), exit 2 (the command's ``error_code``); an
internal failure is one line too, ``topocast: internal error: ...``, exit 70 (``EXIT_INTERNAL``),
and ``--debug`` (before or after the command) prints its traceback. Never a traceback otherwise.
Conventions: ``topocast --version``; ``-o`` is short for ``--out`` everywhere, whose help says
whether it is a FILE or a DIR; option help shows its default (``help`` may be a function, called
when the command's parser is built: a registry's names).

The commands themselves are declared in :mod:`topocast.cli.commands` (importing :mod:`topocast.cli`
registers them); :func:`run` dispatches to whatever is registered in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from argparse import Namespace
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from topocast.errors import TopocastError

__all__ = [
    "COMMANDS",
    "DESCRIPTION",
    "EXIT_INTERNAL",
    "GROUPS",
    "PROG",
    "STARTED",
    "Command",
    "Group",
    "Handler",
    "command",
    "error_line",
    "fail",
    "group",
    "option",
    "run",
]

PROG = "topocast"
DESCRIPTION = "Tell GPU schedulers where the wires are: discover, render and publish cluster topology."

Handler = Callable[[Namespace], "int | None"]

#: exit code of an internal failure (a bug, not the input): sysexits' EX_SOFTWARE, so a script never reads
#: it as one of a command's own answers (``diff``'s 1 = "they differ")
EXIT_INTERNAL = 70


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The docstring as written, and every option's default at the end of its help (unless the help
    already names it, or there is none to show)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "default" in text.lower() or default in (None, [], argparse.SUPPRESS) or not action.option_strings:
            return text
        if isinstance(action, argparse.BooleanOptionalAction):
            return f"{text} (default: {'on' if default else 'off'})"
        if action.nargs == 0:  # --debug, --help
            return text
        shown = default if not isinstance(default, str) else default or "''"
        return f"{text} (default: {str(shown).replace('%', '%%')})"


@dataclass
class Command:
    path: tuple[str, ...]
    handler: Handler
    options: list[tuple[tuple[str, ...], dict[str, Any]]]
    error_code: int = 2
    epilog: Callable[[], str] | None = None
    #: may skip interpreter teardown on exit (see :func:`main`)
    fast_exit: bool = False
    #: options known only when the parser is built (``discover``: the providers' own flags)
    more_options: Callable[[], list[tuple[tuple[str, ...], dict[str, Any]]]] | None = None

    @property
    def summary(self) -> str:
        """The docstring's first paragraph on one line (a sentence may span several source lines)."""
        first = (self.handler.__doc__ or "").strip().split("\n\n")[0]
        return " ".join(first.split())

    def parser(self) -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(
            prog=" ".join((PROG, *self.path)),
            description=(self.handler.__doc__ or "").strip() or None,
            epilog=self.epilog() if self.epilog else None,
            formatter_class=_HelpFormatter,
        )
        for flags, kwargs in [*self.options, *(self.more_options() if self.more_options else [])]:
            kw = dict(kwargs)
            if callable(kw.get("help")):  # known only when the parser is built (a registry's names)
                kw["help"] = kw["help"]()
            if flags == ("--out",):  # the one short option every writing command shares
                flags = ("-o", "--out")
            if kw.pop("flag", False):
                kw.setdefault("default", False)
                kw["action"] = argparse.BooleanOptionalAction
            elif kw.pop("many", False):
                kw["action"] = "append"
                kw["default"] = []
            p.add_argument(*flags, **kw)
        p.add_argument("--debug", action="store_true", help="On an internal failure, print its traceback.")
        return p


@dataclass
class Group:
    help: str
    commands: list[str] = field(default_factory=list)


COMMANDS: dict[tuple[str, ...], Command] = {}
GROUPS: dict[str, Group] = {}


def group(name: str, help_text: str) -> None:
    """Declare a command group (``topocast collect ...``) and its one-line help."""
    GROUPS.setdefault(name, Group(help_text)).help = help_text


def command(
    name: str,
    *,
    error_code: int = 2,
    epilog: Callable[[], str] | None = None,
    fast_exit: bool = False,
    more_options: Callable[[], list[tuple[tuple[str, ...], dict[str, Any]]]] | None = None,
) -> Callable[[Handler], Handler]:
    """Register ``handler`` as ``topocast <name>`` (``name`` may be ``"group sub"``).

    ``fast_exit``: the command only reads and writes files (closed when it returns), so the
    process may end without freeing every object one by one (a fifth of a 100k-node render).
    ``more_options``: called when the command's parser is built, for options declared elsewhere
    (``discover``: each provider's own flags, from its Options model); it may import what it needs.
    """

    def register(handler: Handler) -> Handler:
        path = tuple(name.split())
        if len(path) > 1:
            GROUPS.setdefault(path[0], Group("")).commands.append(path[1])
        options = list(reversed(getattr(handler, "__cli_options__", [])))  # decorators apply bottom-up
        COMMANDS[path] = Command(path, handler, options, error_code, epilog, fast_exit, more_options)
        return handler

    return register


def option(*flags: str, **kwargs: Any) -> Callable[[Handler], Handler]:
    """Declare one option of the command below (see the module doc for the extras)."""

    def add(handler: Handler) -> Handler:
        handler.__dict__.setdefault("__cli_options__", []).append((flags, kwargs))
        return handler

    return add


#: set by :func:`run` while a command given ``--json`` runs: its errors are JSON objects on stdout too
json_errors_on: list[bool] = [False]


def error_line(message: str, code: int = 2, kind: str = "error") -> int:
    print(f"{PROG}: {kind}: {message}", file=sys.stderr)
    if json_errors_on[0]:  # --json: every outcome is one object, errors included
        record = {"action": "error", "status": kind, "ok": False, "exit_code": code, "detail": message}
        print(json.dumps(record), flush=True)
    return code


def _top_help(prefix: tuple[str, ...] = ()) -> str:
    lines = [f"usage: {' '.join((PROG, *prefix))} COMMAND [OPTIONS]", ""]
    lines.append(GROUPS[prefix[0]].help if prefix else DESCRIPTION)
    lines += ["", "commands:"]
    entries: list[tuple[str, str]] = []
    if prefix:
        entries = [(sub, COMMANDS[(*prefix, sub)].summary) for sub in GROUPS[prefix[0]].commands]
    else:
        for path, cmd in COMMANDS.items():
            if len(path) == 1:
                entries.append((path[0], cmd.summary))
        entries += [(name, grp.help) for name, grp in GROUPS.items()]
    width = max((len(n) for n, _ in entries), default=0)
    for name, text in entries:  # wrapped, never cut: the whole first paragraph of the command's doc
        lines += textwrap.wrap(
            text, 100, initial_indent=f"  {name.ljust(width)}  ", subsequent_indent=" " * (width + 4)
        ) or [f"  {name}"]
    lines += ["", f"Run '{' '.join((PROG, *prefix))} COMMAND --help' for a command's options;"]
    lines += ["'--debug' (with any command) prints the traceback of an internal failure."]
    if not prefix:
        lines.insert(1, f"       {PROG} --version")
    return "\n".join(lines) + "\n"


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the command, return its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = False
    while args and args[0] == "--debug":
        args.pop(0)
        debug = True
    if args[:1] == ["--version"]:
        from topocast import __version__

        print(f"{PROG} {__version__}")
        return 0
    prefix: tuple[str, ...] = ()
    while args and not args[0].startswith("-") and (*prefix, args[0]) not in COMMANDS:
        if prefix or args[0] not in GROUPS:
            return error_line(f"unknown command {' '.join((*prefix, args[0]))!r} (see '{PROG} --help')")
        prefix = (args.pop(0),)
    if args and not args[0].startswith("-"):
        cmd = COMMANDS[(*prefix, args.pop(0))]
        STARTED.append(cmd)
    else:
        sys.stdout.write(_top_help(prefix))
        return 0 if args and args[0] in ("-h", "--help") else 2
    try:
        parsed = cmd.parser().parse_args(args)
    except SystemExit as exc:  # --help (0) or a usage error (2), already printed by argparse
        return int(exc.code or 0)
    debug = debug or bool(getattr(parsed, "debug", False))
    json_errors_on[0] = bool(getattr(parsed, "as_json", False))
    try:
        if _reads_aws(parsed):
            from topocast.aws.clients import use_region

            use_region(getattr(parsed, "region", None))
        return cmd.handler(parsed) or 0
    except _Exit as exc:
        return exc.code
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        return error_line(f"{where}{exc.strerror or exc}", cmd.error_code)
    except TopocastError as exc:
        return error_line(str(exc), cmd.error_code)
    except KeyboardInterrupt:
        return error_line("interrupted", 130)
    except (RecursionError, MemoryError) as exc:  # the inputs are capped where read; a last line of defence
        return error_line(f"input too large or nested too deeply ({type(exc).__name__})", 2)
    except Exception as exc:
        hint = next(
            (_ENVIRONMENT_ERRORS[c.__name__] for c in type(exc).__mro__ if c.__name__ in _ENVIRONMENT_ERRORS), None
        )
        if hint is not None:
            return error_line(hint, 2)
        if debug:
            import traceback

            traceback.print_exc()
        first = next(iter(str(exc).strip().splitlines()), "")[:300]
        return error_line(
            f"{type(exc).__name__}{f': {first}' if first else ''}"
            + ("" if debug else f" (run '{PROG} {' '.join(cmd.path)} ... --debug' for the traceback)"),
            EXIT_INTERNAL,
            "internal error",
        )
    finally:
        json_errors_on[0] = False


def _reads_aws(parsed: Namespace) -> bool:
    """Does this command line read AWS (an ``ssm://`` or ``s3://`` location, ``--provider aws``, ``--region``)?"""
    values = [v for v in vars(parsed).values() for v in (v if isinstance(v, list) else [v])]
    return (
        getattr(parsed, "region", None) is not None
        or getattr(parsed, "provider", None) == "aws"
        or any(isinstance(v, str | Path) and str(v).startswith(("ssm://", "s3://")) for v in values)
    )


#: errors of the cloud SDKs that mean "this machine is not set up", by the name of the class or one of its
#: bases (the SDKs are not imported here), with the fix; anything else is an internal error (see run())
_ENVIRONMENT_ERRORS = {
    "NoRegionError": (
        "no AWS region: pass --region, set AWS_REGION (or AWS_DEFAULT_REGION), or run on EC2 with the instance "
        "metadata service reachable (IMDSv2)"
    ),
    "NoCredentialsError": "no AWS credentials: set AWS_PROFILE or AWS_ACCESS_KEY_ID, or run on a role",
    "PartialCredentialsError": "incomplete AWS credentials: check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    "ProfileNotFound": "the AWS profile does not exist: check AWS_PROFILE (aws configure list-profiles)",
    "EndpointConnectionError": "cannot reach the AWS endpoint: check the network, --region and AWS_ENDPOINT_URL",
    "DefaultCredentialsError": (
        "no Google credentials: run 'gcloud auth application-default login' or set "
        "GOOGLE_APPLICATION_CREDENTIALS to a readable key file"
    ),
    "RefreshError": "Google credentials were refused: run 'gcloud auth application-default login' again",
}


#: the commands :func:`run` started in this process (``main()`` looks at the last one)
STARTED: list[Command] = []


class _Exit(Exception):
    """Stop a command with an exit code after printing (see :func:`fail`)."""

    def __init__(self, code: int) -> None:
        self.code = code


def fail(message: str, code: int = 2) -> _Exit:
    """``raise fail("...")``: print ``topocast: error: ...`` and exit ``code``."""
    error_line(message, code)
    return _Exit(code)
