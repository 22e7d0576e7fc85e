"""The SQL broker with a real PostgreSQL, its client (``kernel/inside/sql_client.sql``) called from the
test's thread as the kernel's code would: the right DataFrame back, refusals and timeouts said as the
database said them, caps said and the host's memory bounded, several connections at once, and hostile
clients (a request over the bound, garbage, one that leaves mid-stream, one that stops reading) never
taking the broker down or holding up the others."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pandas
import psutil
import psycopg
import pytest
from brokers import running_broker
from leaks import source_connections
from postgres import PostgresServer
from sourcedb import OwnedDatabase, owned_database

from kernel_agent.kernel.inside import sql_client
from kernel_agent.kernel.inside.sql_client import MAX_REQUEST_BYTES, SOCKET_ENV, frame, read_frame, sql
from kernel_agent.sources import QueryLimits, Source, open_source, parse_source, postgresql_source
from kernel_agent.sources import broker as broker_module
from kernel_agent.sources.broker import Broker

pytestmark = pytest.mark.postgresql

SHOP = (
    "CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL)",
    "INSERT INTO customers VALUES (1, 'Ann'), (2, 'Bob'), (3, 'Cy')",
)


@pytest.fixture
def shop(postgres: PostgresServer) -> OwnedDatabase:
    database = owned_database(postgres)
    database.run(*SHOP)
    return database


@pytest.fixture
def source(shop: OwnedDatabase) -> Source:
    return open_source(parse_source(f"shop={shop.owner}"))  # the broker owns it: closed with it


@pytest.fixture
def broker(source: Source, monkeypatch: pytest.MonkeyPatch) -> Iterator[Broker]:
    with running_broker({"shop": source}, QueryLimits(timeout_s=5)) as running:
        monkeypatch.setenv(SOCKET_ENV, str(running.socket))
        monkeypatch.setattr(sql_client, "LIVE_SOURCES", ["shop"])
        yield running


def raw(broker: Broker, data: bytes) -> dict[str, object]:
    """Send ``data`` as it is and read the answer's header."""
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(str(broker.socket))
        connection.sendall(data)
        with connection.makefile("rb") as answer:
            return read_frame(answer.read, 1 << 20)


def test_a_query_comes_back_as_the_right_dataframe(broker: Broker) -> None:
    got = sql(
        """SELECT n AS i, n * 1.5::float8 AS f, (n * 2.25)::numeric(10, 2) AS total, 'row ' || n AS label,
                  n % 2 = 0 AS even, DATE '2024-01-01' + n AS day,
                  TIMESTAMPTZ '2024-01-01 00:00:00+00' + n * INTERVAL '1 hour' AS at
           FROM generate_series(1, 3) AS n
           UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL ORDER BY 1"""
    )
    assert isinstance(got, pandas.DataFrame) and list(got.columns) == ["i", "f", "total", "label", "even", "day", "at"]
    assert got["i"].tolist()[:3] == [1, 2, 3] and pandas.isna(got["i"][3])
    assert got["f"].tolist()[:3] == [1.5, 3.0, 4.5] and got["total"].tolist()[:3] == [2.25, 4.5, 6.75]
    assert got["label"].tolist()[:3] == ["row 1", "row 2", "row 3"] and pandas.isna(got["label"][3])
    assert got["even"].tolist()[:3] == [False, True, False] and pandas.isna(got["even"][3])
    assert [str(day) for day in got["day"][:3]] == ["2024-01-02", "2024-01-03", "2024-01-04"]
    assert pandas.isna(got["day"][3])
    assert str(got["at"].dtype).startswith("datetime64") and str(got["at"].dt.tz) == "UTC"
    assert got["at"][0] == pandas.Timestamp("2024-01-01 01:00:00", tz="UTC") and pandas.isna(got["at"][3])
    assert sql("SELECT name FROM customers WHERE false").columns.tolist() == ["name"]


@pytest.mark.parametrize(
    ("write", "said"),
    [
        ("INSERT INTO customers VALUES (9, 'Eve')", 'syntax error at or near "INSERT"'),
        ("COPY (SELECT 1) TO PROGRAM 'true'", 'syntax error at or near "COPY"'),
        ("SELECT 1; DROP TABLE customers", "cannot insert multiple commands into a prepared statement"),
    ],
)
def test_a_write_is_refused_with_the_databases_message_and_changes_nothing(
    broker: Broker, shop: OwnedDatabase, write: str, said: str
) -> None:
    with pytest.raises(RuntimeError, match="sql\\(\\): ") as refused:
        sql(write, source="shop")
    assert said in str(refused.value) and "read-only statement" in str(refused.value)
    assert shop.rows("SELECT count(*) FROM customers") == [(3,)]


def test_the_timeout_ends_a_long_query_and_the_next_one_works(source: Source, monkeypatch: pytest.MonkeyPatch) -> None:
    with running_broker({"shop": source}, QueryLimits(timeout_s=0.3)) as broker:
        monkeypatch.setenv(SOCKET_ENV, str(broker.socket))
        with pytest.raises(RuntimeError, match="canceling statement due to statement timeout"):
            sql("SELECT pg_sleep(60)")
        assert sql("SELECT 7 AS seven")["seven"].tolist() == [7]


def test_the_wall_deadline_stops_a_slow_stream_and_says_so(
    source: Source, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(postgresql_source, "CHUNK_ROWS", 5)  # each FETCH well inside the statement timeout
    monkeypatch.setattr(broker_module, "MARGIN_S", 0.5)
    with running_broker({"shop": source}, QueryLimits(timeout_s=0.5)) as broker:
        monkeypatch.setenv(SOCKET_ENV, str(broker.socket))
        got = sql("SELECT n, pg_sleep(0.02) FROM generate_series(1, 100000) AS n")
        assert 0 < len(got) < 100000 and got["n"].tolist() == list(range(1, len(got) + 1))
        assert f"sql(): result stopped at {len(got)} rows (the time limit)" in capsys.readouterr().err
        assert sql("SELECT 1 AS one")["one"].tolist() == [1]


def test_a_source_must_be_named_when_there_are_several_and_exist(
    shop: OwnedDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = {name: open_source(parse_source(f"{name}={shop.owner}")) for name in ("north", "south")}
    with running_broker(sources) as broker:
        monkeypatch.setenv(SOCKET_ENV, str(broker.socket))
        with pytest.raises(
            RuntimeError, match=r"name a data source with sql\(query, source=NAME\); the live ones: north, south"
        ):
            sql("SELECT 1")
        with pytest.raises(RuntimeError, match=r"no live data source is named 'west'; the live ones: north, south"):
            sql("SELECT 1", source="west")
        assert sql("SELECT count(*) AS n FROM customers", source="south")["n"].tolist() == [3]


def test_a_result_over_the_row_cap_stops_there_says_so_and_the_hosts_memory_stays_bounded(
    source: Source, tmp_path: Path
) -> None:
    """10 M rows of ~110 bytes (over 1 GB as Arrow) through a 1 M-row cap; the client in a process of its
    own (as the kernel is), the broker's process sampled for its resident memory meanwhile."""
    me = psutil.Process()
    peak = baseline = me.memory_info().rss
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.005):
            peak = max(peak, me.memory_info().rss)

    client = (
        "from kernel_agent.kernel.inside.sql_client import sql\n"
        "got = sql(\"SELECT n, repeat('x', 100) AS pad FROM generate_series(1, 10000000) AS n\")\n"
        "print(len(got), got['n'].iloc[-1], len(got['pad'].iloc[0]))\n"
    )
    with running_broker({"shop": source}, QueryLimits(timeout_s=120)) as broker:
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            done_process = subprocess.run(
                [sys.executable, "-c", client],
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, SOCKET_ENV: str(broker.socket), "PYTHONPATH": os.pathsep.join(sys.path)},
            )
        finally:
            done.set()
            sampler.join()
    assert done_process.returncode == 0, done_process.stderr
    assert done_process.stdout.split() == ["1000000", "1000000", "100"]
    assert "sql(): result stopped at 1000000 rows (the row cap)" in done_process.stderr
    assert peak - baseline < 300 * 1024 * 1024  # one batch of 50k rows at a time, never the result


def test_a_request_over_the_bound_or_garbage_is_answered_and_the_broker_goes_on(broker: Broker) -> None:
    over = raw(broker, struct.pack(">I", MAX_REQUEST_BYTES + 1) + b"{")
    assert over == {"ok": False, "error": f"the request ({MAX_REQUEST_BYTES + 1} bytes) is over the 1048576-byte bound"}
    not_json = {"ok": False, "error": "the request is not JSON (or nested past what a request needs)"}
    assert raw(broker, struct.pack(">I", 5) + b"hello") == not_json
    assert raw(broker, struct.pack(">I", 200_000) + b"[" * 200_000) == not_json
    assert raw(broker, frame({"query": 1})) == {
        "ok": False,
        "error": 'the request is not {"query": str, "source": str | null}',
    }
    assert (
        raw(broker, frame({"query": "SELECT 1", "source": ["shop"]}))["error"] == "the request's source is not a name"
    )
    with pytest.raises(RuntimeError, match=f"the query is over the {MAX_REQUEST_BYTES}-byte bound"):
        sql("SELECT '" + "x" * MAX_REQUEST_BYTES + "'")
    assert sql("SELECT 2 AS two")["two"].tolist() == [2]


def test_a_client_that_leaves_mid_stream_or_stops_reading_holds_up_no_one(broker: Broker, shop: OwnedDatabase) -> None:
    big = frame({"query": "SELECT n, repeat('x', 100) AS pad FROM generate_series(1, 3000000) AS n", "source": None})
    leaver = socket.socket(socket.AF_UNIX)
    leaver.connect(str(broker.socket))
    leaver.sendall(big)
    assert len(leaver.recv(65536)) > 0  # the answer has begun
    leaver.close()
    stuck = socket.socket(socket.AF_UNIX)
    stuck.connect(str(broker.socket))
    stuck.sendall(big)  # and never reads: the broker waits on it alone
    try:
        for _ in range(6):  # more than the broker runs at once: the stuck one holds one slot at most
            assert sql("SELECT count(*) AS n FROM customers")["n"].tolist() == [3]
    finally:
        stuck.close()
    assert sql("SELECT 3 AS three")["three"].tolist() == [3]


def test_closing_the_broker_cancels_what_runs_and_removes_its_folder(
    source: Source, shop: OwnedDatabase, monkeypatch: pytest.MonkeyPatch
) -> None:
    failed: list[BaseException] = []
    with running_broker({"shop": source}, QueryLimits(timeout_s=60)) as broker:
        monkeypatch.setenv(SOCKET_ENV, str(broker.socket))

        def long_query() -> None:
            try:
                sql("SELECT pg_sleep(60)")
            except BaseException as exc:  # the test reads it
                failed.append(exc)

        asking = threading.Thread(target=long_query)
        asking.start()
        while not shop.rows("SELECT 1 FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'FETCH%'"):
            pass  # the query runs on the server
        started = time.monotonic()
    asking.join(30)
    assert time.monotonic() - started < 30
    assert len(failed) == 1 and isinstance(failed[0], RuntimeError)
    assert not broker.folder.exists()
    assert shop.rows("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE 'FETCH%'") == [(0,)]


def test_a_client_that_leaves_while_its_query_is_starting_leaves_no_connection_open(
    source: Source, shop: OwnedDatabase
) -> None:
    with psycopg.connect(shop.admin) as locker:  # in a transaction: the lock is held until it commits
        locker.execute("LOCK TABLE customers IN ACCESS EXCLUSIVE MODE")
        with running_broker({"shop": source}) as broker:
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(str(broker.socket))
                client.sendall(frame({"query": "SELECT * FROM customers", "source": None}))
                waiting = "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'DECLARE%'"
                while not shop.rows(waiting):
                    pass  # the query's start (its DECLARE) waits for the table
            locker.commit()  # the client has gone: the start finishes now, and its connection must be freed
    assert source_connections() == []


def test_a_broker_that_cannot_listen_says_why_and_leaves_nothing(tmp_path: Path) -> None:
    import asyncio

    from kernel_agent.errors import SourceError

    class Closing:
        closed = False

        def close(self) -> None:
            Closing.closed = True

    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    broker = Broker({"x": Closing()}, deep)  # type: ignore[dict-item]  # only close() is asked of it
    with pytest.raises(SourceError, match="the broker's socket path is too long for a Unix socket"):
        asyncio.run(broker.__aenter__())
    assert Closing.closed and not deep.exists()


def test_a_result_over_the_byte_cap_stops_there_and_says_so(
    source: Source, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with running_broker({"shop": source}, QueryLimits(max_bytes=2_000_000)) as broker:
        monkeypatch.setenv(SOCKET_ENV, str(broker.socket))
        got = sql("SELECT n, repeat('x', 100) AS pad FROM generate_series(1, 200000) AS n")
    assert 10_000 < len(got) < 200_000 and got["n"].tolist() == list(range(1, len(got) + 1))
    assert len(got) * 100 <= 2_000_000  # the text alone of what came fits under the cap
    assert f"sql(): result stopped at {len(got)} rows (the byte cap)" in capsys.readouterr().err


def test_past_the_open_connections_bound_a_connection_is_told_the_broker_is_busy(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker_module, "MAX_OPEN", 1)
    with socket.socket(socket.AF_UNIX) as silent:
        silent.connect(str(broker.socket))  # accepted first, it holds the one place while it says nothing
        with pytest.raises(RuntimeError, match="the broker is busy: too many queries at once"):
            sql("SELECT 1")
    monkeypatch.setattr(broker_module, "MAX_OPEN", 16)  # the silent one may still be on its way out
    assert sql("SELECT 1 AS one")["one"].tolist() == [1]
