"""The service's log lines: plain text for a terminal, or one JSON object a line for a log pipeline.

Owns the JSON shape: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, ``run_id`` and
``thread_id`` when the call passed them (``extra={"run_id": ...}``), and ``error`` with the traceback.
Secrets never reach a log line in the first place (keys and the database password are never logged).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

__all__ = ["JsonFormatter", "configure"]

_IDS = ("run_id", "thread_id", "replica")


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update({key: getattr(record, key) for key in _IDS if getattr(record, key, None) is not None})
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure(style: Literal["text", "json"]) -> None:
    """Send every logger's INFO and up to stderr in ``style`` (uvicorn's loggers included)."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if style == "json" else logging.Formatter("%(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
