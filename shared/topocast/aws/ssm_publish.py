"""Publish Slurm artifacts to SSM Parameter Store for the head node's pull agent.

One parameter per file, ``<prefix>/<artifact file>`` (``topology-tree.conf``,
``topology-block.conf``, ``topology.yaml``; default prefix ``/topocast/<cluster>/slurm``), so
the head node picks the plugin it runs by the parameter it pulls; each parameter holds
holding a :mod:`topocast.publish.envelope`: raw text when it fits 4 KB, else
gzip+base64 (Standard, or Advanced up to 8 KB when ``allow_advanced``), else a
pointer to a copy in S3 (``s3://<bucket>/<s3_prefix>/<generation>/<file>``) with
its sha256. moto does not enforce SSM size limits, so they are enforced here.

Never regress (:class:`topocast.publish.base.FilePublisher`): the current
parameter is read first; if it already holds a newer generation the file is
skipped and logged (not an error: a slow, older render simply lost the race).
The same generation with the same sha256 is a no-op.
Residual race: SSM has no conditional put, so two publishers running at the
same instant could still interleave; the debounce stage keeps one render (and
so one publish) per cluster at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from topocast.aws.retry import error_code, with_retries
from topocast.aws.s3_objects import S3Objects
from topocast.ports.records import ManifestEntry
from topocast.publish import envelope
from topocast.publish.base import FileOutcome, FilePublisher

log = logging.getLogger(__name__)


class SsmPublisher(FilePublisher):
    """:class:`topocast.publish.base.Publisher` for SSM Parameter Store (+ S3 for big files)."""

    name = "ssm"
    nothing_detail = "no artifact for SSM in the manifest"

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

    def target(self, entry: ManifestEntry) -> str:
        return self.parameter_name(self.installed_name(entry))

    def s3_key(self, generation: int, file: str) -> str:
        return "/".join(p for p in (self.s3_prefix, f"{generation:012d}", file) if p)

    def publish_one(self, generation: int, entry: ManifestEntry, content: bytes) -> tuple[FileOutcome, str]:
        installed = self.installed_name(entry)
        name = self.parameter_name(installed)
        current = self._current(name)
        if current is not None and current.generation > generation:
            log.warning("%s holds generation %d, not publishing older %d", name, current.generation, generation)
            return "older", f"{name} holds generation {current.generation}"
        if current is not None and current.generation == generation and current.sha256 == entry.sha256:
            return "current", f"{name} already holds generation {generation}"
        key = self.s3_key(generation, installed)
        env = envelope.plan_value(
            content,
            generation=generation,
            file=installed,
            fmt=entry.format,
            s3_uri=f"s3://{self.bucket}/{key}",
            allow_advanced=self.allow_advanced,
            min_tier="Advanced" if current is not None and current.tier == "Advanced" else "Standard",
        )
        if env.encoding == "s3":
            S3Objects(self.bucket, self.s3).put(
                key,
                content,
                content_type=entry.media_type,
                metadata={"generation": str(generation), "sha256": entry.sha256},
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


def from_inputs(inputs: Any) -> SsmPublisher:
    """Registry factory (``ssm``, registered by :mod:`topocast.aws.root`): large values go to
    ``s3://<bucket>/<prefix>/<cluster>/published/``."""
    s = inputs.settings
    return SsmPublisher(
        s.ssm_path,
        inputs.sdk_client("ssm"),
        inputs.sdk_client("s3"),
        s.bucket or "",
        s3_prefix=f"{s.prefix.strip('/')}/{s.cluster}/published",  # what the IAM roles allow
        allow_advanced=s.ssm_advanced_tier,
    )
