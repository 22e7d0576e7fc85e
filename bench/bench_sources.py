"""Issue 51's benchmark: live PostgreSQL sources through the SQL broker. ``NAME`` and ``PARTS`` for ``run.py``.

* ``query``: a 1 M-row query (an int, a float and a text column) through the broker, as the kernel's
  ``sql()`` gets it (the request on the socket, a server-side cursor, Arrow batches, ``to_pandas``), vs
  the same query with psycopg in this process (one kept connection, ``fetchall`` into ``pandas.DataFrame``);
  alternating, median of each; target ≤ 1.3×. Both run here: the client in this process's main thread, the
  broker on a loop thread of its own (in a kernel the client would have a process of its own).
* ``overhead``: a one-row query, ``sql("SELECT 1")`` through the broker vs psycopg's own on a kept
  connection; the row with a target is the difference (the broker's per-query overhead, ≤ 5 ms).
* ``describe``: describing a 50-table schema (columns, keys, row counts) for the prompt (information).

PostgreSQL is the test suite's throwaway server (``tests/postgres.py``); without its binaries each row
says "not measured: no PostgreSQL" instead of failing the run.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas
import psycopg
from report import Row, median, scaled

from kernel_agent.kernel.inside import sql_client
from kernel_agent.sources import DescribeLimits, QueryLimits, open_source, parse_source

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from brokers import running_broker
from postgres import PostgresServer, postgres_binaries

NAME = "sources"


_server: PostgresServer | None = None


@contextmanager
def _database() -> Iterator[str | None]:
    """A fresh database on the module's throwaway server (started at first use, stopped by ``close``), or
    None when PostgreSQL is not installed."""
    global _server
    try:
        postgres_binaries()
    except RuntimeError:
        yield None
        return
    if _server is None:
        scratch = Path(tempfile.gettempdir())
        if os.geteuid() == 0 and scratch != Path("/tmp"):
            scratch.chmod(0o711)  # PostgreSQL's own user must pass through to its cluster (as tests/leaks.py)
        _server = PostgresServer().__enter__()
    yield _server.database(f"bench_{uuid.uuid4().hex[:10]}")


def close() -> None:
    """Stop the module's server (the runner calls it after the last part)."""
    global _server
    server, _server = _server, None
    if server is not None:
        server.close()


@contextmanager
def _sql(url: str) -> Iterator[Callable[..., pandas.DataFrame]]:
    """``sql`` as the kernel calls it, against a broker serving ``url`` as its only source."""
    with running_broker({"db": open_source(parse_source(f"db={url}"))}, QueryLimits(timeout_s=300)) as broker:
        saved = os.environ.get(sql_client.SOCKET_ENV)
        os.environ[sql_client.SOCKET_ENV] = str(broker.socket)
        try:
            yield sql_client.sql
        finally:
            if saved is None:
                os.environ.pop(sql_client.SOCKET_ENV, None)
            else:
                os.environ[sql_client.SOCKET_ENV] = saved


def _alternate(ours: Callable[[], object], theirs: Callable[[], object], rounds: int) -> tuple[float, float]:
    mine: list[float] = []
    plain: list[float] = []
    ours(), theirs()  # warm-up, discarded
    for index in range(rounds):
        for side, out in ((ours, mine), (theirs, plain))[:: 1 - 2 * (index % 2)]:
            started = time.perf_counter()
            side()
            out.append(time.perf_counter() - started)
    return median(mine), median(plain)


def _absent(*metrics: str) -> list[Row]:
    return [Row(f"{metric} — not measured: no PostgreSQL", 0.0) for metric in metrics]


def query(quick: bool) -> list[Row]:
    rows = scaled(quick, 1_000_000, 200_000, 1_000)
    metric = f"sources: {rows:,}-row query, broker → DataFrame vs psycopg → DataFrame"
    text = f"SELECT n, n * 0.5 AS half, 'row ' || n AS label FROM generate_series(1, {rows}) AS n"
    with _database() as url:
        if url is None:
            return _absent(metric)
        with _sql(url) as sql, psycopg.connect(url) as connection:

            def through_broker() -> None:
                if len(sql(text)) != rows:
                    raise RuntimeError("the broker's result is short")

            def plain() -> None:
                with connection.cursor() as cursor:
                    cursor.execute(text.encode())
                    frame = pandas.DataFrame(cursor.fetchall(), columns=[c.name for c in cursor.description or []])
                connection.rollback()
                if len(frame) != rows:
                    raise RuntimeError("psycopg's result is short")

            ours, theirs = _alternate(through_broker, plain, scaled(quick, 5, 2, 1))
    return [Row(metric, ours, theirs, max_ratio=1.3)]


def overhead(quick: bool) -> list[Row]:
    metric = "sources: one-row query, broker vs psycopg's own"
    extra = "sources: the broker's per-query overhead (ours − psycopg's)"
    with _database() as url:
        if url is None:
            return _absent(metric, extra)
        with _sql(url) as sql, psycopg.connect(url, autocommit=True) as connection:
            count = scaled(quick, 40, 10, 1)

            def through_broker() -> None:
                for _ in range(count):
                    sql("SELECT 1 AS one")

            def plain() -> None:
                for _ in range(count):
                    pandas.DataFrame(connection.execute(b"SELECT 1 AS one").fetchall(), columns=["one"])

            ours, theirs = _alternate(through_broker, plain, scaled(quick, 10, 3, 1))
    ours, theirs = ours / count, theirs / count
    return [Row(metric, ours, theirs), Row(extra, max(0.0, ours - theirs), max_seconds=0.005)]


def describe(quick: bool) -> list[Row]:
    tables = scaled(quick, 50, 50, 5)
    metric = f"sources: describing a {tables}-table schema"
    with _database() as url:
        if url is None:
            return _absent(metric)
        with psycopg.connect(url, autocommit=True) as connection:
            for index in range(tables):
                parent = f", parent integer REFERENCES t{index - 1} (id)" if index else ""
                connection.execute(
                    f"CREATE TABLE t{index} (id integer PRIMARY KEY, label text, amount numeric(12, 2), "
                    f"at timestamptz{parent})".encode()
                )
                connection.execute(
                    f"INSERT INTO t{index} (id, label) SELECT n, 'x' FROM generate_series(1, 100) n".encode()
                )
        source = open_source(parse_source(url))
        try:
            times = []
            for _ in range(scaled(quick, 7, 3, 1)):
                started = time.perf_counter()
                text = source.describe(DescribeLimits())
                times.append(time.perf_counter() - started)
                if f"### public.t{tables - 1} " not in text:
                    raise RuntimeError("the description is short")
        finally:
            source.close()
    return [Row(metric, median(times))]


PARTS = {"query": query, "overhead": overhead, "describe": describe}
