"""The service's database: which one (a URL), its tables, and its migrations (Alembic).

Owns the engine (SQLAlchemy 2, async: aiosqlite for the embedded SQLite default, asyncpg for
PostgreSQL), the schema the migrations in ``migrations/versions`` build (records, events, leases,
gateway kernels, service keys), bringing a database up to date (``migrate``) and telling whether it
is (``readiness``). Nothing about records or HTTP.

A record is stored whole as its JSON (``body``) beside the columns it is looked up by, so a field
added to a record needs no migration; events are rows keyed by (run, position).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, Text, event, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from .._loop import in_thread
from ..errors import ConfigError
from .private import private_database
from .records import FileRecord, RunRecord, ThreadRecord

__all__ = [
    "DATABASE_FILE",
    "HEAD",
    "database_url",
    "engine_for",
    "migrate",
    "readiness",
    "row_of",
    "safe_url",
    "tables",
    "upsert",
]

DATABASE_FILE = "kernel-agent.db"  # the embedded default, under the data dir
HEAD = "0004"  # the newest migration in migrations/versions
_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg", "postgres": "postgresql+asyncpg"}
_MIGRATION_LOCK = 7_280_028  # a PostgreSQL advisory lock: one replica migrates at a time

metadata = MetaData()
tables = {
    "files": Table(
        "files",
        metadata,
        Column("id", String(100), primary_key=True),
        Column("owner", String(100), nullable=False),
        Column("body", Text, nullable=False),
    ),
    "threads": Table(
        "threads",
        metadata,
        Column("id", String(100), primary_key=True),
        Column("owner", String(100), nullable=False),
        Column("status", String(40), nullable=False),
        Column("body", Text, nullable=False),
    ),
    "runs": Table(
        "runs",
        metadata,
        Column("id", String(100), primary_key=True),
        Column("owner", String(100), nullable=False),
        Column("thread_id", String(100), nullable=False),
        Column("status", String(40), nullable=False),
        Column("body", Text, nullable=False),
    ),
    "events": Table(
        "events",
        metadata,
        Column("run_id", String(100), primary_key=True),
        Column("seq", Integer, primary_key=True, autoincrement=False),
        Column("body", Text, nullable=False),
    ),
    "meta": Table(
        "meta", metadata, Column("key", String(100), primary_key=True), Column("value", Text, nullable=False)
    ),
    "leases": Table(
        "leases",
        metadata,
        Column("thread_id", String(100), primary_key=True),
        Column("holder", String(100), nullable=False),
        Column("expires_at", Float, nullable=False),
    ),
    "kernels": Table(
        "kernels",
        metadata,
        Column("thread_id", String(100), primary_key=True),
        Column("kernel_id", String(100), nullable=False),
        Column("holder", String(100), nullable=False),
    ),
    "keys": Table(
        "keys",
        metadata,
        Column("id", String(100), primary_key=True),
        Column("hash", String(64), nullable=False, unique=True),
        Column("name", String(200), nullable=False),
        Column("created_at", Float, nullable=False),
        Column("revoked_at", Float, nullable=True),
    ),
}


def database_url(database: str | None, data_dir: str | os.PathLike[str]) -> URL:
    """The async URL for ``database`` (``sqlite:///PATH``, ``postgresql://…``, with or without a driver),
    or the embedded SQLite file under ``data_dir`` when it is None. Raises ``ConfigError``."""
    if database is None:
        return make_url(f"sqlite+aiosqlite:///{Path(data_dir).resolve() / DATABASE_FILE}")
    try:
        url = make_url(database)
    except ArgumentError:
        raise ConfigError(f"--database is not a database URL: {_hidden(database)}") from None
    backend = url.get_backend_name()
    if backend not in _DRIVERS:
        raise ConfigError(f"--database must be sqlite:///PATH or postgresql://…, not {backend}://")
    if url.drivername in _DRIVERS:
        url = url.set(drivername=_DRIVERS[url.drivername])
    if backend == "sqlite" and url.database in (None, "", ":memory:"):
        raise ConfigError("--database sqlite needs a file (sqlite:///PATH): an in-memory database is lost at exit")
    return url


def safe_url(url: URL) -> str:
    """``url`` fit for a log: the password hidden."""
    return url.render_as_string(hide_password=True)


def _hidden(raw: str) -> str:
    scheme, _, rest = raw.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}" if "@" in rest else raw


def engine_for(url: URL) -> AsyncEngine:
    """An async engine for ``url``. SQLite runs in WAL mode (readers never wait for the writer) and
    waits for a lock rather than failing at once."""
    if url.get_backend_name() == "sqlite":
        engine = create_async_engine(url, connect_args={"timeout": 30})
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(url, pool_size=10, max_overflow=10, pool_pre_ping=True)


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


async def migrate(url: URL) -> None:
    """Bring the database at ``url`` up to ``HEAD`` (Alembic ``upgrade head``). Alembic reads its
    scripts from disk, so this runs in a worker thread on an engine of its own. Raises ``ConfigError``
    when the database cannot be reached or migrated."""
    try:
        await in_thread(asyncio.run, _upgrade(url))
    except (SQLAlchemyError, OSError) as exc:
        raise ConfigError(f"cannot migrate the database {safe_url(url)}: {_reason(exc)}") from None


async def _upgrade(url: URL) -> None:
    private_database(url)
    engine = engine_for(url)
    try:
        async with engine.begin() as connection:
            await connection.run_sync(_upgrade_on)
    finally:
        await engine.dispose()


def _upgrade_on(connection: Any) -> None:
    from alembic import command
    from alembic.config import Config

    if connection.dialect.name == "postgresql":  # replicas starting together: one migrates, the rest wait
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def row_of(record: FileRecord | ThreadRecord | RunRecord) -> dict[str, Any]:
    """A record's row: its JSON and the columns it is looked up by."""
    columns: dict[str, Any] = {}
    if isinstance(record, ThreadRecord | RunRecord):
        columns["status"] = record.status
    if isinstance(record, RunRecord):
        columns["thread_id"] = record.thread_id
    return {"id": record.id, "owner": record.owner, **columns, "body": record.model_dump_json()}


async def upsert(connection: AsyncConnection, name: str, row: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Insert ``row`` into table ``name``, or update the row with the same ``keys``."""
    dialect = postgresql if connection.dialect.name == "postgresql" else sqlite
    statement = dialect.insert(tables[name]).values(**row)
    changed = {k: v for k, v in row.items() if k not in keys}
    await connection.execute(statement.on_conflict_do_update(index_elements=list(keys), set_=changed))


async def readiness(connection: AsyncConnection) -> str | None:
    """None when the database answers and is at ``HEAD``; else why not."""
    try:
        found = (await connection.execute(text("SELECT version_num FROM alembic_version"))).scalars().all()
    except SQLAlchemyError as exc:
        return f"the database does not answer: {_reason(exc)}"
    if found != [HEAD]:
        return f"the database is at migration {found or 'none'}, this service needs {HEAD}"
    return None


def _reason(exc: BaseException) -> str:
    """An error's first line without SQLAlchemy's SQL and links (a URL's password never appears in them)."""
    message = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return message[0] if message else type(exc).__name__
