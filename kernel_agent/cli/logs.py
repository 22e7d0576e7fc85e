"""The CLI's one log handler: warnings and errors on stderr, with the API key scrubbed.

Owns ``install_log_handler``, ``hide_in_logs`` and ``show_info_from`` (info records of one logger
too, e.g. the MCP server's live session counts). Without a handler of its
own the CLI would print log records through ``logging.lastResort``, which no
filter can be attached to. ``main()`` (the console script, ``python -m
kernel_agent.cli``) installs this one on the root logger, so ``openai`` and
``httpx`` records pass through it too, and the commands hand it the key to
scrub. Embedding ``cli`` in another program (or click's test runner) leaves
that program's logging alone: ``hide_in_logs`` then does nothing.
"""

from __future__ import annotations

import logging
import sys

from ..redact import RedactingFilter
from ..safe.terminal import printable

__all__ = ["hide_in_logs", "install_log_handler", "show_info_from"]


class _StderrHandler(logging.Handler):
    """Warnings and errors from anyone; info records only from the loggers ``show_info_from`` named."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.informative: tuple[str, ...] = ()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING and not record.name.startswith(self.informative or ("\0",)):
            return False
        return bool(super().filter(record))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(printable(self.format(record)) + "\n")  # a record may quote kernel or model text
        except Exception:  # logging must never break the run
            self.handleError(record)


_handler: _StderrHandler | None = None


def install_log_handler() -> None:
    """Put the CLI's stderr handler (warnings and errors) on the root logger, once. Never raises."""
    global _handler
    if _handler is None:
        _handler = _StderrHandler()
        _handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logging.getLogger().addHandler(_handler)


def show_info_from(name: str) -> None:
    """Let the info records of logger ``name`` (and its children) through too, e.g. a server's live
    connection counts. Does nothing without the CLI's handler. Never raises."""
    if _handler is None:
        return
    _handler.informative = (*_handler.informative, name)
    logging.getLogger(name).setLevel(logging.INFO)


def hide_in_logs(secret: str | None) -> None:
    """Make the CLI's log handler, if installed, scrub ``secret`` (replacing any earlier one). Never raises."""
    if _handler is None:
        return
    for old in list(_handler.filters):
        _handler.removeFilter(old)
    _handler.addFilter(RedactingFilter([secret]))
