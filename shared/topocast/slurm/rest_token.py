"""The Slurm JWT a slurmrestd client sends, read from where operators keep secrets.

Sources (``--token-from`` / ``TOPOCAST_SLURMREST_TOKEN``):

* ``/path`` or ``file:///path``: a file holding the token (what ``scontrol token`` prints,
  ``SLURM_JWT=eyJ...``, or the bare token), read like the files the agent installs
  (:func:`topocast.safeio.files.read_credential`): never through a link, owned by root or the
  user topocast runs as, readable by nobody else, in directories nobody else can write;
* ``ssm:///name``: an SSM SecureString parameter (decrypted);
* ``secretsmanager://name`` or an ARN ``arn:aws:secretsmanager:...`` / ``arn:aws:ssm:...:parameter/...``;
* ``gsm://projects/P/secrets/S`` (``/versions/V``, default ``latest``): GCP Secret Manager,
  read over its REST API with application-default credentials (no extra client library).

The user the token was issued to (``X-SLURM-USER-NAME``) is the token's ``sun`` claim unless
given; its ``exp`` claim (read without checking the signature: topocast has no key) says when it
expires, so a refusal can say "expired at ..." rather than "wrong key or user". A token must be
printable ASCII (a JWT is), so it can be sent as a header. :class:`SlurmToken` never shows the
token: not in its repr, str or any error message.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from topocast.errors import TopocastError
from topocast.safeio.files import UnsafePathError, read_credential

__all__ = ["SlurmToken", "TokenError", "read_token", "token_from_text"]

MAX_TOKEN_BYTES = 16 * 1024


class TokenError(TopocastError):
    """The token could not be read (the message names the source, never the token)."""


@dataclass(frozen=True)
class SlurmToken:
    value: str = field(repr=False)
    #: the Slurm user the token was issued to (``X-SLURM-USER-NAME``); None: not sent
    user: str | None = None
    #: where it came from, for messages
    source: str = "token"
    #: the token's ``exp`` claim (None: none, or not a JWT)
    expires: datetime | None = None

    def headers(self) -> dict[str, str]:
        out = {"X-SLURM-USER-TOKEN": self.value}
        if self.user:
            out["X-SLURM-USER-NAME"] = self.user
        return out

    def __repr__(self) -> str:
        return f"SlurmToken(user={self.user!r}, source={self.source!r}, expires={self.expires}, value=<hidden>)"

    __str__ = __repr__


def _claims(token: str) -> dict[str, Any]:
    """The payload of a JWT, read without checking the signature ({} when it is not a JWT)."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return {}
    return payload if isinstance(payload, dict) else {}


def _claim_user(claims: dict[str, Any]) -> str | None:
    """The ``sun`` claim (Slurm's user name claim)."""
    user = claims.get("sun")
    return user if isinstance(user, str) and user else None


def _claim_expires(claims: dict[str, Any]) -> datetime | None:
    """The ``exp`` claim (seconds since the epoch) as a UTC time."""
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    try:
        return datetime.fromtimestamp(exp, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def token_from_text(text: str, source: str, user: str | None = None) -> SlurmToken:
    """A token from what a source holds: ``SLURM_JWT=...`` (``scontrol token``'s line) or the token."""
    value = text.strip()
    if value.startswith("SLURM_JWT="):
        value = value.removeprefix("SLURM_JWT=").strip()
    if not value or any(c.isspace() for c in value):
        raise TokenError(f"{source}: does not hold one token (expected what `scontrol token` prints)")
    bad = next((i for i, c in enumerate(value) if not ("!" <= c <= "~")), None)
    if bad is not None:  # an HTTP header carries latin-1 at most; a JWT is base64url and dots
        raise TokenError(
            f"{source}: the token has a character that is not printable ASCII (at position {bad + 1}); "
            "not a Slurm token"
        )
    claims = _claims(value)
    return SlurmToken(value, user or _claim_user(claims), source, _claim_expires(claims))


def _read_file(path: Path, source: str) -> str:
    try:
        raw = read_credential(path, MAX_TOKEN_BYTES, "token file")
    except UnsafePathError as exc:  # names the file
        raise TokenError(str(exc)) from None
    except OSError as exc:
        raise TokenError(f"{source}: cannot read the token file ({exc.strerror})") from None
    return raw.decode("utf-8", "replace")


def _gsm(name: str, source: str, session: Any) -> str:
    """The payload of a Secret Manager version (``projects/P/secrets/S/versions/V``)."""
    if session is None:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        session = AuthorizedSession(credentials)
    try:
        # google-auth's transport (requests) carries the credential; no redirect is followed with it
        resp = session.get(f"https://secretmanager.googleapis.com/v1/{name}:access", timeout=30, allow_redirects=False)
    except Exception as exc:  # transport errors of requests / google-auth
        raise TokenError(f"{source}: cannot read the secret ({type(exc).__name__})") from None
    if resp.status_code != 200:
        raise TokenError(f"{source}: cannot read the secret (HTTP {resp.status_code})")
    try:
        return base64.b64decode(resp.json()["payload"]["data"]).decode("utf-8", "replace")
    except (KeyError, TypeError, ValueError):
        raise TokenError(f"{source}: the answer holds no secret payload") from None


def read_token(
    source: str,
    *,
    user: str | None = None,
    session: Any = None,
    gcp_session: Any = None,
    read_arn: Callable[[str], tuple[str, str | None]] | None = None,
) -> SlurmToken:
    """The token held at ``source`` (see the module doc). ``session``: a boto3 session (default boto3)."""
    parsed = urlparse(source)
    if source.startswith("arn:") or parsed.scheme in ("ssm", "secretsmanager"):
        if parsed.scheme == "ssm":
            name = unquote(parsed.path)
            if parsed.netloc or not name.startswith("/") or not name.strip("/"):
                raise TokenError(f"{source}: expected ssm:///<parameter name> (three slashes)")
            text = _aws_read(
                lambda s: s.client("ssm").get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"],
                source,
                session,
            )
        elif parsed.scheme == "secretsmanager":
            secret_id = unquote(parsed.netloc + parsed.path)
            if not secret_id.strip("/"):
                raise TokenError(f"{source}: expected secretsmanager://<secret name or ARN>")
            text = _aws_read(
                lambda s: s.client("secretsmanager").get_secret_value(SecretId=secret_id)["SecretString"],
                source,
                session,
            )
        else:
            if read_arn is None:
                from topocast.providers.aws.sdk import read_secret_arn

                def read_arn(ref: str) -> tuple[str, str | None]:
                    return read_secret_arn(ref, session=session)

            try:
                text = read_arn(source)[0]
            except TopocastError as exc:
                raise TokenError(" ".join(str(exc).split())) from None
        return token_from_text(text, source, user)
    if parsed.scheme == "gsm":
        name = (parsed.netloc + parsed.path).strip("/")
        parts = name.split("/")
        if len(parts) == 4:
            name += "/versions/latest"
        if not (len(name.split("/")) == 6 and parts[0] == "projects" and parts[2] == "secrets"):
            raise TokenError(f"{source}: expected gsm://projects/PROJECT/secrets/SECRET[/versions/VERSION]")
        return token_from_text(_gsm(name, source, gcp_session), source, user)
    if parsed.scheme in ("", "file"):
        path = Path(unquote(parsed.path) if parsed.scheme == "file" else source)
        return token_from_text(_read_file(path, source), source, user)
    raise TokenError(
        f"{source}: unsupported token source (use a file, ssm:///name, secretsmanager://name, an ARN or gsm://projects/..)"
    )


def _aws_read(read: Callable[[Any], str], source: str, session: Any) -> str:
    if session is None:
        import boto3

        session = boto3
    try:
        return read(session)
    except Exception as exc:  # botocore ClientError and friends; their message names the cause, not the value
        raise TokenError(f"{source}: cannot read the token ({' '.join(str(exc).split())})") from None
