"""A live PostgreSQL source: read-only connections made by libpq on the host, queries streamed as Arrow.

Every connection is psycopg 3's (imported at first use: the ``databases`` extra), opened from the target
URI with the password libpq finds itself (``~/.pgpass``/``PGPASSFILE``, a ``pg_service.conf`` service), as
``application_name=kernel-agent``, with the session read-only and bounded (``default_transaction_read_only``,
``statement_timeout``, ``idle_in_transaction_session_timeout``). A query is one statement run through a
server-side cursor (``DECLARE … CURSOR FOR`` takes only ``SELECT``/``VALUES``/``TABLE``: a write, ``COPY``,
``SET`` or a data-modifying CTE is refused by PostgreSQL itself) in a ``READ ONLY`` transaction that is
always rolled back, fetched in chunks turned into ``pyarrow.RecordBatch``. ``numeric`` becomes float64
(as ``pandas.read_sql`` makes it); types with no Arrow twin become strings.

Connections are kept in a small pool (``IDLE``), each reset (``DISCARD ALL``: advisory locks, settings) before
it is reused: a connection costs milliseconds to tens of them (a TLS or SCRAM handshake), the broker's
per-query overhead is meant to be a few.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ExtraMissingError, QueryError, SourceError
from ..redact import redact
from .base import DescribeLimits, QueryLimits, SourceSpec

if TYPE_CHECKING:
    import psycopg
    import pyarrow

__all__ = ["CHUNK_ROWS", "IDLE", "PostgresSource"]

CHUNK_ROWS = 50_000  # rows per FETCH, and so per record batch
IDLE = 2  # connections kept open between queries
CONNECT_TIMEOUT_S = 10
IDLE_IN_TRANSACTION_S = 120  # a connection left mid-transaction (a stuck broker) is ended by the server


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg.types.numeric
        import psycopg.types.string
    except ModuleNotFoundError as exc:
        raise ExtraMissingError("databases", module=exc.name) from exc
    return psycopg


def _arrow() -> Any:
    try:
        import pyarrow
    except ModuleNotFoundError as exc:
        raise ExtraMissingError("databases", module=exc.name) from exc
    return pyarrow


READ_ONLY_HINT = "(sql() runs exactly one read-only statement: SELECT, VALUES, TABLE or WITH … SELECT)"
# syntax_error (a write or SET where DECLARE wants a query; several statements) and feature_not_supported
# (a data-modifying WITH): what a refused write looks like through DECLARE … CURSOR FOR
_REFUSED_SHAPE = {"42601", "0A000"}


def _message(exc: BaseException) -> str:
    """An error's text for the model and the user: PostgreSQL's own message (with its detail and hint when
    it gives them, and what ``sql()`` accepts when it is a refused shape), never a password libpq was given
    in the environment."""
    diag = getattr(exc, "diag", None)
    text = str(exc).strip() or type(exc).__name__
    if diag is not None and diag.message_primary:
        text = diag.message_primary
        for extra in (diag.message_detail, diag.message_hint):
            if extra:
                text += f"\n{extra}"
        if diag.sqlstate in _REFUSED_SHAPE:
            text += f"\n{READ_ONLY_HINT}"
    return redact(text, [os.environ.get("PGPASSWORD")])


class PostgresSource:
    """The ``Source`` for one ``postgresql://`` target (thread-safe; see the module's docstring)."""

    def __init__(self, spec: SourceSpec) -> None:
        self._spec = spec
        self._lock = threading.Lock()
        self._idle: list[psycopg.Connection[Any]] = []
        self._running: set[psycopg.Connection[Any]] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"<PostgresSource {self._spec.name}>"

    @property
    def spec(self) -> SourceSpec:
        return self._spec

    def _connect(self) -> psycopg.Connection[Any]:
        pg = _psycopg()
        options = (
            "-c default_transaction_read_only=on -c statement_timeout=60000 "
            f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_S * 1000}"
        )
        try:
            connection: psycopg.Connection[Any] = pg.connect(
                self._spec.target,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name="kernel-agent",
                options=options,
                autocommit=False,
            )
        except pg.Error as exc:
            raise SourceError(
                f"data source {self._spec.name!r} cannot be reached: {_message(exc)}", source=self._spec.name
            ) from None
        connection.read_only = True  # every transaction BEGINs READ ONLY
        loaders = connection.adapters
        loaders.register_loader("numeric", pg.types.numeric.FloatLoader)
        for text_type in ("json", "jsonb"):
            loaders.register_loader(text_type, pg.types.string.TextLoader)
        return connection

    def take(self, *, fresh: bool = False) -> psycopg.Connection[Any]:
        """A connection of the pool (``fresh``: a new one), counted as running until ``give_back``. Raises
        ``SourceError`` when closed or unreachable."""
        with self._lock:
            if self._closed:
                raise SourceError(f"data source {self._spec.name!r} is closed", source=self._spec.name)
            connection = self._idle.pop() if self._idle and not fresh else None
        if connection is None or connection.closed:
            connection = self._connect()
        with self._lock:
            self._running.add(connection)
            closed = self._closed
        if closed:
            self.give_back(connection, reusable=False)
            raise SourceError(f"data source {self._spec.name!r} is closed", source=self._spec.name)
        return connection

    def give_back(self, connection: psycopg.Connection[Any], *, reusable: bool = True) -> None:
        """End ``connection``'s transaction and keep it for the next query when it is healthy, else close it."""
        psycopg = _psycopg()
        try:
            connection.rollback()
            if reusable:
                connection.autocommit = True
                connection.execute("DISCARD ALL")  # session locks and state a query's functions left
                connection.autocommit = False
        except psycopg.Error:
            reusable = False
        with self._lock:
            self._running.discard(connection)
            keep = reusable and not self._closed and len(self._idle) < IDLE and not connection.closed
            if keep:
                self._idle.append(connection)
        if not keep:
            connection.close()

    def describe(self, limits: DescribeLimits) -> str:
        from .postgresql_describe import describe

        connection = self.take()
        reusable = False
        try:
            text = describe(connection, self._spec, limits)
            reusable = True
            return text
        except _psycopg().Error as exc:
            raise QueryError(f"describing {self._spec.name!r} failed: {_message(exc)}") from None
        finally:
            self.give_back(connection, reusable=reusable)

    def query(self, sql: str, limits: QueryLimits) -> PostgresResults:
        return PostgresResults(self, sql, limits)

    def cancel(self) -> None:
        with self._lock:
            running = list(self._running)
        for connection in running:
            _cancel(connection)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        self.cancel()
        for connection in idle:
            connection.close()


def _cancel(connection: psycopg.Connection[Any]) -> None:
    try:
        connection.cancel_safe(timeout=5)
    except Exception:  # a connection already gone has nothing to cancel
        pass


class _Stale(Exception):
    """The connection a query started on was lost before the query ran."""


class PostgresResults:
    """One query's record batches (``Results``): started when made, rolled back when done or closed."""

    def __init__(self, source: PostgresSource, sql: str, limits: QueryLimits) -> None:
        self._source = source
        self._cancelled = False
        self._cursor: psycopg.ServerCursor[Any] | None = None
        self._batches: Iterator[pyarrow.RecordBatch] = iter(())
        self._connection: psycopg.Connection[Any] | None = source.take()
        try:
            self._batches = self._start(sql, limits)
        except _Stale:  # a kept connection the server has dropped meanwhile (a restart, a timeout): once more
            self._connection = source.take(fresh=True)
            self._batches = self._start(sql, limits, retry=False)

    def _start(self, sql: str, limits: QueryLimits, *, retry: bool = True) -> Iterator[pyarrow.RecordBatch]:
        connection = self._connection
        assert connection is not None
        psycopg = _psycopg()
        try:
            milliseconds = max(1, int(limits.timeout_s * 1000))
            connection.execute(f"SET LOCAL statement_timeout = {milliseconds}")
            cursor = self._cursor = connection.cursor(name="kernel_agent_query")
            cursor.execute(sql)  # DECLARE kernel_agent_query CURSOR FOR <sql>
            columns = cursor.description or []
        except psycopg.Error as exc:
            self._release()
            if retry and connection.closed and isinstance(exc, psycopg.OperationalError):
                raise _Stale from None
            raise QueryError(_message(exc)) from None
        except BaseException:
            self._release()
            raise
        return self._fetch(cursor, columns)

    def _fetch(self, cursor: Any, columns: list[Any]) -> Iterator[pyarrow.RecordBatch]:
        pyarrow = _arrow()
        from .postgresql_arrow import batch_of, schema_of

        psycopg = _psycopg()
        schema = schema_of(columns)
        first = True
        try:
            while True:
                try:
                    rows = cursor.fetchmany(CHUNK_ROWS)
                except psycopg.Error as exc:
                    raise QueryError(_message(exc)) from None
                if not rows and not first:
                    return
                try:
                    batch = batch_of(schema, rows)
                except (pyarrow.ArrowException, TypeError, ValueError, OverflowError) as exc:
                    raise QueryError(f"a value of the result has no Arrow form: {exc}") from None
                yield batch
                first = False
                if len(rows) < CHUNK_ROWS:
                    return
        finally:
            self._release()

    def __iter__(self) -> Iterator[pyarrow.RecordBatch]:
        return self

    def __next__(self) -> pyarrow.RecordBatch:
        return next(self._batches)

    def cancel(self) -> None:
        connection = self._connection
        if connection is not None:
            self._cancelled = True
            _cancel(connection)

    def close(self) -> None:
        """End the query (in the thread that iterates it, or once no ``next`` runs) and free its connection."""
        batches = self._batches
        if hasattr(batches, "close"):
            batches.close()
        self._release()

    def _release(self) -> None:
        cursor, self._cursor = self._cursor, None
        if cursor is not None:
            try:
                cursor.close()  # CLOSE, unless the transaction failed: then the rollback ends it
            except _psycopg().Error:
                pass
        connection, self._connection = self._connection, None
        if connection is not None:
            self._source.give_back(connection, reusable=not self._cancelled)
