"""The one exception tree of kernel-agent.

Errors in the *analysed* code are not exceptions: they are data
(``ExecutionResult.status == "error"``). Exceptions here are for machinery
that failed or for input we refuse. Each names who must act: a ``ConfigError``
is the user's to fix (the CLI exits 2, "usage"), the rest are the machinery's
(exit 1)::

    KernelAgentError
    ├── ConfigError (ValueError)             bad option, no model configured
    │   ├── DataFileError                    missing or unreadable data file
    │   ├── WorkspaceFileError               a workspace path a client may not use (outside, missing)
    │   ├── ExtraMissingError                a front end's optional extra is not installed (names the pip command)
    │   └── SourceError                      a data source refused (a password in its URI) or unreachable
    ├── StorageError                         the host's disk failed us (full, over quota, I/O error) mid-run
    ├── KernelError                          the kernel machinery failed
    │   ├── KernelStartError                 a kernel would not start or get ready
    │   │   └── KernelChoiceError            the kernel asked for is not installed (also a ConfigError)
    │   ├── SessionClosedError               the session was used after close()
    │   └── SandboxUnavailableError          the kernel sandbox (bwrap, user namespaces) or a limit cannot be had here
    ├── ModelError                           the model endpoint failed for good (carries the partial run)
    │   ├── ModelUnreachableError            connection refused, DNS, connect time-outs after retries
    │   ├── ModelTimeoutError (TimeoutError) reachable, but the reply did not come (or stalled) in time
    │   └── ContextLengthError               the conversation no longer fits the model
    ├── ExecutionError                       raised only by ExecutionResult.raise_for_status()
    ├── NotebookError (ValueError)           a notebook we cannot read, replay or resume
    ├── PlanError (ValueError)               the model's plan is not valid JSON / a DAG, even after repair
    ├── QueryError                           a query on a data source failed (a write, a timeout, bad SQL)
    └── ServiceError                         the service refuses a request (carries its HTTP status)

Third-party errors are wrapped with ``raise ... from exc``; callers never
need to match on message text.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "KernelAgentError",
    "ConfigError",
    "DataFileError",
    "WorkspaceFileError",
    "ExtraMissingError",
    "SourceError",
    "StorageError",
    "KernelError",
    "KernelStartError",
    "KernelChoiceError",
    "SessionClosedError",
    "SandboxUnavailableError",
    "ModelError",
    "ModelUnreachableError",
    "ModelTimeoutError",
    "ContextLengthError",
    "ExecutionError",
    "NotebookError",
    "PlanError",
    "QueryError",
    "ServiceError",
]


class KernelAgentError(Exception):
    """Root of every exception kernel-agent raises on purpose.

    ``run`` is the partial ``Run`` (already saved as a notebook) when the
    error ended an agent run, else None.
    """

    run: Any = None


class ConfigError(KernelAgentError, ValueError):
    """An option, flag or environment setting is wrong or missing."""


class DataFileError(ConfigError):
    """A data file is missing or cannot be read. ``path`` names it."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class WorkspaceFileError(ConfigError):
    """A path given by a client (MCP, HTTP) is outside the workspace, missing or unusable. ``path`` names it."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class ExtraMissingError(ConfigError):
    """A command or option needs an optional extra (``serve``, ``postgres``, ``mcp``, ``gateway``) that is not
    installed. ``extra`` names it; the message gives the ``pip install`` that adds it."""

    # The top-level modules each extra brings, for ``of``.
    MODULES: ClassVar[dict[str, str]] = {
        "fastapi": "serve",
        "starlette": "serve",
        "uvicorn": "serve",
        "multipart": "serve",
        "python_multipart": "serve",
        "sqlalchemy": "serve",
        "alembic": "serve",
        "aiosqlite": "serve",
        "prometheus_client": "serve",
        "asyncpg": "postgres",
        "mcp": "mcp",
        "websockets": "gateway",
        "psycopg": "databases",
        "pyarrow": "databases",
    }

    def __init__(self, extra: str, *, module: str | None = None) -> None:
        missing = f" ({module} is not installed)" if module else ""
        super().__init__(f"this needs kernel-agent's {extra!r} extra{missing}: pip install 'kernel-agent[{extra}]'")
        self.extra = extra
        self.module = module

    @classmethod
    def of(cls, exc: ModuleNotFoundError, extra: str | None = None) -> ExtraMissingError | None:
        """The error for ``exc`` when the missing module is one an extra brings (``extra`` when given, for a
        module several extras bring), else None (a missing module of ours is a bug, not a missing extra)."""
        module = (exc.name or "").partition(".")[0]
        known = cls.MODULES.get(module)
        return None if known is None else cls(extra or known, module=module)


class SourceError(ConfigError):
    """A data source given by URI cannot be used: the URI is malformed or carries a password (the message says
    where a password goes), no installed kind claims its scheme, or its server refuses the connection or the
    login. ``source`` names it (never its URI)."""

    def __init__(self, message: str, *, source: str | None = None) -> None:
        super().__init__(message)
        self.source = source


class StorageError(KernelAgentError):
    """The host's storage failed while kernel-agent wrote its own files (a full disk, a quota, an I/O
    error): the machine's to fix, not the input's. ``path`` names what was being written."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class KernelError(KernelAgentError):
    """The kernel machinery (not the analysed code) failed."""


class KernelStartError(KernelError):
    """A kernel could not be started, or never became ready."""


class KernelChoiceError(KernelStartError, ConfigError):
    """The kernel asked for (``--kernel``) is not installed here, or cannot run as asked: a start error
    that is the user's to fix, so front ends treat it as bad input."""


class SessionClosedError(KernelError):
    """The session was used after it was closed."""


class SandboxUnavailableError(KernelError):
    """The kernel sandbox cannot be made on this machine (no ``bwrap``, no user namespaces), or a
    requested limit cannot be set. The message names what is missing and how to get it, or
    ``sandbox="off"`` to run unconfined on purpose."""


class ModelError(KernelAgentError):
    """The model endpoint failed for good. ``run`` holds the partial run, if any."""

    def __init__(self, message: str, *, run: Any = None, status_code: int | None = None) -> None:
        super().__init__(message)
        self.run = run
        self.status_code = status_code


class ModelUnreachableError(ModelError):
    """The endpoint could not be reached (refused, DNS, time-outs) after retries."""


class ModelTimeoutError(ModelError, TimeoutError):
    """The endpoint took the request but sent no reply (or stopped streaming one) within
    ``timeout`` seconds. Not retried: the server is probably still working on it."""

    def __init__(self, message: str, *, timeout: float, received: int = 0, run: Any = None) -> None:
        super().__init__(message, run=run)
        self.timeout = timeout
        self.received = received


class ContextLengthError(ModelError):
    """The conversation is longer than the model's context window."""


class ExecutionError(KernelAgentError):
    """Raised by ``ExecutionResult.raise_for_status()`` for a result that is not ok."""

    def __init__(self, message: str, *, result: Any) -> None:
        super().__init__(message)
        self.result = result  # the ``ExecutionResult``; not imported, so errors.py stays the bottom of the tree


class NotebookError(KernelAgentError, ValueError):
    """A notebook cannot be read, replayed or resumed. ``path`` names it."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class PlanError(KernelAgentError, ValueError):
    """The model's plan cannot be used: invalid JSON or schema after the repair retry, an unknown
    dependency or a cycle. ``problems`` lists what was wrong, one line each."""

    def __init__(self, message: str, *, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


class QueryError(KernelAgentError):
    """A query on a data source failed: the database refused it (a write, more than one statement, a syntax
    error), it ran past its statement timeout or was cancelled. The message is the database's own, never a
    connection's secrets; it is data for the model, as an error in the analysed code is."""


class ServiceError(KernelAgentError):
    """The service refuses a request: unknown id (404), busy thread (409), bad input (422), too many
    runs (429). ``status`` is the HTTP status the server answers with."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status
