"""What a live data source is and does, whatever its engine: ``SourceSpec``, the ``Source`` protocol and the
limits it runs under.

A ``Source`` is synchronous (the broker calls it from worker threads) and is asked four things:
``describe`` (markdown for the prompt's ``# Data`` section, bounded), ``query`` (one read-only statement,
its result as ``Results``: Arrow record batches, and a ``cancel`` for that query alone, callable from
another thread), ``cancel`` (every query it runs) and ``close``.
Values only: the kinds (``postgresql.py``, a plug-in's) implement it; the broker enforces row and byte caps
and the wall deadline itself, so a kind need only honour the statement timeout.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pyarrow


__all__ = ["DescribeLimits", "QueryLimits", "Results", "Source", "SourceSpec"]

MB = 1024 * 1024


@dataclass(frozen=True)
class SourceSpec:
    """A live source as the user named it: ``name`` (an identifier: what ``sql(…, source=NAME)`` and the
    notebook's metadata call it), ``kind`` (its ``SourceKind``'s name) and ``target`` (the URI the kind
    connects with, which never carries a password)."""

    name: str
    kind: str
    target: str

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}: {self.target})"


@dataclass(frozen=True)
class QueryLimits:
    """One query's bounds: ``timeout_s`` (the server's statement timeout; the broker's wall deadline adds a
    margin), ``max_rows`` and ``max_bytes`` (of the Arrow result: the broker stops there and says so)."""

    timeout_s: float = 60.0
    max_rows: int = 1_000_000
    max_bytes: int = 256 * MB

    def __post_init__(self) -> None:
        if not (self.timeout_s > 0 and self.max_rows > 0 and self.max_bytes > 0):
            raise ValueError(f"query limits must be positive: {self!r}")


@dataclass(frozen=True)
class DescribeLimits:
    """How much a description may cost: ``timeout_s`` on the server, at most ``max_tables`` tables listed
    (then "and N more") and ``max_chars`` characters of markdown."""

    timeout_s: float = 5.0
    max_tables: int = 50
    max_chars: int = 12_000


class Results(Protocol):
    """One running query's result: an iterator of record batches of one schema (the first may be empty: it
    carries the schema of a result with no rows), ``cancel()`` from any thread (the iteration then raises
    ``QueryError``) and ``close()`` (ends the query early and frees its connection; idempotent)."""

    def __iter__(self) -> Iterator[pyarrow.RecordBatch]: ...

    def __next__(self) -> pyarrow.RecordBatch: ...

    def cancel(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Source(Protocol):
    """One open live source (a connection's worth of settings, connected as needed). Thread-safe: the broker
    runs several ``query`` calls at once, each in its own thread, and ``cancel`` from yet another."""

    @property
    def spec(self) -> SourceSpec:
        """What it was opened from (name, kind, target: never a password)."""
        ...

    def describe(self, limits: DescribeLimits) -> str:
        """Markdown: each table and view the role may read, its columns and types, row counts said as
        estimates where they are, primary and foreign keys; within ``limits``. Raises ``SourceError`` when the
        source cannot be reached, ``QueryError`` when the catalogue query fails or times out."""
        ...

    def query(self, sql: str, limits: QueryLimits) -> Results:
        """``sql`` (exactly one statement) started read-only under ``limits.timeout_s``; its ``Results`` give
        the rows. Raises (here or while iterating) ``QueryError`` (a write, several statements, a syntax error,
        a timeout, a cancel) with the database's message, ``SourceError`` when the source cannot be reached."""
        ...

    def cancel(self) -> None:
        """Stop every query of this source that runs now (from any thread); each raises ``QueryError``."""
        ...

    def close(self) -> None:
        """Cancel what runs and close every connection. Idempotent."""
        ...
