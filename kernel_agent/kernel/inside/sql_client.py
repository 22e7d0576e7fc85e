"""``sql(query, source=None)`` in the kernel, and the wire format it shares with the host's broker.

The setup cell defines this module's text in the kernel (a notebook replays without kernel-agent installed
there), then fills ``FILE_SOURCES`` (a database file's source name → its file name in the workspace) and
``LIVE_SOURCES`` (the live sources' names). A file source is opened here, read-only, on the workspace's
copy (``sqlite3`` ``mode=ro``, ``duckdb`` ``read_only``); a live one is asked of the host's broker
(``sources/broker.py``) on the Unix socket ``KERNEL_AGENT_SQL`` names, which holds the credentials: the
kernel has none, and no network.

The wire, one query per connection: the request is a frame (4-byte big-endian length, then UTF-8 JSON
``{"query": str, "source": str | null}``, at most ``MAX_REQUEST_BYTES``); the answer a header frame
(``{"ok": true, "source": NAME}`` or ``{"ok": false, "error": MESSAGE}``), then, when ok, an Arrow IPC
stream, then a trailer frame ``{"rows", "bytes", "capped": null | "rows" | "bytes" | "time", "error"}``.
Standard library, pandas and pyarrow only; nothing of ours from outside ``inside/``.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
from typing import Any

__all__ = [
    "FILE_SOURCES",
    "LIVE_SOURCES",
    "MAX_FRAME_BYTES",
    "MAX_REQUEST_BYTES",
    "SOCKET_ENV",
    "frame",
    "read_frame",
    "sql",
]

SOCKET_ENV = "KERNEL_AGENT_SQL"  # the broker's socket, as the kernel sees it
MAX_REQUEST_BYTES = 1024 * 1024  # a request's JSON: a query longer than this is refused unread
MAX_FRAME_BYTES = 1024 * 1024  # a header or trailer from the broker
_LENGTH = struct.Struct(">I")
FILE_SOURCES: dict[str, str] = {}
LIVE_SOURCES: list[str] = []


def frame(value: dict[str, Any]) -> bytes:
    """``value`` as one frame: its JSON's length (4 bytes, big-endian), then the JSON."""
    body = json.dumps(value).encode()
    return _LENGTH.pack(len(body)) + body


def read_frame(read: Any, limit: int) -> dict[str, Any]:
    """One frame read with ``read(n)`` (a file's ``read``). Raises ``ValueError`` for a frame over ``limit``
    bytes, cut short, or not a JSON object."""
    head = _read_exactly(read, _LENGTH.size)
    (length,) = _LENGTH.unpack(head)
    if length > limit:
        raise ValueError(f"a frame of {length} bytes is over the {limit}-byte bound")
    value = json.loads(_read_exactly(read, length))
    if not isinstance(value, dict):
        raise ValueError("a frame is not a JSON object")
    return value


def _read_exactly(read: Any, size: int) -> bytes:
    data = read(size)
    if len(data) != size:
        raise ValueError("the connection ended mid-frame")
    return bytes(data)


def sql(query: str, source: str | None = None) -> Any:
    """The result of ``query`` on data source ``source`` (None: the only one) as a pandas DataFrame. Raises
    ``RuntimeError`` with the database's or the broker's message when the query is refused or fails;
    warns on stderr when the result was cut at a cap."""
    if not isinstance(query, str) or not query.strip():
        raise TypeError("sql() wants the query as a non-empty string")
    if source is None:
        names = [*FILE_SOURCES, *LIVE_SOURCES]
        if len(names) > 1:
            raise RuntimeError(f"sql(): there are several data sources; name one with source=: {', '.join(names)}")
        source = names[0] if names else None
    if source is not None and source in FILE_SOURCES:
        return _query_file(FILE_SOURCES[source], query)
    return _query_broker(query, source)


def _query_file(name: str, query: str) -> Any:
    import pandas

    with open(name, "rb") as file:
        magic = file.read(16)
    if magic == b"SQLite format 3\x00":
        import sqlite3
        from urllib.parse import quote

        connection = sqlite3.connect(f"file:{quote(os.path.abspath(name))}?mode=ro", uri=True)
        try:
            return pandas.read_sql_query(query, connection)
        except (sqlite3.Error, pandas.errors.DatabaseError) as exc:
            raise RuntimeError(f"sql() on {name}: {exc}") from None
        finally:
            connection.close()
    import duckdb

    database = duckdb.connect(name, read_only=True)
    try:
        return database.execute(query).df()
    except duckdb.Error as exc:
        raise RuntimeError(f"sql() on {name}: {exc}") from None
    finally:
        database.close()


def _query_broker(query: str, source: str | None) -> Any:
    import pyarrow.ipc

    path = os.environ.get(SOCKET_ENV)
    if not path:
        wanted = repr(source) if source else "a live data source"
        raise RuntimeError(
            f"sql(): no query broker reaches this kernel for {wanted}: run the notebook with kernel-agent, which "
            f"connects each source by its name (replay NOTEBOOK --data NAME=postgresql://…, or resume it)"
        )
    request = frame({"query": query, "source": source})
    if len(request) - _LENGTH.size > MAX_REQUEST_BYTES:
        raise RuntimeError(f"sql(): the query is over the {MAX_REQUEST_BYTES}-byte bound")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        try:
            connection.connect(path)
        except OSError as exc:
            raise RuntimeError(f"sql(): the host's query broker is not there ({exc.strerror or exc})") from None
        try:
            connection.sendall(request)
        except OSError:
            pass  # answered and closed unread (the broker busy): the answer, still there to read, says why
        answer = connection.makefile("rb")
        try:
            header = read_frame(answer.read, MAX_FRAME_BYTES)
            if not header.get("ok"):
                raise RuntimeError(f"sql(): {header.get('error') or 'the query failed'}")
            table = pyarrow.ipc.open_stream(answer).read_all()
            trailer = read_frame(answer.read, MAX_FRAME_BYTES)
        except ValueError as exc:
            raise RuntimeError(f"sql(): the broker's answer was cut short or malformed ({exc})") from None
        finally:
            answer.close()
    if trailer.get("error"):
        raise RuntimeError(f"sql(): {trailer['error']}")
    _warn_capped(trailer, header.get("source") or source or "")
    return table.to_pandas()


def _warn_capped(trailer: dict[str, Any], source: str) -> None:
    capped, rows = trailer.get("capped"), trailer.get("rows", 0)
    why = {"rows": "the row cap", "bytes": "the byte cap", "time": "the time limit"}.get(str(capped))
    if why:
        print(
            f"sql(): result stopped at {rows} rows ({why}); the rest of {source}'s result was not fetched: "
            "aggregate or filter in SQL, or add LIMIT",
            file=sys.stderr,
        )
