"""The CLI's one log handler: warnings and errors on stderr, with the API key scrubbed.

Owns ``hide_in_logs``. Without a handler of its own the CLI would print log
records through ``logging.lastResort``, which no filter can be attached to;
this handler is installed once on the root logger (so ``openai`` and
``httpx`` records pass through it too) and carries a ``RedactingFilter``.
It writes to whatever ``sys.stderr`` is at the time, so click's test runner
sees it.
"""

from __future__ import annotations

import logging
import sys

from ..redact import RedactingFilter

__all__ = ["hide_in_logs"]


class _StderrHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must never break the run
            self.handleError(record)


_handler: _StderrHandler | None = None


def hide_in_logs(secret: str | None) -> None:
    """Make the CLI's log handler scrub ``secret``; installs the handler on first use. Never raises."""
    global _handler
    if _handler is None:
        _handler = _StderrHandler(logging.WARNING)
        _handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(_handler)
    for old in list(_handler.filters):
        _handler.removeFilter(old)
    _handler.addFilter(RedactingFilter([secret]))
