"""Keeping secrets out of text we record: ``redact``, ``RedactingFilter``, ``read_secret``.

Owns the one rule for a secret (a model API key, a token) that must never
reach a notebook, an event, an error message or a log line: every occurrence
of its value is replaced by ``REDACTED``. It knows nothing about where the
secrets come from (the CLI reads them, ``OpenAIChatModel`` holds its key) and
installs nothing by itself: the CLI puts ``RedactingFilter`` on its log
handler, the model scrubs its own error messages.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from pathlib import Path

from .errors import ConfigError

__all__ = ["MIN_SECRET_CHARS", "REDACTED", "RedactingFilter", "read_secret", "redact"]

REDACTED = "[REDACTED]"
# Shorter values ("x", "none") would blank out ordinary words; no real key is that short.
MIN_SECRET_CHARS = 6


def _worth_hiding(secrets: Iterable[str | None]) -> list[str]:
    """The secrets long enough to scrub, longest first (so a key's prefix never hides half of it)."""
    kept = {s for s in secrets if s and len(s) >= MIN_SECRET_CHARS}
    return sorted(kept, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every occurrence of each secret replaced by ``REDACTED``. Never raises."""
    for secret in _worth_hiding(secrets):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


class RedactingFilter(logging.Filter):
    """A handler filter that scrubs secrets from a record's message and traceback.

    Put it on a *handler*: a logger's filters see only records logged on that
    very logger, while a handler's see every record that reaches it. The
    message is rendered once (``getMessage``) so a secret hidden in the
    arguments is scrubbed too; a traceback is rendered into ``exc_text``.
    """

    def __init__(self, secrets: Iterable[str | None]) -> None:
        super().__init__()
        self.secrets = tuple(_worth_hiding(secrets))

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format string: leave the record as logging would
            message = str(record.msg)
        record.msg, record.args = redact(message, self.secrets), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
            record.exc_info = None  # the formatter would otherwise render the raw traceback again
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        return True


def read_secret(source: str) -> str:
    """A secret read from the file ``source`` (``-``: standard input), stripped of surrounding whitespace.

    Reading it from a file or stdin keeps it off the command line, where every
    user of the machine can see it (``ps``). Raises ``ConfigError`` when the
    file cannot be read or holds nothing; the message never contains the secret.
    """
    where = "standard input" if source == "-" else source
    try:
        raw = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"cannot read the API key from {where}: {reason}") from None
    lines = [line.strip() for line in raw.splitlines() if line.strip()]
    if not lines:
        raise ConfigError(f"no API key in {where}: it is empty")
    if len(lines) > 1:
        raise ConfigError(f"the API key in {where} must be one line, not {len(lines)}")
    return lines[0]
