"""The standard error stream when it is the systemd journal: a priority on every line, repeats counted.

journald reads an sd-daemon ``<N>`` prefix on each line of a service's output as the line's priority
(``SyslogLevelPrefix=true``, the default). systemd sets ``JOURNAL_STREAM`` to the ``device:inode`` of the
stream it connected (``systemd.exec(5)``); when standard error is that stream, :func:`journal_stderr` wraps it
so that every line topocast prints there carries one, whoever printed it: ``<3>`` for ``topocast: error:``
(and ``internal error``), ``<4>`` for ``topocast: warning:``, ``<6>`` for anything else. A line that has a
prefix already (the pull agent's report) is left as it is. So ``journalctl -p warning`` shows every failure.

A warning printed again and again (a watch that cannot reach its queue, retrying) is written once per
:data:`REPEAT_WINDOW` seconds; the next one that is written says how many were left out.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["REPEAT_WINDOW", "JournalStream", "is_journal", "journal_stderr"]

#: seconds during which the same line is written once
REPEAT_WINDOW = 60.0
_PREFIXED = re.compile(r"<[0-7]>")


def is_journal(stream: TextIO, environ: dict[str, str] | None = None) -> bool:
    """Is ``stream`` the journal stream systemd connected (``JOURNAL_STREAM`` = its device and inode)?"""
    value = (environ if environ is not None else os.environ).get("JOURNAL_STREAM", "")
    device, _, inode = value.partition(":")
    try:
        st = os.fstat(stream.fileno())
        return (st.st_dev, st.st_ino) == (int(device), int(inode))
    except (ValueError, OSError, AttributeError):
        return False


def priority(line: str) -> int:
    if line.startswith(("topocast: error:", "topocast: internal error:")):
        return 3
    if line.startswith("topocast: warning:"):
        return 4
    return 6


class JournalStream:
    """A text stream that prefixes each line with its priority and holds back repeats."""

    def __init__(self, inner: TextIO, clock: Callable[[], float] = time.monotonic) -> None:
        self.inner = inner
        self.clock = clock
        self._partial = ""
        self._last: dict[str, tuple[float, int]] = {}  # line -> (written at, left out since)

    def write(self, text: str) -> int:
        self._partial += text
        *lines, self._partial = self._partial.split("\n")
        for line in lines:
            self._line(line)
        return len(text)

    def _line(self, line: str) -> None:
        if _PREFIXED.match(line):
            self.inner.write(line + "\n")
            return
        now = self.clock()
        written, left_out = self._last.get(line, (None, 0))
        if written is not None and now - written < REPEAT_WINDOW:
            self._last[line] = (written, left_out + 1)
            return
        note = f" ({left_out} more in the last {now - written:.0f} s)" if written is not None and left_out else ""
        self._last[line] = (now, 0)
        if len(self._last) > 1000:  # a bound, not a log: forget the oldest
            self._last.pop(next(iter(self._last)))
        self.inner.write(f"<{priority(line)}>{line}{note}\n")

    def flush(self) -> None:
        if self._partial:
            self._line(self._partial)
            self._partial = ""
        self.inner.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.inner.fileno()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def journal_stderr() -> None:
    """Wrap ``sys.stderr`` when it is the journal (see the module doc); nothing otherwise."""
    if is_journal(sys.stderr) and not isinstance(sys.stderr, JournalStream):
        sys.stderr = JournalStream(sys.stderr)
