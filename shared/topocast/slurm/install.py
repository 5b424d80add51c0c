"""Swap a new topology.conf in on a Slurm controller host, safely.

The pull agent calls :func:`install_topology` with the bytes it fetched and
the sha256 the manifest promised. The steps, and what each failure leaves:

1. ``sha256``: the content must hash to ``expected_sha256``; else nothing is written.
2. ``unchanged``: identical to what is installed -> no write, no reconfigure.
3. ``validate``: a throwaway slurmctld must accept it (see :mod:`validate`); else nothing is written.
4. ``write``: the current file is copied to ``<dest>.prev``, the new one goes to a
   temp file in the same directory, is fsynced and renamed over ``dest``. A
   reader (or a reconfigure) sees the old file or the new one, never a missing
   or partial one: slurmctld dies on a missing topology.conf at reconfigure.
5. ``reconfigure`` / ``ping`` / ``show-topology`` (only with ``reconfigure=True``):
   ``scontrol reconfigure``, the controller must answer ping, and ``scontrol show
   topology`` must show exactly the new file (switches, blocks, every topology of
   a topology.yaml). If any fails, the previous file is put back the same atomic
   way and the controller reconfigured again.

The same steps install topology.conf (tree or block) and topology.yaml; a
topology.yaml is refused for a controller older than 25.05 (it would ignore it).
:mod:`topocast.slurm.live` builds the live (no reconfigure) path on top of this.

Installs into one directory are serialised with ``flock`` on the directory. The
destination must not be a symlink and its directory must be writable only by the
user running the install (:mod:`topocast.safeio.files`): the agent runs as root.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from topocast.errors import TopocastError
from topocast.safeio.files import UnsafePathError, check_destination, dir_lock, read_nofollow, write_file
from topocast.safeio.limits import MAX_PUBLISHED_BYTES
from topocast.slurm import scontrol as ctl
from topocast.slurm.conffile import slurm_conf_nodes
from topocast.slurm.controller import SlurmInstall
from topocast.slurm.topoyaml import looks_like_yaml
from topocast.slurm.validate import (
    MIN_VERSION,
    ValidationResult,
    format_version,
    parse_candidate,
    validate_topology_text,
    verify_shown,
)

#: who hears which step an install is in (the pull agent prints a progress line for a slow one)
_STEP_LISTENER: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar("step", default=None)


@contextlib.contextmanager
def steps_to(listener: Callable[[str], None]) -> Iterator[None]:
    """Tell ``listener`` each step (``validating with a throwaway slurmctld``, ...) the install enters."""
    token = _STEP_LISTENER.set(listener)
    try:
        yield
    finally:
        _STEP_LISTENER.reset(token)


def announce(text: str) -> None:
    """Announce the step the install (or the pull around it) enters now."""
    listener = _STEP_LISTENER.get()
    if listener is not None:
        listener(text)


Action = Literal["installed", "unchanged", "refused", "rolled_back", "inconsistent", "repaired", "failed", "held"]


@dataclass
class InstallResult:
    ok: bool
    #: installed / unchanged (no-op) / refused (nothing written) / rolled_back / failed; inconsistent (a
    #: rollback or repair left the controller placing nodes elsewhere than the file) / repaired (drift undone)
    action: Action
    dest: Path
    #: sha256 of the offered content
    sha256: str
    message: str
    #: sha256, validate, write, reconfigure, ping, show-topology or rollback; None on success
    failed_step: str | None = None
    validation: ValidationResult | None = None
    reconfigured: bool = False
    #: the copy of the replaced file, when one was made
    previous: Path | None = None
    warnings: list[str] = field(default_factory=list)
    #: how the controller got it: "live" (node updates), "reconfigure", "held" (not applied), None
    applied: str | None = None
    #: why that way (see topocast.slurm.live.plan_live)
    why: str = ""
    #: what checked the installed file: ``; validated by slurmctld 26.05.5`` (:func:`validated_by`)
    checked: str = ""
    #: seconds the controller part took: ``reconfigure`` (reconfigure, ping, check), ``move_call`` (one
    #: live move, averaged), ``check`` (the read after live moves); what :class:`topocast.slurm.live.Costs` learns
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """True if ``dest`` now holds the new content."""
        return self.action == "installed" or (self.action == "failed" and self.failed_step == "rollback")


def install_topology(
    content: bytes,
    dest: Path,
    *,
    expected_sha256: str,
    validate: bool = True,
    reconfigure: bool = False,
    slurm_conf: Path | None = None,
    scontrol: ctl.Command | None = None,
    ping_timeout: float = 10.0,
    slurm: SlurmInstall | None = None,
) -> InstallResult:
    """Verify, validate and atomically install ``content`` at ``dest``; optionally reconfigure.

    ``slurm_conf`` is the controller's slurm.conf: its nodes are what the file
    must cover, and scontrol runs with ``SLURM_CONF`` pointing at it (without it
    scontrol uses its own default / the inherited environment). ``slurm`` is the
    Slurm that validates and runs (default: this host's; a chroot for 26.05 here).
    """
    slurm = slurm or SlurmInstall.find(None, None, scontrol if isinstance(scontrol, str) else None)
    scontrol = scontrol if scontrol is not None else slurm.scontrol_command
    dest = Path(dest)
    digest = hashlib.sha256(content).hexdigest()

    def result(ok: bool, action: Action, message: str, step: str | None = None, **kw: object) -> InstallResult:
        text = f"{dest}: {message}" if step is None else f"{dest}: step {step} failed: {message}"
        return InstallResult(ok, action, dest, digest, text, step, **kw)  # type: ignore[arg-type]

    if digest != expected_sha256.strip().lower():
        return result(
            False,
            "refused",
            f"content sha256 {digest} does not match expected {expected_sha256}; nothing written",
            "sha256",
        )
    if not dest.parent.is_dir():
        return result(False, "refused", f"directory {dest.parent} does not exist; nothing written", "write")
    try:  # root writes here: no symlink at dest, a directory only we can write (topocast.safeio.files)
        check_destination(dest)
    except UnsafePathError as exc:
        return result(False, "refused", str(exc), "write")
    with dir_lock(dest.parent):
        try:
            old = read_nofollow(dest, MAX_PUBLISHED_BYTES)
        except UnsafePathError as exc:
            return result(False, "refused", f"cannot read the current file ({exc})", "write")
        if old == content:
            return result(True, "unchanged", "already up to date (sha256 " + digest[:12] + "); nothing to do")

        mismatch = _destination_mismatch(dest, content)
        if mismatch:
            return result(False, "refused", f"{mismatch}; nothing written", "validate")
        validation = None
        if validate:
            announce(f"validating with a throwaway slurmctld ({slurm.describe()})")
            try:
                validation = validate_topology_text(content, slurm_conf, source=f"{dest} (candidate)", install=slurm)
            except TopocastError as exc:
                return result(False, "refused", f"{exc}; nothing written", "validate")
            too_old = _too_old(validation, slurm)
            if too_old:
                return result(False, "refused", f"{too_old}; nothing written", "validate", validation=validation)
            if not validation.ok:
                return result(
                    False,
                    "refused",
                    f"{sample_errors(validation.errors)}; nothing written",
                    "validate",
                    validation=validation,
                )

        prev = dest.with_name(dest.name + ".prev") if old is not None else None
        try:
            if old is not None and prev is not None:
                _atomic_write(prev, old, like=dest)
            _atomic_write(dest, content, like=dest)
        except OSError as exc:
            return result(
                False,
                "refused",
                f"{exc.strerror} ({exc.filename}); {dest} is unchanged",
                "write",
                validation=validation,
            )
        warnings = list(validation.warnings) if validation else []
        checked = validated_by(validation, slurm)
        if not reconfigure:
            return result(
                True,
                "installed",
                f"installed (sha256 {digest[:12]}{checked})",
                validation=validation,
                checked=checked,
                previous=prev,
                warnings=warnings,
            )

        env = {**os.environ, "SLURM_CONF": slurm.inside(slurm_conf)} if slurm_conf is not None else None
        started = time.monotonic()
        step, reason = _apply(content, scontrol, env, ping_timeout, warnings, slurm_conf)
        if step is None:
            return result(
                True,
                "installed",
                f"installed and reconfigured (sha256 {digest[:12]}{checked})",
                validation=validation,
                checked=checked,
                reconfigured=True,
                previous=prev,
                warnings=warnings,
                timings={"reconfigure": time.monotonic() - started},
            )
        if old is None:
            return result(
                False,
                "failed",
                f"{reason}; there is no previous file to restore, the new file stays in place",
                "rollback",
                validation=validation,
                warnings=warnings,
            )
        try:
            _atomic_write(dest, old, like=dest)
        except OSError as exc:
            return result(
                False,
                "failed",
                f"{reason}; restoring the previous file also failed: {exc.strerror}",
                "rollback",
                validation=validation,
                previous=prev,
                warnings=warnings,
            )
        after = _after_rollback(scontrol, env, ping_timeout)
        return result(
            False,
            "rolled_back",
            f"{reason}; restored the previous file, {after}",
            step,
            validation=validation,
            previous=prev,
            warnings=warnings,
        )


def sample_errors(errors: list[str], sample: int = 3, limit: int = 300) -> str:
    """The first ``sample`` errors (each cut at ``limit`` characters) and how many more: a bounded reason."""
    shown = [e if len(e) <= limit else e[: limit - 3] + "..." for e in errors[:sample]]
    more = f" (+{len(errors) - sample} more)" if len(errors) > sample else ""
    return "; ".join(shown) + more


def validated_by(validation: ValidationResult | None, slurm: SlurmInstall) -> str:
    """``; validated by slurmctld 26.05.5`` (what checked an installed file), or what did not."""
    if validation is None:
        return "; not validated (--no-validate)"
    if validation.controller_checked:
        return f"; validated by slurmctld {slurm.release() or validation.version}"
    return f"; structure checked only: {slurm.describe()} could not check it"


def _destination_mismatch(dest: Path, content: bytes) -> str | None:
    """slurmctld reads topology.yaml and topology.conf by name: the content must match the file name."""
    is_yaml = looks_like_yaml(content.decode("utf-8", errors="replace"))
    if dest.name.endswith((".yaml", ".yml")) and not is_yaml:
        return f"the content is a topology.conf but the destination {dest.name} is read as topology.yaml"
    if dest.name.endswith(".conf") and is_yaml:
        return f"the content is a topology.yaml but the destination {dest.name} is read as topology.conf"
    return None


def _too_old(validation: ValidationResult, slurm: SlurmInstall) -> str | None:
    """A topology.yaml is silently ignored by a slurmctld before 25.05: refuse to install it there."""
    if validation.kind != "yaml":
        return None
    version = slurm.version()
    if version is None or version >= MIN_VERSION["yaml"]:
        return None
    return (
        f"slurmctld {format_version(version)} ({slurm.describe()}) ignores topology.yaml "
        f"(needs Slurm >= {format_version(MIN_VERSION['yaml'])})"
    )


def _apply(
    content: bytes,
    scontrol: ctl.Command,
    env: dict[str, str] | None,
    ping_timeout: float,
    warnings: list[str],
    slurm_conf: Path | None = None,
) -> tuple[str | None, str]:
    """Reconfigure and check the controller took the file: (failed step or None, reason)."""
    announce("scontrol reconfigure")
    try:
        ctl.reconfigure(scontrol, env)
    except TopocastError as exc:
        return "reconfigure", str(exc)
    announce("waiting for slurmctld to answer scontrol ping")
    if not _wait_ping(scontrol, env, ping_timeout):
        return "ping", f"the controller did not answer scontrol ping within {ping_timeout:g} s after reconfigure"
    text = content.decode("utf-8", errors="replace")
    announce("checking scontrol show topology")
    try:
        defined = slurm_conf_nodes(slurm_conf) if slurm_conf is not None else None
        if defined is None:
            defined = parse_candidate(text, "topology").node_names()
        problems = verify_shown(text, scontrol, env, defined, "the new file")
    except TopocastError as exc:
        return "show-topology", str(exc)
    if problems:
        return "show-topology", "scontrol show topology does not match the new file: " + "; ".join(problems[:3])
    return None, ""


def _after_rollback(scontrol: ctl.Command, env: dict[str, str] | None, ping_timeout: float) -> str:
    announce("rolling back: scontrol reconfigure with the previous file")
    try:
        ctl.reconfigure(scontrol, env)
    except TopocastError as exc:
        return f"but reconfiguring again failed ({exc}); check slurmctld"
    if not _wait_ping(scontrol, env, ping_timeout):
        return "but the controller is DOWN: restart slurmctld"
    return "reconfigured again, controller is UP"


def _wait_ping(scontrol: ctl.Command, env: dict[str, str] | None, timeout: float) -> bool:
    return wait_until(lambda: ctl.ping(scontrol, env, timeout=max(1.0, timeout)), timeout)


def wait_until(test: Callable[[], bool], timeout: float, pause: float = 0.05) -> bool:
    """Call ``test`` until it is true (True) or ``timeout`` seconds passed (False); at least once."""
    deadline = time.monotonic() + timeout
    while True:
        if test():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(pause)


def _atomic_write(path: Path, data: bytes, like: Path) -> None:
    """Write ``data`` to ``path`` via a fsynced temp file + rename (:func:`topocast.safeio.files.write_file`,
    never through a link); mode/owner copied from ``like``."""
    try:
        st = like.lstat()
        mode, owner = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
    except FileNotFoundError:
        mode, owner = 0o644, None  # slurmctld runs as SlurmUser: it must be able to read the file
    write_file(path, data, mode=mode, owner=owner)
