"""One JSON line per log record, the shape Cloud Logging parses (``severity``, ``message``)."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

__all__ = ["setup_logging"]

#: the loggers whose records the GCP functions print (the use cases and the GCP shell)
LOGGERS = ("topocast.gcp", "topocast.app")


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {"severity": record.levelname, "message": record.getMessage(), "logger": record.name}
        fields = getattr(record, "topocast", None)
        if fields:
            entry["topocast"] = fields
        return json.dumps(entry, default=str)


class _StdoutHandler(logging.Handler):
    """Writes to whatever ``sys.stdout`` is at the time (functions-framework and test runners swap it)."""

    _topocast_json = True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stdout.write(self.format(record) + "\n")
            sys.stdout.flush()
        except Exception:
            self.handleError(record)


def setup_logging() -> None:
    """Send the GCP functions' records to stdout as JSON lines; idempotent.

    Only these subtrees: other topocast code keeps whatever logging its host set up.
    Records still propagate, so pytest's caplog and a root handler see them too.
    """
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if not any(getattr(h, "_topocast_json", False) for h in logger.handlers):
            handler = _StdoutHandler()
            handler.setFormatter(_JsonFormatter())
            logger.addHandler(handler)
        if logger.level == logging.NOTSET and logging.getLogger("topocast").level == logging.NOTSET:
            logger.setLevel(logging.INFO)  # unless someone (a test, the demo) set topocast's level explicitly
