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
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from topocast.errors import TopocastError
from topocast.publish import envelope


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
    #: installed / unchanged / skipped (older than installed) / refused / rolled_back / failed
    action: str
    source: str
    dest: Path
    generation: int | None
    sha256: str
    detail: str
    install: Any = None


def _split_s3(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
        raise PullError(f"{uri}: not an s3://bucket/key URI")
    return parsed.netloc, unquote(parsed.path.lstrip("/"))


def _s3_get(uri: str, s3: Any) -> tuple[bytes, dict[str, str]]:
    bucket, key = _split_s3(uri)
    if s3 is None:
        import boto3

        s3 = boto3.client("s3")
    try:
        resp = s3.get_object(Bucket=bucket, Key=key)
    except Exception as exc:
        raise PullError(f"{uri}: cannot fetch ({exc})") from None
    return resp["Body"].read(), {k.lower(): v for k, v in resp.get("Metadata", {}).items()}


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
        meta = {k.lower(): v for k, v in (blob.metadata or {}).items()}
        # the bytes of exactly the generation whose metadata was read
        return blob.download_as_bytes(if_generation_match=blob.generation), meta
    except PullError:
        raise
    except Exception as exc:
        raise PullError(f"{uri}: cannot fetch ({exc})") from None


def fetch(source: str, *, ssm: Any = None, s3: Any = None, gcs: Any = None) -> PulledArtifact:
    """Fetch and verify ``source`` (ssm://, s3://, gcs:// or file://). Clients default to the SDKs' own."""
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
        try:
            env = envelope.parse(value, f"SSM parameter {name}")
            content = envelope.decode(env, f"SSM parameter {name}", lambda uri: _s3_get(uri, s3)[0])
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
            content = path.read_bytes()
        except OSError as exc:
            raise PullError(f"{source}: cannot read ({exc.strerror})") from None
        return PulledArtifact(content, hashlib.sha256(content).hexdigest(), None, source)
    raise PullError(
        f"{source}: unsupported source (use ssm:///name, s3://bucket/key, gcs://bucket/key or file:///path)"
    )


def _read_state(state_file: Path | None) -> dict[str, Any]:
    if state_file is None or not state_file.is_file():
        return {}
    try:
        data = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return {}  # a damaged state file only disables the regress check until the next install
    return data if isinstance(data, dict) else {}


def _write_state(state_file: Path, data: dict[str, Any]) -> None:
    state_file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=state_file.parent, prefix=f".{state_file.name}.")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2)
    os.replace(tmp, state_file)


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
) -> PullOutcome:
    """Fetch ``source`` and install it at ``dest`` unless it is older than what is installed.

    ``slurm``: a :class:`topocast.slurm.controller.SlurmInstall` (default: this host's Slurm).
    """
    from topocast.slurm.install import install_topology
    from topocast.slurm.live import apply_topology

    dest = Path(dest)
    state_file = Path(state_file) if state_file is not None else None
    pulled = fetch(source, ssm=ssm, s3=s3, gcs=gcs)
    state = _read_state(state_file)
    installed_gen = state.get("generation")
    if (
        isinstance(installed_gen, int)
        and pulled.generation is not None
        and pulled.generation < installed_gen
        and state.get("dest") == str(dest)
    ):
        return PullOutcome(
            True,
            "skipped",
            source,
            dest,
            pulled.generation,
            pulled.sha256,
            f"{source} holds generation {pulled.generation}, older than installed {installed_gen}; kept",
        )
    if live:
        result = apply_topology(
            pulled.content,
            dest,
            expected_sha256=pulled.sha256,
            validate=validate,
            slurm_conf=slurm_conf,
            install=slurm,
            max_share=live_max_share,
            allow_reconfigure=allow_reconfigure,
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
    return PullOutcome(result.ok, result.action, source, dest, pulled.generation, pulled.sha256, result.message, result)
