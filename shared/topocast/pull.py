"""The head-node pull agent: fetch a published file, verify it, install it.

Sources:

* ``ssm:///topocast/<cluster>/slurm/topology.conf``: an SSM parameter holding a
  :mod:`topocast.publish.envelope` (raw, gzip+base64 or an S3 pointer, resolved
  transparently). The decoded bytes must hash to the envelope's sha256, else
  the pull fails naming the parameter, before anything is written.
* ``s3://bucket/key``: the object itself (verified against its ``sha256``
  metadata when present).
* ``gcs://bucket/key`` (or ``gs://``): a Cloud Storage object as the GCP
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
the agent's user (:mod:`topocast.safe_files`); every fetch is size-capped; a file
that drops more than 10% of the installed file's nodes is held (:func:`node_loss`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from topocast.errors import TopocastError
from topocast.limits import MAX_PUBLISHED_BYTES, check_size, read_capped
from topocast.pipeline.guard import DEFAULT_MAX_LOSS_FRACTION
from topocast.publish import envelope
from topocast.safe_files import UnsafePathError, check_destination, dir_lock, read_nofollow

if TYPE_CHECKING:
    from topocast.slurm.live import NodeChanges


class PullError(TopocastError):
    """A source could not be fetched, or its content failed verification."""


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
    #: installed / unchanged / skipped (older than installed) / held (node loss) / refused / rolled_back / failed
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

    def line(self) -> str:
        """The one-line report: action, generation, detail and, after an install, what moved."""
        moved = f"; nodes: {self.changes.summary()}" if self.changes is not None else ""
        return f"{self.dest}: {self.action} (generation {self.generation}): {self.detail}{moved}"


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
        raise PullError(f"{uri}: not a gcs://bucket/key URI")
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
    """Fetch and verify ``source`` (ssm://, s3://, gcs:// or file://). Clients default to the SDKs' own.

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
            raise PullError(str(exc)) from None
        return PulledArtifact(content, env.sha256, env.generation, source, env.encoding)
    if parsed.scheme in ("s3", "gcs", "gs"):
        content, meta = _s3_get(source, s3) if parsed.scheme == "s3" else _gcs_get(source, gcs)
        digest = hashlib.sha256(content).hexdigest()
        if meta.get("sha256") and meta["sha256"] != digest:
            raise PullError(f"{source}: content sha256 {digest} does not match its metadata {meta['sha256']}")
        generation = int(meta["generation"]) if meta.get("generation", "").isdigit() else None
        return PulledArtifact(content, digest, generation, source)
    if parsed.scheme == "file":
        path = Path(unquote(parsed.path))
        try:
            with path.open("rb") as fh:
                content = read_capped(fh, MAX_PUBLISHED_BYTES, source, PullError)
        except OSError as exc:
            raise PullError(f"{source}: cannot read ({exc.strerror})") from None
        return PulledArtifact(content, hashlib.sha256(content).hexdigest(), None, source)
    raise PullError(
        f"{source}: unsupported source (use ssm:///name, s3://bucket/key, gcs://bucket/key or file:///path)"
    )


def _read_state(state_file: Path | None) -> dict[str, Any]:
    if state_file is None:
        return {}
    try:
        raw = read_nofollow(state_file, 1024 * 1024)
        data = json.loads(raw) if raw else {}
    except (UnsafePathError, ValueError):
        return {}  # a damaged state file only disables the regress check until the next install
    return data if isinstance(data, dict) else {}


def _write_state(state_file: Path, data: dict[str, Any]) -> None:
    state_file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=state_file.parent, prefix=f".{state_file.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2)
    os.replace(tmp, state_file)


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
    live_max_share: float = 0.1,
    slurm: Any = None,
    pointer_bucket: str | None = None,
    pointer_prefix: str | None = None,
    allow_node_loss: bool = False,
    max_node_loss: float = DEFAULT_MAX_LOSS_FRACTION,
    updater: Any = None,
) -> PullOutcome:
    """Fetch ``source`` and install it at ``dest`` unless it is older than what is installed.

    ``slurm``: a :class:`topocast.slurm.controller.SlurmInstall` (default: this host's Slurm).
    ``updater``: how live moves reach the controller (:class:`topocast.slurm.live.NodeUpdater`, e.g.
    :class:`topocast.slurm.rest.RestUpdater` for ``--via slurmrestd``); implies ``live``.
    Everything after the fetch runs under the destination directory's lock: the
    generation check, the node-loss guard, the install (live or by reconfigure) and the
    state update, so two pulls racing (generation 2 and 1) always end with 2 installed.
    """
    from topocast.slurm.install import install_topology
    from topocast.slurm.live import apply_topology

    dest = Path(dest)
    state_file = Path(state_file) if state_file is not None else None
    pulled = fetch(source, ssm=ssm, s3=s3, gcs=gcs, pointer_bucket=pointer_bucket, pointer_prefix=pointer_prefix)

    def outcome(
        ok: bool, action: str, detail: str, install: Any = None, changes: NodeChanges | None = None
    ) -> PullOutcome:
        return PullOutcome(ok, action, source, dest, pulled.generation, pulled.sha256, detail, install, changes)

    try:
        check_destination(dest)
    except UnsafePathError as exc:
        return outcome(False, "refused", str(exc))
    with dir_lock(dest.parent):
        state = _read_state(state_file)
        installed_gen = state.get("generation")
        if (
            isinstance(installed_gen, int)
            and pulled.generation is not None
            and pulled.generation < installed_gen
            and state.get("dest") == str(dest)
        ):
            return outcome(
                True,
                "skipped",
                f"{source} holds generation {pulled.generation}, older than installed {installed_gen}; kept",
            )
        try:
            installed = read_nofollow(dest, MAX_PUBLISHED_BYTES)
        except UnsafePathError as exc:
            return outcome(False, "refused", str(exc))
        held = (
            None
            if installed == pulled.content
            else node_loss(installed, pulled.content, max_node_loss, allow=allow_node_loss)
        )
        if held is not None:
            return outcome(False, "held", f"{dest}: {held}; nothing written")
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
            _write_state(
                state_file,
                {
                    "source": source,
                    "dest": str(dest),
                    "generation": pulled.generation,
                    "sha256": pulled.sha256,
                    "installed_at": datetime.now(UTC).isoformat(),
                },
            )
        changes = _changes(installed, pulled.content) if result.ok and result.action == "installed" else None
    return outcome(result.ok, result.action, result.message, result, changes)


def _changes(installed: bytes | None, new: bytes) -> NodeChanges | None:
    """What moved between the file that was installed and the new one (None if either does not parse)."""
    from topocast.slurm.live import node_changes

    try:
        return node_changes(
            installed.decode("utf-8", "replace") if installed is not None else None, new.decode("utf-8", "replace")
        )
    except TopocastError:
        return None
