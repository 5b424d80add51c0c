"""Publish Slurm artifacts to SSM Parameter Store for the head node's pull agent.

One parameter per file, ``<prefix>/<artifact file>`` (``topology-tree.conf``,
``topology-block.conf``, ``topology.yaml``; default prefix ``/topocast/<cluster>/slurm``), so
the head node picks the plugin it runs by the parameter it pulls; each parameter holds
holding a :mod:`topocast.publish.envelope`: raw text when it fits 4 KB, else
gzip+base64 (Standard, or Advanced up to 8 KB when ``allow_advanced``), else a
pointer to a copy in S3 (``s3://<bucket>/<s3_prefix>/<generation>/<file>``) with
its sha256. moto does not enforce SSM size limits, so they are enforced here.

Never regress: the current parameter is read first; if it already holds a newer
generation the file is skipped and logged (not an error: a slow, older render
simply lost the race). The same generation with the same sha256 is a no-op.
Residual race: SSM has no conditional put, so two publishers running at the
same instant could still interleave; the debounce stage keeps one render (and
so one publish) per cluster at a time.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Collection, Mapping
from typing import Any

from topocast.aws.retry import error_code, with_retries
from topocast.errors import TopocastError
from topocast.pipeline.artifacts import Manifest, ManifestEntry
from topocast.publish import envelope
from topocast.publish.base import PublishResult

log = logging.getLogger(__name__)


class SsmPublisher:
    """:class:`topocast.publish.base.Publisher` for SSM Parameter Store (+ S3 for big files)."""

    name = "ssm"

    def __init__(
        self,
        prefix: str,
        ssm: Any,
        s3: Any,
        bucket: str,
        *,
        s3_prefix: str | None = None,
        allow_advanced: bool = False,
        formats: Collection[str] | None = None,
    ) -> None:
        if not prefix.startswith("/"):
            raise ValueError(f"SSM parameter prefix must start with '/', got {prefix!r}")
        self.prefix = prefix.rstrip("/")
        self.ssm = ssm
        self.s3 = s3
        self.bucket = bucket
        self.s3_prefix = (s3_prefix if s3_prefix is not None else self.prefix).strip("/")
        self.allow_advanced = allow_advanced
        self.formats = set(formats) if formats is not None else None

    def wants(self, entry: ManifestEntry) -> bool:
        return entry.format in self.formats if self.formats is not None else entry.format.startswith("slurm")

    def installed_name(self, entry: ManifestEntry) -> str:
        return entry.file

    def parameter_name(self, file: str) -> str:
        return f"{self.prefix}/{file}"

    def s3_key(self, generation: int, file: str) -> str:
        return "/".join(p for p in (self.s3_prefix, f"{generation:012d}", file) if p)

    def publish(self, manifest: Manifest, artifacts: Mapping[str, bytes]) -> PublishResult:
        entries = [e for e in manifest.artifacts if self.wants(e)]
        if not entries:
            return PublishResult(False, f"generation {manifest.generation}: no artifact for SSM in the manifest")
        done: dict[str, list[str]] = {"written": [], "current": [], "older": []}
        for entry in entries:
            status, what = self._publish_one(manifest.generation, entry, artifacts)
            done[status].append(what)
        detail = (
            f"generation {manifest.generation}: {len(done['written'])} written, {len(done['current'])} already current"
        )
        if done["older"]:
            detail += f", {len(done['older'])} skipped (a newer generation is published): {'; '.join(done['older'])}"
        # "older" is not an error (a slow render lost the race) but this manifest is not what is served
        return PublishResult(not done["older"], detail, done["written"], done["current"] + done["older"])

    def _publish_one(self, generation: int, entry: ManifestEntry, artifacts: Mapping[str, bytes]) -> tuple[str, str]:
        installed = self.installed_name(entry)
        name = self.parameter_name(installed)
        try:
            content = artifacts[entry.file]
        except KeyError:
            raise TopocastError(f"{name}: the manifest lists {entry.file!r} but its bytes were not passed") from None
        if hashlib.sha256(content).hexdigest() != entry.sha256:
            raise TopocastError(f"{name}: {entry.file} does not match the manifest's sha256; refusing to publish")
        current = self._current(name)
        if current is not None and current.generation > generation:
            log.warning("%s holds generation %d, not publishing older %d", name, current.generation, generation)
            return "older", f"{name} holds generation {current.generation}"
        if current is not None and current.generation == generation and current.sha256 == entry.sha256:
            return "current", f"{name} already holds generation {generation}"
        env = envelope.plan_value(
            content,
            generation=generation,
            file=installed,
            fmt=entry.format,
            s3_uri=f"s3://{self.bucket}/{self.s3_key(generation, installed)}",
            allow_advanced=self.allow_advanced,
            min_tier="Advanced" if current is not None and current.tier == "Advanced" else "Standard",
        )
        if env.encoding == "s3":
            key = self.s3_key(generation, installed)
            with_retries(
                lambda: self.s3.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=content,
                    ContentType=entry.media_type,
                    Metadata={"generation": str(generation), "sha256": entry.sha256},
                ),
                what=f"upload s3://{self.bucket}/{key}",
            )
        with_retries(
            lambda: self.ssm.put_parameter(
                Name=name,
                Value=env.dumps(),
                Type="String",
                Tier=env.tier,
                Overwrite=True,
                Description=f"topocast {entry.format} generation {generation} ({env.encoding})",
            ),
            what=f"put SSM parameter {name}",
        )
        log.info("%s <- generation %d (%s, %s tier)", name, generation, env.encoding, env.tier)
        return "written", name

    def _current(self, name: str) -> envelope.Envelope | None:
        try:
            resp = with_retries(lambda: self.ssm.get_parameter(Name=name), what=f"read SSM parameter {name}")
        except Exception as exc:
            if error_code(exc) == "ParameterNotFound":
                return None
            raise
        try:
            return envelope.parse(resp["Parameter"]["Value"], name)
        except envelope.EnvelopeError as exc:
            # whatever is there is not ours or is damaged; replacing it with a good value is the fix
            log.warning("overwriting unreadable parameter: %s", exc)
            return None
