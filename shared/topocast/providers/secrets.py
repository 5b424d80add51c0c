"""How a shell on an operator's machine resolves a provider's secret reference (``ProviderInputs.secret``).

The reference says where the secret is, whatever the provider: an ``arn:`` reference is a Secrets Manager
secret or SSM parameter, read with the AWS SDK helpers (:func:`topocast.providers.aws.sdk.read_secret_arn`,
the standard AWS credentials chain), anything else a local file. ``topocast discover`` hands
:func:`read_secret` to every provider as ``ProviderInputs.secret``, so the CLI names no provider; the
functions' roots resolve theirs with their own session (``aws/root.py``).
"""

from __future__ import annotations

from pathlib import Path

from topocast.errors import ProviderError

__all__ = ["read_local_text", "read_secret"]


def read_local_text(path: str) -> str:
    """A local UTF-8 text file, or one line naming the file and what is wrong."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ProviderError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ProviderError(f"{path}: not UTF-8 text") from None


def read_secret(ref: str) -> str:
    """The text of the secret ``ref`` names: an ``arn:`` reference through AWS, else a local file."""
    if ref.startswith("arn:"):
        from topocast.providers.aws.sdk import read_secret_arn

        return read_secret_arn(ref)[0]
    return read_local_text(ref)
