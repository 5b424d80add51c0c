"""``topocast pull`` for systemd: one bounded report line per run, at a journal priority, with an exit code.

journald reads an sd-daemon ``<N>`` prefix on each line of a service's stdout/stderr as the
line's priority (``SyslogLevelPrefix=true``, the default). So, when the stream is not a
terminal, every line starts with one: ``<3>`` err (refused, rolled back, failed, stale, state not
saved), ``<4>`` warning (held, skipped), ``<5>`` notice (installed), ``<6>`` info (progress),
``<7>`` debug (unchanged: printed only with ``--verbose``, so the 60 s timer is quiet). Installed,
unchanged and skipped go to stdout, the rest to stderr. ``--json`` prints one JSON object per run on
stdout instead (:meth:`topocast.agents.pull.PullOutcome.as_dict`), progress still on stderr. The exit
status is :data:`topocast.agents.pull.EXIT_CODES`; a source that cannot be read is 2 (one line, ``<3>``).

A step that takes more than :data:`PROGRESS_AFTER` seconds (a 20,000-node validation, a
controller that does not answer) gets an info line saying what the agent waits for, repeated
every :data:`PROGRESS_EVERY` seconds.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from topocast.agents.pull import PullError, PullOutcome, bounded, pull
from topocast.errors import TopocastError

__all__ = ["PROGRESS_AFTER", "PROGRESS_EVERY", "Journal", "run_pull"]

#: seconds a step may take before the agent says what it waits for, and how often it repeats it
PROGRESS_AFTER = 3.0
PROGRESS_EVERY = 15.0
ERR, WARNING, NOTICE, INFO, DEBUG = 3, 4, 5, 6, 7


class Journal:
    """Lines for journald: an sd-daemon ``<N>`` prefix unless the stream is a terminal."""

    def __init__(self, prefix: bool | None = None) -> None:
        self.prefix = prefix
        self._lock = threading.Lock()

    def write(self, priority: int, text: str, stream: TextIO | None = None) -> None:
        out = stream if stream is not None else (sys.stdout if priority >= NOTICE else sys.stderr)
        show = self.prefix if self.prefix is not None else not _isatty(out)
        with self._lock:
            print(f"<{priority}>{text}" if show else text, file=out, flush=True)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """Say what a slow step waits for: the first time after ``after`` s, then every ``every`` s."""

    def __init__(self, journal: Journal, where: str, after: float = PROGRESS_AFTER, every: float = PROGRESS_EVERY):
        self.journal, self.where, self.after, self.every = journal, where, after, every
        self._step, self._since, self._next = "starting", time.monotonic(), time.monotonic() + after
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="pull-progress", daemon=True)

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(1.0)

    def step(self, text: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._step, self._since, self._next = text, now, now + self.after

    def _watch(self) -> None:
        while not self._done.wait(0.25):
            with self._lock:
                now = time.monotonic()
                if now < self._next:
                    continue
                self._next = now + self.every
                text, took = self._step, now - self._since
            self.journal.write(INFO, f"{self.where}: still {text} ({took:.0f} s)", sys.stderr)


def run_pull(a: Any) -> int:
    """One run of ``topocast pull`` from its parsed flags: pull, print the report, return the exit code.

    ``a`` carries the flags of the ``pull`` command (``source``, ``dest``, ``reconfigure``, ``validate``,
    ``slurm_conf``, ``state_file``, ``live``, ``forbid_reconfigure``, ``live_max_share``, ``slurm_root``,
    ``pointer_bucket``, ``pointer_prefix``, ``allow_node_loss``, ``stale_after``, ``as_json``, ``verbose``).
    """
    from topocast.cli.slurm import find_slurm
    from topocast.slurm.install import steps_to
    from topocast.slurm.rest import updater_from_cli

    if a.stale_after < 1:
        raise TopocastError(f"--stale-after must be at least 1, got {a.stale_after}")
    # --via slurmrestd URL --token-from SRC: connected (version, token checked) before anything is fetched
    updater = updater_from_cli(getattr(a, "via", None), getattr(a, "token_from", None))
    journal = Journal()
    where = str(Path(a.dest).resolve())
    started = time.monotonic()
    run = pull
    if getattr(a, "check", False):
        from topocast.agents.pull_check import check as run
    with Progress(journal, where) as progress, steps_to(progress.step):
        try:
            outcome = run(
                a.source,
                a.dest,
                reconfigure=a.reconfigure,
                validate=a.validate,
                slurm_conf=a.slurm_conf,
                state_file=a.state_file,
                live=a.live,
                allow_reconfigure=not a.forbid_reconfigure,
                live_max_share=a.live_max_share,
                slurm=find_slurm(a.slurm_root, None, None),
                pointer_bucket=a.pointer_bucket,
                pointer_prefix=a.pointer_prefix,
                allow_node_loss=a.allow_node_loss,
                stale_after=a.stale_after,
                updater=updater,
            )
        except PullError as exc:
            return _cannot_read(journal, a, where, str(exc))
    verbose = a.verbose or getattr(a, "check", False)  # a check always answers, "unchanged" included
    report(outcome, journal, as_json=a.as_json, verbose=verbose, seconds=time.monotonic() - started)
    return outcome.exit_code


def report(outcome: PullOutcome, journal: Journal, *, as_json: bool, verbose: bool, seconds: float) -> None:
    """Print ``outcome``: its JSON object, or its line at its priority (``unchanged`` only when verbose)."""
    if as_json:
        print(json.dumps({**outcome.as_dict(), "seconds": round(seconds, 2)}), flush=True)
        return
    if outcome.priority == DEBUG and not verbose:
        return
    stream = sys.stdout if outcome.priority >= WARNING and outcome.ok else sys.stderr
    journal.write(outcome.priority, outcome.line(), stream)


def _cannot_read(journal: Journal, a: Any, where: str, reason: str) -> int:
    if a.as_json:
        line = {"action": "error", "status": "error", "ok": False, "exit_code": 2, "priority": ERR}
        print(json.dumps({**line, "source": a.source, "dest": where, "detail": bounded(reason)}), flush=True)
    else:
        journal.write(ERR, bounded(f"{where}: cannot read the source: {reason}; nothing written"), sys.stderr)
    return 2
