"""Database files as data: recognising SQLite and DuckDB files by their header, and describing one.

Owns the two formats' magic bytes (``database_kind``: SQLite's ``SQLite format 3\\0`` at offset 0,
DuckDB's ``DUCK`` at offset 8; a suffix is only a hint), what a header declares (``declared_database``)
and the description of a database's tables and views (``describe_sqlite``, ``describe_duckdb``): each
table and view, sorted, with its columns and declared types, primary and foreign keys, a row count
(exact when counting fits the time budget, else an estimate said as one) and a few sample rows, clipped.

The file is hostile input. Only the confined describer's child calls the describers (its address-space,
CPU and wall limits are the hard bound; the time budget here keeps an honest file cheap): SQLite is
opened read-only and immutable, with an authorizer that allows reads only (no ATTACH, no pragma but the
few read here, no ``load_extension``), no attached databases, untrusted schema functions and a progress
handler that stops any statement over its time (a view's SQL runs when it is read); DuckDB read-only with
external access off and the configuration locked (a view cannot ``read_csv('/etc/passwd')`` nor ATTACH),
one thread and a memory limit, each statement interrupted past its time. Does not own the first line of a
description (the kind and size, ``summaries.py``) nor which files are described.

Standard library at module level; duckdb is imported where used (the ``databases`` extra).
"""

from __future__ import annotations

import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

__all__ = [
    "DATABASE_SUFFIXES",
    "DatabaseKind",
    "database_kind",
    "declared_database",
    "describe_duckdb",
    "describe_sqlite",
]

DatabaseKind = Literal["sqlite", "duckdb"]

DATABASE_SUFFIXES = (".sqlite", ".sqlite3", ".db", ".duckdb")  # hints only: the header decides
SQLITE_MAGIC = b"SQLite format 3\x00"
DUCKDB_MAGIC = b"DUCK"  # at offset 8, after the header's checksum
HEADER_BYTES = 100  # SQLite's file header; DuckDB's main header starts the same way
MAX_OBJECTS = 50  # tables and views described; more are counted
MAX_COLUMNS = 30
SAMPLE_ROWS = 3
SAMPLE_COLUMNS = 10
MAX_CELL_CHARS = 24
STATEMENT_SECONDS = 1.0  # one count or sample: a view's SQL may recurse for ever
BUDGET_SECONDS = 3.0  # every statement of one description; past it tables are listed uncounted
MEMORY_LIMIT = "256MB"  # DuckDB's own limit, under the describer's address-space bound
HEAP_LIMIT = 256 << 20  # SQLite's hard heap limit

_SQLITE_PRAGMAS = frozenset({"table_info", "table_xinfo", "foreign_key_list", "page_count", "page_size"})


def database_kind(head: bytes) -> DatabaseKind | None:
    """Which database a file's first bytes ``head`` (16 or more) say it is; None for neither. Raises nothing."""
    if head.startswith(SQLITE_MAGIC):
        return "sqlite"
    if head[8:12] == DUCKDB_MAGIC:
        return "duckdb"
    return None


def declared_database(kind: DatabaseKind, head: bytes) -> str:
    """What a database's header ``head`` declares, read from its bytes (never opened): SQLite's page size and
    page count, DuckDB's storage version. A claim, said as one. Raises nothing."""
    if kind == "sqlite" and len(head) >= 32:
        page_size, pages = struct.unpack(">H", head[16:18])[0], struct.unpack(">I", head[28:32])[0]
        page_size = 65536 if page_size == 1 else page_size
        return f"header declares {pages:,} page(s) of {page_size:,} bytes"
    if kind == "duckdb" and len(head) >= 20:
        return f"storage version {struct.unpack('<Q', head[12:20])[0]}"
    return ""


class _Budget:
    """The time left for the statements of one description, and the deadline of the one running now."""

    def __init__(self, seconds: float = BUDGET_SECONDS) -> None:
        self.end = time.monotonic() + seconds
        self.deadline = self.end

    @property
    def spent(self) -> bool:
        return time.monotonic() >= self.end

    @contextmanager
    def statement(self, seconds: float = STATEMENT_SECONDS) -> Iterator[None]:
        self.deadline = min(self.end, time.monotonic() + seconds)
        try:
            yield
        finally:
            self.deadline = self.end


@dataclass
class _Object:
    """One table or view as described: its columns as ``(name, type, note)`` and what was found of it."""

    name: str
    view: bool
    columns: list[tuple[str, str, str]] = field(default_factory=list)
    rows: str = ""
    sample: list[tuple[Any, ...]] = field(default_factory=list)
    sample_names: list[str] = field(default_factory=list)
    problem: str = ""


# --- SQLite ------------------------------------------------------------------------------------------


def describe_sqlite(path: Path, limit: int) -> str:
    """The tables and views of the SQLite file ``path``, in at most about ``limit`` characters.

    Raises ``ValueError`` when it cannot be opened or its schema read (not a database, malformed schema);
    a table that cannot be read says so on its own line."""
    budget = _Budget()
    try:
        connection = _open_sqlite(path, budget)
    except sqlite3.Error as exc:
        raise ValueError(str(exc)) from exc
    try:
        try:
            listed = connection.execute(
                "SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY type = 'view', name"
            ).fetchall()
        except sqlite3.Error as exc:
            raise ValueError(str(exc)) from exc
        names = [(str(name), kind == "view") for name, kind in listed if not str(name).startswith("sqlite_")]
        estimates = _sqlite_stat1(connection)
        objects = [_sqlite_object(connection, budget, name, view, estimates) for name, view in names[:MAX_OBJECTS]]
    finally:
        connection.close()
    return _render(objects, [view for _, view in names], limit)


def _open_sqlite(path: Path, budget: _Budget) -> sqlite3.Connection:
    uri = f"file:{quote(str(path))}?mode=ro&immutable=1"
    connection = sqlite3.connect(uri, uri=True, isolation_level=None)
    connection.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1 << 20)  # a bigger value is an error, not a read
    pragmas = (
        "trusted_schema = OFF",
        "query_only = ON",
        "mmap_size = 0",
        "cell_size_check = ON",
        "temp_store = MEMORY",
    )
    for pragma in pragmas:
        connection.execute(f"PRAGMA {pragma}")
    connection.execute(f"PRAGMA hard_heap_limit = {HEAP_LIMIT}")
    connection.set_authorizer(_authorize)
    connection.set_progress_handler(lambda: int(time.monotonic() >= budget.deadline), 1000)
    return connection


def _authorize(action: int, first: str | None, second: str | None, database: str | None, source: str | None) -> int:
    """Reads only: SELECT, reading a column, a recursive CTE, functions but ``load_extension``, a few
    read-only pragmas; everything else (ATTACH, writes, other pragmas) is denied."""
    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (second or "").lower() == "load_extension" else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_PRAGMA and (first or "").lower() in _SQLITE_PRAGMAS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _sqlite_stat1(connection: sqlite3.Connection) -> dict[str, int]:
    """Each table's row count as ``sqlite_stat1`` (written by ANALYZE) claims it; empty when there is none."""
    try:
        rows = connection.execute("SELECT tbl, stat FROM sqlite_stat1").fetchall()
    except sqlite3.Error:
        return {}
    estimates: dict[str, int] = {}
    for table, stat in rows:
        first = str(stat).split(" ", 1)[0]
        if first.isdigit() and len(first) < 20:
            estimates[str(table)] = max(estimates.get(str(table), 0), int(first))
    return estimates


def _sqlite_object(
    connection: sqlite3.Connection, budget: _Budget, name: str, view: bool, estimates: dict[str, int]
) -> _Object:
    found = _Object(name, view)
    quoted = _quoted(name)
    try:
        with budget.statement():
            info = connection.execute(f"PRAGMA table_info({quoted})").fetchall()
            keys = connection.execute(f"PRAGMA foreign_key_list({quoted})").fetchall() if not view else []
    except sqlite3.Error as exc:
        found.problem = f"Could not be read: {_short(exc)}"
        return found
    references = {str(key[3]): f"→ {_shown(key[2])}.{_shown(key[4] or '?')}" for key in keys}
    for _cid, column, declared, _notnull, _default, primary in info:
        notes = ["primary key"] if primary else []
        notes += [references[str(column)]] if str(column) in references else []
        found.columns.append((str(column), str(declared or ""), " ".join(notes)))
    found.rows = _counted(budget, lambda: connection.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0],
                          estimates.get(name), "sqlite_stat1", view)  # fmt: skip
    if found.columns and not budget.spent:
        clipped = ", ".join(_sqlite_clip(_quoted(column)) for column, _, _ in found.columns[:SAMPLE_COLUMNS])
        try:
            with budget.statement():
                found.sample = connection.execute(f"SELECT {clipped} FROM {quoted} LIMIT {SAMPLE_ROWS}").fetchall()
            found.sample_names = [column for column, _, _ in found.columns[:SAMPLE_COLUMNS]]
        except sqlite3.Error as exc:
            found.problem = f"Rows could not be read: {_why(exc)}"
    return found


def _sqlite_clip(column: str) -> str:
    """A column read for a sample without its whole value: a blob as its size, text as its first characters."""
    return (
        f"CASE typeof({column}) WHEN 'blob' THEN '<blob ' || length({column}) || ' bytes>' "
        f"ELSE substr({column}, 1, {MAX_CELL_CHARS + 1}) END"
    )


# --- DuckDB ------------------------------------------------------------------------------------------


def describe_duckdb(path: Path, limit: int) -> str:
    """The tables and views of the DuckDB file ``path``, in at most about ``limit`` characters.

    Raises ``ValueError`` when it cannot be opened (not a DuckDB file, another storage version), and
    ``ImportError`` when duckdb is not installed."""
    import duckdb

    budget = _Budget()
    config: dict[str, str | bool | int | float | list[str]] = {
        "enable_external_access": False,
        "autoload_known_extensions": False,
        "autoinstall_known_extensions": False,
        "threads": 1,
        "memory_limit": MEMORY_LIMIT,
        "lock_configuration": True,
    }
    try:
        connection = duckdb.connect(str(path), read_only=True, config=config)
    except duckdb.Error as exc:
        raise ValueError(_short(exc)) from exc
    try:
        return _describe_duckdb(connection, budget, limit)
    except duckdb.Error as exc:
        raise ValueError(_short(exc)) from exc
    finally:
        connection.close()


def _describe_duckdb(connection: Any, budget: _Budget, limit: int) -> str:
    import duckdb

    listed, columns, keys = _duckdb_catalog(connection)
    objects = []
    for schema, name, view, estimate in listed[:MAX_OBJECTS]:
        found = _Object(name if schema == "main" else f"{schema}.{name}", view)
        found.columns = [(c, t, keys.get((schema, name, c), "")) for c, t in columns.get((schema, name), [])]
        quoted = f"{_quoted(schema)}.{_quoted(name)}"
        count = f"SELECT count(*) FROM {quoted}"
        try:
            found.rows = _counted(budget, lambda: _run(connection, budget, count)[0][0],  # noqa: B023 (called here)
                                  estimate, "DuckDB's estimated_size", view)  # fmt: skip
            if found.columns and not budget.spent:
                picked = ", ".join(_quoted(c) for c, _, _ in found.columns[:SAMPLE_COLUMNS])
                found.sample = _run(connection, budget, f"SELECT {picked} FROM {quoted} LIMIT {SAMPLE_ROWS}")
                found.sample_names = [c for c, _, _ in found.columns[:SAMPLE_COLUMNS]]
        except duckdb.Error as exc:
            found.problem = f"Rows could not be read: {_why(exc)}"
        objects.append(found)
    return _render(objects, [view for _, _, view, _ in listed], limit)


def _duckdb_catalog(connection: Any) -> tuple[list[Any], dict[tuple[str, str], list[tuple[str, str]]], dict[Any, str]]:
    """The file's tables then views ``(schema, name, view, estimated rows)``, sorted; each one's columns
    ``(name, type)``; each key column's note (primary key, or the column it references)."""
    here = "database_name = current_database() AND NOT internal"
    tables = connection.execute(f"SELECT schema_name, table_name, estimated_size FROM duckdb_tables() WHERE {here}")
    listed = [(schema, name, False, size) for schema, name, size in tables.fetchall()]
    views = connection.execute(f"SELECT schema_name, view_name FROM duckdb_views() WHERE {here}").fetchall()
    listed += [(schema, name, True, None) for schema, name in views]
    listed.sort(key=lambda item: (item[2], item[0] != "main", item[0], item[1]))
    columns: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for schema, table, column, kind in connection.execute(
        "SELECT schema_name, table_name, column_name, data_type FROM duckdb_columns() "
        "WHERE database_name = current_database() ORDER BY schema_name, table_name, column_index"
    ).fetchall():
        columns.setdefault((schema, table), []).append((column, kind))
    keys: dict[Any, str] = {}
    for schema, table, kind, names, referenced, targets in connection.execute(
        "SELECT schema_name, table_name, constraint_type, constraint_column_names, referenced_table, "
        "referenced_column_names FROM duckdb_constraints() WHERE database_name = current_database() "
        "AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY')"
    ).fetchall():
        for index, column in enumerate(names or []):
            target = targets[index] if targets and index < len(targets) else "?"
            note = "primary key" if kind == "PRIMARY KEY" else f"→ {_shown(referenced)}.{_shown(target)}"
            keys[(schema, table, column)] = note
    return listed, columns, keys


def _run(connection: Any, budget: _Budget, sql: str) -> list[tuple[Any, ...]]:
    with _interrupt_after(connection, budget), budget.statement():
        rows: list[tuple[Any, ...]] = connection.execute(sql).fetchall()
        return rows


@contextmanager
def _interrupt_after(connection: Any, budget: _Budget) -> Iterator[None]:
    """Interrupt ``connection``'s statement at the budget's deadline (DuckDB has no progress handler)."""
    timer = threading.Timer(max(0.0, min(budget.end, time.monotonic() + STATEMENT_SECONDS) - time.monotonic()),
                            connection.interrupt)  # fmt: skip
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


# --- both --------------------------------------------------------------------------------------------


def _counted(budget: _Budget, count: Callable[[], Any], estimate: int | None, source: str, view: bool) -> str:
    """``N rows`` counted within the statement's time, else ``≈N rows`` estimated from ``source``, else why not."""
    why = "the description's time budget was spent"
    if not budget.spent:
        try:
            with budget.statement():
                return _rows(int(count()))
        except MemoryError:
            raise
        except Exception as exc:  # interrupted, or a malformed page: what the file declares, if anything, instead
            why = _why(exc)
    if estimate is not None and not view:
        return f"≈{_rows(int(estimate))} (estimated from {source}; not counted: {why})"
    return f"rows not counted ({why})"


def _rows(count: int) -> str:
    return f"{count:,} row" + ("" if count == 1 else "s")


def _render(objects: Sequence[_Object], views: Sequence[bool], limit: int) -> str:
    """The objects' entries within ``limit`` characters: each by name (and row count) first, then as many as fit
    with their columns, then with sample rows, in order; ``views`` says of every table and view in the file
    whether it is a view (those past ``MAX_OBJECTS`` are counted, not described)."""
    if not views:
        return "no tables or views"
    head = f"{len(views) - sum(views)} table(s), {sum(views)} view(s)"
    levels = [0] * len(objects)
    entries = [[_name_only(found), _entry(found, sample=False), _entry(found, sample=True)] for found in objects]
    used = len(head) + sum(len(entry[0]) + 1 for entry in entries)
    for level in (1, 2):
        for index, entry in enumerate(entries):
            grown = len(entry[level]) - len(entry[levels[index]])
            if used + grown <= limit - 100:
                levels[index], used = level, used + grown
    parts, size = [head], len(head)
    for index, entry in enumerate(entries):
        if size + len(entry[levels[index]]) > limit - 100:
            return "\n".join([*parts, _rest(objects[index:], len(views) - index)])
        parts.append(entry[levels[index]])
        size += len(parts[-1]) + 1
    if len(views) > len(objects):
        parts.append(f"… and {len(views) - len(objects)} more, not described")
    return "\n".join(parts)


def _rest(objects: Sequence[_Object], count: int) -> str:
    names = ", ".join(_shown(found.name) for found in objects)
    return f"… and {count} more, not described: {names[:80]}" + ("…" if len(names) > 80 else "")


def _entry(found: _Object, *, sample: bool) -> str:
    lines = [_name_only(found)]
    if found.columns:
        listed = [
            f"{_shown(name)} {_cell(kind)}".rstrip() + (f" ({note})" if note else "")
            for name, kind, note in found.columns
        ]
        more = f", … and {len(listed) - MAX_COLUMNS} more" if len(listed) > MAX_COLUMNS else ""
        lines.append("Columns: " + ", ".join(listed[:MAX_COLUMNS]) + more)
    if found.problem:
        lines.append(found.problem)
    if sample and found.sample:
        rows = [[_cell(name) for name in found.sample_names], ["---"] * len(found.sample_names)]
        rows += [[_cell(value) for value in row] for row in found.sample]
        lines.append(f"First {len(found.sample)} row(s):")
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _name_only(found: _Object) -> str:
    return f"### {'view' if found.view else 'table'} {_shown(found.name)} · {found.rows or 'not described'}"


def _shown(name: object) -> str:
    """A name from the file, as the prompt shows it: one line, in backticks it cannot close, at most 64 characters."""
    text = " ".join(str(name).split()).replace("`", "'")
    return f"`{text if len(text) <= 64 else text[:63] + '…'}`"


def _cell(value: Any) -> str:
    text = "" if value is None else " ".join(str(value).split())
    text = text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"
    return text.replace("|", "\\|")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _why(exc: BaseException) -> str:
    """Why a statement failed, in a few words: the time limit (interrupted), else the engine's message."""
    return "stopped at the time limit" if "interrupt" in str(exc).lower() else _short(exc, 120)


def _short(exc: BaseException, limit: int = 200) -> str:
    text = " ".join(str(exc).split("\nLINE ", 1)[0].split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
