"""Every ``topocast ...`` command line in README.md, docs/*.md and the infra READMEs parses with its real parser.

A documented flag that does not exist, a command that was renamed, an option given a value of the wrong
type: each fails here, not in an operator's first try. Lines in fenced code blocks must parse completely
(``COMMANDS[path].parser().parse_args``); an inline span (```topocast pull --watch```) names a command
and some of its flags, so it must name a command that exists and only flags it has. The few lines that
are deliberately not runnable are in ``NOT_RUNNABLE``, each with the reason.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from topocast.cli.parser import COMMANDS, GROUPS

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "infra").rglob("README.md"))]

#: a prefix before the command word: a prompt, sudo, environment assignments, a path to the binary, ExecStart=
_PREFIX = re.compile(r"^(?:\$\s+|#\s+)?(?:sudo\s+)?(?:ExecStart=)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?topocast\s")
#: where a shell line stops being the topocast command: a pipe, a list, a redirection, a comment
_SHELL_END = re.compile(r"\s(?:\||\|\||&&|;|>|>>|2>&1|2>|<|#)(?:\s|$)")
#: separates the commands of one shell line (a pipe inside a synopsis's brackets, ``[--a | --b]``, is not one)
_PIPELINE = re.compile(r"\s(?:\|\||&&|\|)\s(?=(?:\S*/)?topocast\s)")
_INLINE = re.compile(r"`((?:\S*/)?topocast\s[^`]+)`")

#: (file, start of the command line) -> why it is not parsed: placeholders a reader fills in
NOT_RUNNABLE: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str
    inline: bool


def _command_only(words: str) -> str:
    """The command's own words: up to the first redirection, list, pipe or comment."""
    end = _SHELL_END.search(" " + words)
    return (words[: end.start() - 1] if end else words).strip()


def _fenced_lines(text: str) -> list[tuple[int, str]]:
    """(line number, logical line) of every fenced code block; ``\\`` continuations joined."""
    out: list[tuple[int, str]] = []
    fenced = False
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            continue
        line = raw.strip()
        if pending is not None:
            line = f"{pending[1]} {line}"
            number = pending[0]
            pending = None
        if line.endswith("\\"):
            pending = (number, line[:-1].rstrip())
            continue
        out.append((number, line))
    return out


def documented_commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in DOCS:
        text = path.read_text()
        for number, line in _fenced_lines(text):
            for piece in _PIPELINE.split(line):  # `discover ... | topocast render --graph - ...`: both
                if (start := _PREFIX.match(piece.strip())) is not None:
                    command = _command_only(piece.strip()[start.end() :])
                    found.append(DocCommand(f"{path.relative_to(ROOT)}:{number}", "topocast " + command, inline=False))
        fence = False
        for number, line in enumerate(text.splitlines(), 1):
            if line.lstrip().startswith("```"):
                fence = not fence
            if fence:
                continue
            for match in _INLINE.finditer(line):
                for piece in _PIPELINE.split(match.group(1)):
                    if (start := _PREFIX.match(piece.strip())) is not None:
                        command = _command_only(piece.strip()[start.end() :])
                        where = f"{path.relative_to(ROOT)}:{number}"
                        found.append(DocCommand(where, "topocast " + command, inline=True))
    return found


def _synopsis_words(text: str) -> list[str]:
    """The words of a command line; a synopsis's optional parts (``[--zone Z ...]``) count as given, its
    ellipses (``...``, ``…``) as nothing, so their flags are checked too."""
    words: list[str] = []
    for word in shlex.split(text):
        word = word.removeprefix("[")
        while word.endswith("]") and word.count("]") > word.count("["):
            word = word[:-1]
        if word and word not in ("...", "\u2026"):
            words.append(word)
    return words


def _split(doc: DocCommand) -> tuple[tuple[str, ...], list[str]]:
    words = _synopsis_words(doc.text)[1:]
    if words and words[0] in GROUPS and len(words) > 1 and (words[0], words[1]) in COMMANDS:
        return (words[0], words[1]), words[2:]
    if words and (words[0],) in COMMANDS:
        return (words[0],), words[1:]
    if words and (words[0] in GROUPS or words[0].startswith("-")):
        return (), words  # `topocast collect`, `topocast --version`: the group or the top level
    raise AssertionError(f"{doc.where}: {doc.text!r}: no such command")


def _known(path: tuple[str, ...], word: str) -> bool:
    flags = COMMANDS[path].parser()._option_string_actions  # argparse keeps no public list
    return word.split("=", 1)[0] in flags


def _check(doc: DocCommand) -> None:
    path, args = _split(doc)
    if not path:
        assert all(a in ("--version", "--help", "-h", "--debug") for a in args if a.startswith("-")), doc
        return
    if doc.inline:
        unknown = [a for a in args if a.startswith("-") and a != "-" and not _known(path, a)]
        assert not unknown, f"{doc.where}: {doc.text!r}: {' '.join(path)} has no {', '.join(unknown)}"
        return
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            COMMANDS[path].parser().parse_args(args)
        except SystemExit as exc:
            assert exc.code == 0, f"{doc.where}: {doc.text!r}:\n{err.getvalue().strip().splitlines()[-1]}"


DOCUMENTED = documented_commands()


def test_the_docs_show_commands() -> None:
    """The extractor finds the commands people copy (a broken pattern would make every other test vacuous)."""
    assert len([d for d in DOCUMENTED if not d.inline]) > 30
    assert any(d.text.startswith("topocast pull ") for d in DOCUMENTED)


@pytest.mark.parametrize("doc", DOCUMENTED, ids=[f"{d.where}" for d in DOCUMENTED])
def test_documented_command_parses(doc: DocCommand) -> None:
    reason = next((why for (name, start), why in NOT_RUNNABLE.items() if doc.where.startswith(name + ":")
                   and doc.text.startswith(start)), None)  # fmt: skip
    if reason is not None:
        pytest.skip(reason)
    _check(doc)


@pytest.mark.parametrize(
    "doc",
    [
        DocCommand("x.md:1", "topocast render graph.json --format slurm-tree", inline=False),  # the onprem.md slip
        DocCommand("x.md:1", "topocast pull --source s --dest d --forbid-reconfiguration", inline=False),
        DocCommand("x.md:1", "topocast diff --json --colour", inline=True),
        DocCommand("x.md:1", "topocast renders --graph g.json", inline=True),
    ],
    ids=["positional", "misspelt-flag", "inline-flag", "no-command"],
)
def test_a_wrong_line_is_caught(doc: DocCommand) -> None:
    with pytest.raises(AssertionError):
        _check(doc)
