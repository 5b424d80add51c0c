"""A provider's own options, validated once where they enter (CLI ``--option``, the functions' settings)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

from topocast.errors import ProviderError
from topocast.validation import validate

M = TypeVar("M", bound=BaseModel)

__all__ = ["provider_options"]


def provider_options(model: type[M], raw: Mapping[str, Any], provider: str) -> M:
    """``raw`` as the provider's options ``model``; one line naming the provider and the field when wrong."""
    data = {k: v for k, v in raw.items() if v is not None}
    return validate(model, data, f"{provider} options", ProviderError, keep_class=False)
