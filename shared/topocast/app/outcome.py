"""What a use case tells its entry point: done, retry the delivery, or dead-letter it with a reason."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Outcome", "Status"]

#: ``done``: acknowledge; ``retry``: let the platform redeliver (nothing was lost); ``drop``: dead-letter
Status = Literal["done", "retry", "drop"]


@dataclass(frozen=True)
class Outcome:
    status: Status
    #: one line for logs, the DLQ's reason attribute and HTTP answers
    reason: str
    #: what happened, for logs and tests (generation, counts, ...)
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def done(cls, reason: str, **detail: Any) -> Outcome:
        return cls("done", reason, detail)

    @classmethod
    def retry(cls, reason: str, **detail: Any) -> Outcome:
        return cls("retry", reason, detail)

    @classmethod
    def drop(cls, reason: str, **detail: Any) -> Outcome:
        return cls("drop", reason, detail)
