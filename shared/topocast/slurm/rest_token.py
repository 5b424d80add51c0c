"""The Slurm JWT a slurmrestd client sends, read from where operators keep secrets.

Sources (``--token-from`` / ``TOPOCAST_SLURMREST_TOKEN``):

* ``/path`` or ``file:///path``: a file holding the token (what ``scontrol token`` prints,
  ``SLURM_JWT=eyJ...``, or the bare token); a file readable by group or others is refused;
* ``ssm:///name``: an SSM SecureString parameter (decrypted);
* ``secretsmanager://name`` or an ARN ``arn:aws:secretsmanager:...`` / ``arn:aws:ssm:...:parameter/...``;
* ``gsm://projects/P/secrets/S`` (``/versions/V``, default ``latest``): GCP Secret Manager,
  read over its REST API with application-default credentials (no extra client library).

The user the token was issued to (``X-SLURM-USER-NAME``) is the token's ``sun`` claim unless
given. :class:`SlurmToken` never shows the token: not in its repr, str or any error message.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from topocast.errors import TopocastError

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

    def headers(self) -> dict[str, str]:
        out = {"X-SLURM-USER-TOKEN": self.value}
        if self.user:
            out["X-SLURM-USER-NAME"] = self.user
        return out

    def __repr__(self) -> str:
        return f"SlurmToken(user={self.user!r}, source={self.source!r}, value=<hidden>)"

    __str__ = __repr__


def _claim_user(token: str) -> str | None:
    """The ``sun`` claim of a JWT (Slurm's user name claim), read without checking the signature."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    user = payload.get("sun") if isinstance(payload, dict) else None
    return user if isinstance(user, str) and user else None


def token_from_text(text: str, source: str, user: str | None = None) -> SlurmToken:
    """A token from what a source holds: ``SLURM_JWT=...`` (``scontrol token``'s line) or the token."""
    value = text.strip()
    if value.startswith("SLURM_JWT="):
        value = value.removeprefix("SLURM_JWT=").strip()
    if not value or any(c.isspace() for c in value):
        raise TokenError(f"{source}: does not hold one token (expected what `scontrol token` prints)")
    return SlurmToken(value, user or _claim_user(value), source)


def _read_file(path: Path, source: str) -> str:
    try:
        with path.open("rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            raw = fh.read(MAX_TOKEN_BYTES + 1)
    except OSError as exc:
        raise TokenError(f"{source}: cannot read the token file ({exc.strerror})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenError(
            f"{source}: the token file is readable by other users (mode {stat.S_IMODE(mode):04o}); chmod 600"
        )
    if len(raw) > MAX_TOKEN_BYTES:
        raise TokenError(f"{source}: larger than {MAX_TOKEN_BYTES} bytes, not a token")
    return raw.decode("utf-8", "replace")


def _gsm(name: str, source: str, session: Any) -> str:
    """The payload of a Secret Manager version (``projects/P/secrets/S/versions/V``)."""
    if session is None:
        import google.auth
        from google.auth.transport.requests import AuthorizedSession

        credentials, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        session = AuthorizedSession(credentials)
    try:
        resp = session.get(f"https://secretmanager.googleapis.com/v1/{name}:access", timeout=30)
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
            if parsed.netloc or not name.startswith("/"):
                raise TokenError(f"{source}: expected ssm:///<parameter name> (three slashes)")
            text = _aws_read(
                lambda s: s.client("ssm").get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"],
                source,
                session,
            )
        elif parsed.scheme == "secretsmanager":
            secret_id = unquote(parsed.netloc + parsed.path)
            text = _aws_read(
                lambda s: s.client("secretsmanager").get_secret_value(SecretId=secret_id)["SecretString"],
                source,
                session,
            )
        else:
            if read_arn is None:
                from topocast.providers.aws_sdk import read_secret_arn

                def read_arn(ref: str) -> tuple[str, str | None]:
                    return read_secret_arn(ref, session=session)

            try:
                text = read_arn(source)[0]
            except TopocastError as exc:
                raise TokenError(str(exc)) from None
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
        raise TokenError(f"{source}: cannot read the token ({exc})") from None
