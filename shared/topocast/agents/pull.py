"""The head-node pull agent: fetch a published file, verify it, install it.

Sources:

* ``ssm:///topocast/<cluster>/slurm/topology.conf``: an SSM parameter holding a
  :mod:`topocast.publish.envelope` (raw, gzip+base64 or an S3 pointer, resolved
  transparently). The decoded bytes must hash to the envelope's sha256, else
  the pull fails naming the parameter, before anything is written.
* ``s3://bucket/key``: the object itself (verified against its ``sha256``
  metadata when present).
* ``gs://bucket/key`` (or ``gcs://``): a Cloud Storage object as the GCP
  publisher writes it (:mod:`topocast.gcp.gcs_publish`), verified against its
  ``sha256`` metadata; ``generation`` metadata orders it. Credentials:
  application-default (``STORAGE_EMULATOR_HOST`` points it at an emulator).
* ``file:///path``: a local file (tests, air-gapped installs).

:func:`pull` adds the install (:func:`topocast.slurm.install.install_topology`:
validate with a throwaway slurmctld, atomic replace, ``scontrol reconfigure``,
rollback) and a small state file so an older generation never replaces a newer
one. Running it again when nothing changed does nothing. The file may be a
topology.conf (tree or block) or a topology.yaml. With ``live=True`` the change
goes to the running controller by node updates when only nodes were added or
moved (:func:`topocast.slurm.live.apply_topology`), by reconfigure otherwise,
or (``allow_reconfigure=False``) not at all: the agent holds and fails loudly.
The agent runs as root:
the destination must not be a symlink and its directory must be writable only by
the agent's user (:mod:`topocast.safeio.files`); every fetch is size-capped; a file
that drops more than 10% of the installed file's nodes is held (:func:`node_loss`).

The state file remembers, per resolved destination, the source and generation installed there
(:func:`pull`): another spelling of the same ``--dest`` is the same entry, a new source starts the
generation check over (said on the report line), and a source that stays behind the installed
generation for ``stale_after`` runs in a row turns ``skipped`` into ``stale``. The exit status and
journal priority of each action are :data:`EXIT_CODES` and :data:`PRIORITIES`
(``docs/slurm-pull.md``); :mod:`topocast.cli.pull` prints the report.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from topocast.config import DEFAULT_GUARD_MAX_LOSS
from topocast.errors import TopocastError
from topocast.publish import envelope
from topocast.safeio.files import (
    UnsafePathError,
    check_destination,
    check_path,
    dir_lock,
    out_directory,
    read_nofollow,
    write_file,
)
from topocast.safeio.limits import MAX_PUBLISHED_BYTES, check_size, read_capped

if TYPE_CHECKING:
    from topocast.slurm.converge import Convergence
    from topocast.slurm.live import NodeChanges


__all__ = [
    "DEFAULT_STALE_AFTER",
    "EXIT_CODES",
    "PRIORITIES",
    "PullError",
    "PullOutcome",
    "PullRefused",
    "PulledArtifact",
    "fetch",
    "file_changes",
    "node_loss",
    "pull",
    "read_state",
]

#: exit status of ``topocast pull`` per outcome (``docs/slurm-pull.md``); 2 stays a usage or environment
#: error (bad flags, a source that cannot be read, missing credentials)
EXIT_CODES = {
    "installed": 0,
    "would_install": 0,
    "unchanged": 0,
    "skipped": 0,
    "failed": 1,
    "refused": 3,
    "held": 4,
    "rolled_back": 5,
    "state_not_saved": 6,
    "stale": 7,
    "repaired": 8,
    "inconsistent": 9,
}
#: journal priority (sd-daemon ``<N>`` prefix) per outcome: 3 err, 4 warning, 5 notice, 7 debug
PRIORITIES = {
    "installed": 5,
    "would_install": 5,
    "unchanged": 7,
    "skipped": 4,
    "failed": 3,
    "refused": 3,
    "held": 4,
    "rolled_back": 3,
    "state_not_saved": 3,
    "stale": 3,
    "repaired": 4,
    "inconsistent": 3,
}
#: consecutive runs a source may stay behind the installed generation before the run fails (``stale``)
DEFAULT_STALE_AFTER = 10
STATE_SCHEMA = "topocast.pull-state/v2"


class PullError(TopocastError):
    """A source could not be fetched, or its content failed verification."""


class PullRefused(PullError):
    """The source was read, but what it holds must not be installed (bad envelope, sha256, generation)."""


@dataclass(frozen=True)
class PulledArtifact:
    content: bytes
    sha256: str
    #: the published generation (None for plain files/objects without metadata)
    generation: int | None
    source: str
    encoding: str | None = None


@dataclass(frozen=True)
class PullOutcome:
    ok: bool
    #: installed / unchanged / skipped (older than installed) / held (node loss) / refused / rolled_back / failed;
    #: repaired (the controller had drifted from the file and was put right) / inconsistent (it still differs)
    action: str
    source: str
    dest: Path
    generation: int | None
    sha256: str
    detail: str
    install: Any = None
    #: what the installed file changed: nodes added / removed / moved (old -> new place), None when
    #: nothing was installed (:class:`topocast.slurm.live.NodeChanges`, the live plan's differ)
    changes: NodeChanges | None = None
    #: why the state file could not be written (the file itself was installed / is up to date)
    state_error: str | None = None
    #: said once on the report line: a new source re-baselined the generation check, ...
    notes: list[str] = field(default_factory=list)
    #: consecutive runs the source has been behind the installed generation (skipped / stale)
    behind_runs: int = 0
    #: the generation the state file holds for this destination and source, if any
    installed_generation: int | None = None
    #: the step that refused or failed: verify, write, validate, node-loss, or the install's own
    failed_step: str | None = None
    #: the controller read against the installed file, and its repair
    #: (:class:`topocast.slurm.converge.Convergence`; None: not read this run)
    convergence: Convergence | None = None

    @property
    def where(self) -> Path:
        """The destination as the state file keys it: absolute, links resolved."""
        return Path(os.path.realpath(self.dest))

    @property
    def status(self) -> str:
        """The action, or ``state_not_saved`` when the file is in place but the state write failed."""
        return "state_not_saved" if self.state_error is not None and self.ok else self.action

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.status, 1)

    @property
    def priority(self) -> int:
        return PRIORITIES.get(self.status, 3)

    def line(self) -> str:
        """One bounded line: the path once, action, generation, detail, what moved (a sample of three)."""
        gen = f" generation {self.generation}" if self.generation is not None else ""
        detail = self.detail.removeprefix(f"{self.dest}: ")
        if detail.startswith(self.action + " ") or detail.startswith(self.action + ";"):
            text = f"{self.action}{gen}{detail[len(self.action) :]}"
        else:
            text = f"{self.action}{gen}: {detail}"
        if self.changes is not None:
            text += f"; nodes: {self.changes.summary()}"
        if self.state_error is not None and self.ok:
            text += f"; state not saved: {self.state_error}"
        for note in self.notes:
            text += f"; {note}"
        return bounded(f"{self.where}: {text}")

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` line's fields (``docs/slurm-pull.md``): counts and samples only, never full lists."""
        install = self.install
        changes = None
        if self.changes is not None:
            c = self.changes
            changes = {
                "added": len(c.added),
                "removed": len(c.removed),
                "moved": len(c.moved),
                "sample": {
                    "added": c.added[:3],
                    "removed": c.removed[:3],
                    "moved": {n: list(v) for n, v in list(c.moved.items())[:3]},
                },
            }
        return {
            "action": self.action,
            "status": self.status,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "priority": self.priority,
            "source": self.source,
            "dest": str(self.where),
            "generation": self.generation,
            "installed_generation": self.installed_generation,
            "sha256": self.sha256,
            "detail": bounded(self.detail.removeprefix(f"{self.dest}: ")),
            "failed_step": self.failed_step,
            "validated_by": _validated_by(getattr(install, "checked", "")),
            "applied": getattr(install, "applied", None),
            "reconfigured": bool(getattr(install, "reconfigured", False)),
            "changes": changes,
            "state_saved": self.state_error is None,
            "state_error": self.state_error,
            "behind_runs": self.behind_runs,
            "notes": [bounded(n, 500) for n in self.notes],
            "drift": self.convergence.as_dict() if self.convergence is not None else None,
        }


def _validated_by(checked: str) -> str | None:
    """``slurmctld 26.05.5`` from an install's ``; validated by slurmctld 26.05.5`` (None: no controller ran)."""
    _, found, by = checked.partition("validated by ")
    return by if found else None


def bounded(text: str, limit: int = 4000) -> str:
    """``text`` cut at ``limit`` characters with how much was cut: no report line reaches journald's 48 KB."""
    return text if len(text) <= limit else f"{text[: limit - 40]}... ({len(text) - limit + 40} more characters)"


def _split_s3(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
        raise PullError(f"{uri}: not an s3://bucket/key URI")
    return parsed.netloc, unquote(parsed.path.lstrip("/"))


def _s3_get(uri: str, s3: Any, limit: int = MAX_PUBLISHED_BYTES) -> tuple[bytes, dict[str, str]]:
    """The object's bytes and metadata; its ``ContentLength`` is checked against ``limit`` before reading."""
    bucket, key = _split_s3(uri)
    if s3 is None:
        import boto3

        s3 = boto3.client("s3")
    try:
        resp = s3.get_object(Bucket=bucket, Key=key)
    except Exception as exc:
        raise PullError(f"{uri}: cannot fetch ({exc})") from None
    body = resp["Body"]
    try:
        check_size(resp.get("ContentLength"), limit, uri, PullError)
        data = read_capped(body, limit, uri, PullError)
    finally:
        body.close()  # never drain the rest of an oversized body
    return data, {k.lower(): v for k, v in resp.get("Metadata", {}).items()}


def _gcs_get(uri: str, gcs: Any) -> tuple[bytes, dict[str, str]]:
    parsed = urlparse(uri)
    key = unquote(parsed.path.lstrip("/"))
    if not parsed.netloc or not key:
        raise PullError(f"{uri}: not a gs://bucket/key URI")
    if gcs is None:
        from topocast.gcp.clients import storage_client

        gcs = storage_client()
    try:
        blob = gcs.bucket(parsed.netloc).get_blob(key)
        if blob is None:
            raise PullError(f"{uri}: no such object")
        check_size(blob.size, MAX_PUBLISHED_BYTES, uri, PullError)
        meta = {k.lower(): v for k, v in (blob.metadata or {}).items()}
        # the bytes of exactly the generation whose metadata was read
        data = blob.download_as_bytes(if_generation_match=blob.generation)
    except PullError:
        raise
    except Exception as exc:
        raise PullError(f"{uri}: cannot fetch ({exc})") from None
    check_size(len(data), MAX_PUBLISHED_BYTES, uri, PullError)
    return data, meta


def fetch(
    source: str,
    *,
    ssm: Any = None,
    s3: Any = None,
    gcs: Any = None,
    pointer_bucket: str | None = None,
    pointer_prefix: str | None = None,
) -> PulledArtifact:
    """Fetch and verify ``source`` (ssm://, s3://, gs:// or file://). Clients default to the SDKs' own.

    An SSM envelope that points at S3 must point at its own generation and file,
    in ``pointer_bucket`` under ``pointer_prefix`` when those are given
    (:func:`topocast.publish.envelope.check_pointer`); the object is read only
    up to the envelope's ``size``.
    """
    parsed = urlparse(source)
    if parsed.scheme == "ssm":
        name = unquote(parsed.path)
        if parsed.netloc or not name.startswith("/"):
            raise PullError(f"{source}: expected ssm:///<parameter name> (three slashes)")
        if ssm is None:
            import boto3

            ssm = boto3.client("ssm")
        try:
            value = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
        except Exception as exc:
            raise PullError(f"SSM parameter {name}: cannot read ({exc})") from None
        where = f"SSM parameter {name}"
        try:
            env = envelope.parse(value, where)
            if env.encoding == "s3":
                envelope.check_pointer(env, where, pointer_bucket, pointer_prefix)
            content = envelope.decode(env, where, lambda uri: _s3_get(uri, s3, limit=env.size)[0])
        except envelope.EnvelopeError as exc:
            raise PullRefused(str(exc)) from None
        return PulledArtifact(content, env.sha256, env.generation, source, env.encoding)
    if parsed.scheme in ("s3", "gcs", "gs"):
        content, meta = _s3_get(source, s3) if parsed.scheme == "s3" else _gcs_get(source, gcs)
        digest = hashlib.sha256(content).hexdigest()
        if meta.get("sha256") and meta["sha256"] != digest:
            raise PullRefused(f"{source}: content sha256 {digest} does not match its metadata {meta['sha256']}")
        return PulledArtifact(content, digest, _meta_generation(meta, source), source)
    if parsed.scheme == "file":
        path = Path(unquote(parsed.path))
        try:
            with path.open("rb") as fh:
                content = read_capped(fh, MAX_PUBLISHED_BYTES, source, PullError)
        except OSError as exc:
            raise PullError(f"{source}: cannot read ({exc.strerror})") from None
        return PulledArtifact(content, hashlib.sha256(content).hexdigest(), None, source)
    raise PullError(f"{source}: unsupported source (use ssm:///name, s3://bucket/key, gs://bucket/key or file:///path)")


def _meta_generation(meta: dict[str, str], source: str) -> int | None:
    """The object's ``generation`` metadata (None when absent); outside 0..10**12 it is refused."""
    raw = meta.get("generation")
    if raw is None or raw == "":
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) > envelope.MAX_GENERATION:
        raise PullRefused(f"{source}: generation {raw[:40]!r} is outside 0..{envelope.MAX_GENERATION}; refusing it")
    return int(raw)


def read_state(state_file: Path | None) -> dict[str, dict[str, Any]]:
    """Resolved destination -> what was installed there (source, generation, sha256, behind)."""
    if state_file is None:
        return {}
    try:
        raw = read_nofollow(state_file, 1024 * 1024)
        data = json.loads(raw) if raw else {}
    except (UnsafePathError, ValueError):
        return {}  # a damaged state file only disables the regress check until the next install
    if not isinstance(data, dict):
        return {}
    if data.get("schema") != STATE_SCHEMA:  # the first format: one flat entry, keyed by --dest as spelled
        dest = data.get("dest")
        return {os.path.realpath(dest): data} if isinstance(dest, str) else {}
    entries = data.get("destinations")
    return {k: v for k, v in entries.items() if isinstance(v, dict)} if isinstance(entries, dict) else {}


def _write_state(state_file: Path, entries: dict[str, dict[str, Any]]) -> str | None:
    """Write the state (atomically, never through a link); the reason when that failed, else None."""
    try:
        out_directory(state_file.parent)
        write_file(
            state_file, json.dumps({"schema": STATE_SCHEMA, "destinations": entries}, indent=2) + "\n", mode=0o644
        )
    except OSError as exc:
        return f"{exc.strerror or exc} ({state_file})"
    except UnsafePathError as exc:
        return str(exc)
    return None


def node_loss(installed: bytes | None, new: bytes, max_loss_fraction: float, *, allow: bool) -> str | None:
    """Why ``new`` must not replace ``installed`` (None: it may), by the nodes both files name.

    The pull agent's own blast-radius guard, independent of ``--slurm-conf``:
    whatever the publisher's guard decided, a file that drops more than
    ``max_loss_fraction`` of the installed file's nodes is held unless ``allow``.
    """
    from topocast.pipeline import guard
    from topocast.slurm.topofile import parse_topology

    if installed is None:
        return None
    before = parse_topology(installed.decode("utf-8", "replace"), "installed file")
    if before.kind == "empty" or before.errors:
        return None  # nothing to compare with: validation decides about the new file
    after = parse_topology(new.decode("utf-8", "replace"), "new file")
    if after.errors or not after.node_names():
        return None  # not a loss but a bad file: :func:`unreadable` and validation refuse it with the reason
    previous = set(before.node_names())
    decision = guard.check(previous, set(after.node_names()), max_loss_fraction, override=allow)
    if decision.allow:
        return None
    shown = ", ".join(decision.lost[:5]) + (", ..." if len(decision.lost) > 5 else "")
    return (
        f"the new file drops {len(decision.lost)} of the {len(previous)} installed nodes "
        f"({len(decision.lost) / len(previous):.0%}, over the {max_loss_fraction:.0%} limit: {shown}); "
        "pass --allow-node-loss to install it anyway"
    )


def unreadable(content: bytes, source: str) -> str | None:
    """Why ``content`` is no topology file at all (validate-slurm's parse errors, a sample), else None.

    Checked before the node-loss guard, with or without ``--validate``: a junk file is refused
    with its own reason, never held as a "loss" that ``--allow-node-loss`` could wave through.
    """
    from topocast.slurm.install import sample_errors
    from topocast.slurm.validate import parse_candidate

    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{source}: not UTF-8 text ({exc})"
    parsed = parse_candidate(text, source)
    if parsed.errors:
        return sample_errors(list(parsed.errors))
    if not parsed.node_names():
        return f"{source}: defines no nodes (no switches or blocks with Nodes=)"
    return None


def pull(
    source: str,
    dest: Path | str,
    *,
    reconfigure: bool,
    validate: bool,
    slurm_conf: Path | None,
    state_file: Path | None = None,
    ssm: Any = None,
    s3: Any = None,
    gcs: Any = None,
    live: bool = False,
    allow_reconfigure: bool = True,
    live_max_share: float | None = None,
    slurm: Any = None,
    pointer_bucket: str | None = None,
    pointer_prefix: str | None = None,
    allow_node_loss: bool = False,
    max_node_loss: float = DEFAULT_GUARD_MAX_LOSS,
    stale_after: int = DEFAULT_STALE_AFTER,
    updater: Any = None,
) -> PullOutcome:
    """Fetch ``source`` and install it at ``dest`` unless it is older than what is installed.

    The single run of the pull agent (``topocast pull``; ``--watch`` repeats it). ``slurm``: a
    :class:`topocast.slurm.controller.SlurmInstall` (default: this host's Slurm). Everything after
    the fetch runs under the destination directory's lock: the generation check, the node-loss
    guard, the install (live or by reconfigure) and the state update, so two pulls racing
    (generation 2 and 1) always end with 2 installed. A source that cannot be read raises
    :class:`PullError`; every other result is a :class:`PullOutcome` (``exit_code``, ``line()``).
    ``updater``: how live moves reach the controller (:class:`topocast.slurm.live.NodeUpdater`, e.g.
    :class:`topocast.slurm.rest.RestUpdater` for ``--via slurmrestd``); implies ``live``.
    """
    from topocast.slurm.install import announce, install_topology
    from topocast.slurm.live import Costs, apply_topology

    dest = Path(dest)
    state_file = Path(state_file) if state_file is not None else None
    key = os.path.realpath(dest)
    announce(f"fetching {source}")
    try:
        pulled = fetch(source, ssm=ssm, s3=s3, gcs=gcs, pointer_bucket=pointer_bucket, pointer_prefix=pointer_prefix)
    except PullRefused as exc:
        return PullOutcome(False, "refused", source, dest, None, "", f"{exc}; nothing written", failed_step="verify")
    notes: list[str] = []
    extra: dict[str, Any] = {}

    def outcome(
        ok: bool,
        action: str,
        detail: str,
        install: Any = None,
        changes: NodeChanges | None = None,
        step: str | None = None,
    ) -> PullOutcome:
        step = step if step is not None else getattr(install, "failed_step", None)
        return PullOutcome(
            ok,
            action,
            source,
            dest,
            pulled.generation,
            pulled.sha256,
            detail,
            install,
            changes,
            notes=notes,
            failed_step=step,
            **extra,
        )

    try:
        check_destination(dest)
        if state_file is not None:
            check_path(state_file.parent)  # root writes the state file too: nobody else may plant a link there
    except UnsafePathError as exc:
        return outcome(False, "refused", str(exc), step="write")
    announce(f"waiting for the lock on {dest.parent}")
    with dir_lock(dest.parent):
        entries = read_state(state_file)
        entry = entries.get(key)
        # what the controller part of each path cost on earlier runs here (whatever the source)
        costs = Costs.from_dict((entry or {}).get("costs"))
        if entry is not None and entry.get("source") != source:
            was = entry.get("generation")
            notes.append(
                f"new source (was {entry.get('source')}"
                + (f", generation {was}" if isinstance(was, int) else "")
                + "): the generation check starts over from this one"
            )
            entry = None
        installed_gen = entry.get("generation") if entry is not None else None
        extra["installed_generation"] = installed_gen if isinstance(installed_gen, int) else None
        if isinstance(installed_gen, int) and pulled.generation is not None and pulled.generation < installed_gen:
            return _behind(entries, key, entry or {}, state_file, stale_after, outcome, extra, installed_gen)
        try:
            installed = read_nofollow(dest, MAX_PUBLISHED_BYTES)
        except UnsafePathError as exc:
            return outcome(False, "refused", str(exc), step="write")
        if installed != pulled.content:
            bad = unreadable(pulled.content, source)
            if bad is not None:
                return outcome(False, "refused", f"{bad}; nothing written", step="validate")
            held = node_loss(installed, pulled.content, max_node_loss, allow=allow_node_loss)
            if held is not None:
                return outcome(False, "held", f"{held}; nothing written", step="node-loss")
        if live or updater is not None:
            result = apply_topology(
                pulled.content,
                dest,
                expected_sha256=pulled.sha256,
                validate=validate,
                slurm_conf=slurm_conf,
                install=slurm,
                max_share=live_max_share,
                allow_reconfigure=allow_reconfigure,
                updater=updater,
                costs=costs,
            )
        else:
            result = install_topology(
                pulled.content,
                dest,
                expected_sha256=pulled.sha256,
                validate=validate,
                reconfigure=reconfigure,
                slurm_conf=slurm_conf,
                slurm=slurm,
            )
        if result.ok and state_file is not None:
            record: dict[str, Any] = {
                "source": source,
                "generation": pulled.generation,
                "sha256": pulled.sha256,
                "installed_at": datetime.now(UTC).isoformat(),
            }
            learned = costs.learn(getattr(result, "timings", {})).as_dict()
            if learned:
                record["costs"] = learned
            same = entry is not None and all(entry.get(k) == record[k] for k in ("source", "generation", "sha256"))
            if not same or "behind" in (entry or {}):  # written when it changed, or the source caught up again
                extra["state_error"] = _write_state(state_file, {**entries, key: record})
        changes = file_changes(installed, pulled.content) if result.ok and result.action == "installed" else None
        if result.ok and result.action == "unchanged" and (reconfigure or live or updater is not None):
            # the file is in place: does the controller still place every node where it says?
            fixed = _converge(pulled.content, dest, slurm, slurm_conf, updater, live, allow_reconfigure, notes)
            if fixed is not None and fixed.drift:
                action = "repaired" if fixed.ok else "inconsistent"
                return replace(outcome(fixed.ok, action, f"{dest}: {fixed.line()}", result), convergence=fixed)
            if fixed is not None:
                read = fixed.drift
                said = f"; the controller shows the file (read by {read.read_by} in {read.seconds * 1000:.0f} ms)"
                return replace(outcome(True, "unchanged", result.message + said, result), convergence=fixed)
    return outcome(result.ok, result.action, result.message, result, changes)


def _converge(
    content: bytes,
    dest: Path,
    slurm: Any,
    slurm_conf: Path | None,
    updater: Any,
    live: bool,
    allow_reconfigure: bool,
    notes: list[str],
) -> Convergence | None:
    """Read the controller against the installed file and repair drift; None when it was not read.

    A controller that cannot be read is a note on the line, not a failure: the file is in place.
    """
    from topocast.slurm.conffile import slurm_conf_nodes
    from topocast.slurm.controller import SlurmInstall
    from topocast.slurm.converge import converge
    from topocast.slurm.install import announce
    from topocast.slurm.live import ScontrolUpdater, placements

    announce("reading the controller against the installed file")
    found = placements(content.decode("utf-8", "replace"), str(dest))
    if found.errors or found.problems:  # a switch with two parents: no one place per node to compare
        notes.append(f"the controller was not compared with the file ({(found.errors or found.problems)[0]})")
        return None
    kinds = [(name, kind) for name, kind, _ in found.topologies if kind in ("tree", "block")]
    via = updater if updater is not None else ScontrolUpdater(slurm or SlurmInstall.find(), slurm_conf, str(dest))
    try:
        # without slurm.conf: scontrol cannot say (None), and slurmrestd's partial view needs none
        nodes = slurm_conf_nodes(slurm_conf) if slurm_conf is not None else None
        result = converge(
            found.specs,
            kinds,
            via,
            allow_live=live or updater is not None,
            allow_reconfigure=allow_reconfigure,
            nodes=nodes,
        )
    except TopocastError as exc:
        notes.append(f"could not read the controller to compare it with the file ({exc})")
        return None
    return result


def _behind(
    entries: dict[str, dict[str, Any]],
    key: str,
    entry: dict[str, Any],
    state_file: Path | None,
    stale_after: int,
    outcome: Any,
    extra: dict[str, Any],
    installed_gen: int,
) -> PullOutcome:
    """The source holds an older generation than the one installed: skip, and count the runs in a row."""
    raw = entry.get("behind")
    behind: dict[str, Any] = raw if isinstance(raw, dict) else {}
    count, started = behind.get("runs"), behind.get("since")
    runs = (count if isinstance(count, int) else 0) + 1
    since = started if isinstance(started, str) else datetime.now(UTC).isoformat(timespec="seconds")
    extra["behind_runs"] = runs
    if state_file is not None:
        extra["state_error"] = _write_state(
            state_file, {**entries, key: {**entry, "behind": {"runs": runs, "since": since}}}
        )
    probe = outcome(True, "skipped", "")
    what = f"{probe.source} holds generation {probe.generation}, older than the installed {installed_gen}"
    if runs >= stale_after:
        return outcome(
            False,
            "stale",
            f"{what}, for {runs} runs in a row (since {since}): the source is stale or another deployment; "
            "kept the installed file",
        )
    return outcome(True, "skipped", f"{what}; kept (run {runs} of {stale_after} before this fails as stale)")


def file_changes(installed: bytes | None, new: bytes) -> NodeChanges | None:
    """What moved between the file that was installed and the new one (None if either does not parse)."""
    from topocast.slurm.live import node_changes

    try:
        return node_changes(
            installed.decode("utf-8", "replace") if installed is not None else None, new.decode("utf-8", "replace")
        )
    except TopocastError:
        return None
