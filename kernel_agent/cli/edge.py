"""The CLI's edge: library errors become plain messages and exit codes (``edge``), never tracebacks.

``ConfigError``, ``DataFileError`` and ``NotebookError`` exit 2 with their message, and so does a
missing optional extra (``ExtraMissingError``: the package an extra brings could not be imported);
a ``ModelError``, ``KernelError`` or ``StorageError`` exits 1; Ctrl-C exits 130. Every command wraps
its library calls in ``edge()``, and the front ends of an extra (serve, mcp) import it inside.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from ..errors import ConfigError, ExtraMissingError, KernelAgentError, NotebookError
from ..safe.terminal import printable
from .drive import EXIT_INTERRUPTED, EXIT_USAGE

__all__ = ["Failure", "edge"]


class Failure(click.ClickException):
    """An expected failure: ``Error: <message>`` on stderr and ``exit_code``, no traceback."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(printable(message))  # a message may quote the kernel, the model or a file
        self.exit_code = exit_code  # type: ignore[misc]  # click reads it per instance; its stub says ClassVar


@contextmanager
def edge() -> Iterator[None]:
    """Translate library errors into exit codes and plain messages."""
    try:
        yield
    except (ConfigError, NotebookError) as exc:  # DataFileError is a ConfigError
        raise Failure(str(exc), EXIT_USAGE) from None
    except KernelAgentError as exc:  # ModelError, KernelError, StorageError: the machinery failed, not the user
        raise Failure(str(exc), 1) from None
    except ModuleNotFoundError as exc:  # a package of an extra not installed: say which extra, not a traceback
        missing = ExtraMissingError.of(exc)
        if missing is None:
            raise
        raise Failure(str(missing), EXIT_USAGE) from None
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
