"""A PostgreSQL schema as markdown for the prompt: what the role may read, bounded in time and size.

One read-only transaction (the connection's) with a local statement timeout: the tables, views,
materialized views and foreign tables of every schema but the system's that the role may ``SELECT``
from, each with its columns and types, its rows (counted when its heap is under ``EXACT_BYTES``, the time
allows and no other session's lock is in the way; else PostgreSQL's estimate, said so), its primary key
and foreign keys. At most ``limits.max_tables`` relations and ``limits.max_chars`` characters; the rest
is said as "and N more".
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

    from .base import DescribeLimits, SourceSpec

__all__ = ["EXACT_BYTES", "describe"]

EXACT_BYTES = 1024 * 1024  # a heap this small is counted exactly: a few milliseconds at most
LOCK_TIMEOUT_MS = 500  # a table locked by someone's ALTER is not counted rather than waited for

_RELATIONS = """
SELECT c.oid, n.nspname, c.relname, c.relkind, c.reltuples::float8, count(*) OVER ()
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND NOT c.relispartition
  AND n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%%'
  AND has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')
ORDER BY n.nspname = 'public' DESC, n.nspname, c.relname
LIMIT %s
"""
_COLUMNS = """
SELECT a.attrelid, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
FROM pg_attribute a
WHERE a.attrelid = ANY(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attrelid, a.attnum
"""
_KEYS = """
SELECT conrelid, contype, pg_get_constraintdef(oid)
FROM pg_constraint
WHERE conrelid = ANY(%s) AND contype IN ('p', 'f')
ORDER BY conrelid, contype DESC, conname
"""
_KINDS = {"r": "table", "p": "partitioned table", "v": "view", "m": "materialized view", "f": "foreign table"}


def describe(connection: psycopg.Connection[Any], spec: SourceSpec, limits: DescribeLimits) -> str:
    """``spec``'s schema as markdown, read through ``connection`` (rolled back by the caller). Raises
    ``psycopg.Error`` (a timeout included)."""
    from psycopg import sql

    deadline = time.monotonic() + limits.timeout_s
    connection.execute(f"SET LOCAL statement_timeout = {max(1, int(limits.timeout_s * 1000))}")
    connection.execute(f"SET LOCAL lock_timeout = {LOCK_TIMEOUT_MS}")
    relations = connection.execute(_RELATIONS, (limits.max_tables,)).fetchall()
    total = relations[0][5] if relations else 0
    oids = [row[0] for row in relations]
    columns: dict[int, list[str]] = {}
    for relation, name, kind, not_null in connection.execute(_COLUMNS, (oids,)):
        columns.setdefault(relation, []).append(f"{name} {kind}{' not null' if not_null else ''}")
    keys: dict[int, list[str]] = {}
    for relation, _kind, definition in connection.execute(_KEYS, (oids,)):
        keys.setdefault(relation, []).append(definition.lower().replace("references", "→"))
    readable = "table or view" if total == 1 else "tables or views"
    head = [f"PostgreSQL source `{spec.name}`: {total} {readable} the role may read."]
    if not relations:
        head.append("(no table or view in a schema this role may read)")
    lines = "\n".join(head)
    shown = 0
    for oid, schema, name, kind, estimate, _total in relations:
        counted = _count(connection, oid, sql.Identifier(schema, name)) if _countable(kind, deadline) else None
        rows = _rows(kind, estimate, counted)
        block = [f"\n\n### {schema}.{name} ({_KINDS[kind]}{rows})", "columns: " + ", ".join(columns.get(oid, []))]
        block += [f"key: {key}" for key in keys.get(oid, [])]
        text = "\n".join(block)
        if len(lines) + len(text) > limits.max_chars:
            break
        lines += text
        shown += 1
    if shown < total:
        lines += f"\n\n… and {total - shown} more (not listed: the description's limits)."
    return lines


def _countable(kind: str, deadline: float) -> bool:
    """Whether to try counting the rows: a table or materialized view, while the description's time lasts."""
    return kind in ("r", "m") and time.monotonic() < deadline


def _count(connection: psycopg.Connection[Any], oid: int, table: Any) -> int | None:
    """The table's rows when its heap is at most ``EXACT_BYTES``, else None; None too when a lock held
    elsewhere stops it past ``LOCK_TIMEOUT_MS`` (in a savepoint, so the description goes on)."""
    from psycopg import Error, sql

    try:
        with connection.transaction():
            size = connection.execute("SELECT pg_relation_size(%s)", (oid,)).fetchone()
            if size is None or size[0] > EXACT_BYTES:
                return None
            found = connection.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
    except Error:
        return None
    return int(found[0]) if found else None


def _rows(kind: str, estimate: float, counted: int | None) -> str:
    """ ", N rows" when counted, ", about N rows (estimated)" from the planner's statistics, or nothing (a
    view; a table never analysed)."""
    if counted is not None:
        return f", {counted:,} row{'s' if counted != 1 else ''}"
    if kind in ("r", "p", "m", "f") and estimate >= 0:
        return f", about {round(estimate):,} rows (estimated)"
    return ""
