"""The PostgreSQL source against a real server: its schema described (tables, views, columns, row counts
and estimates, keys, within bounds), results as Arrow with their types, every kind of write refused for a
role that owns the table (nothing changes), the statement timeout and a cancel ending a query with the next
one working, session state never carried to the next query, and a password found only through
``PGPASSFILE`` (really asked for, and shown nowhere)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pyarrow
import pytest
from postgres import PASSWORD_GROUP, PostgresServer
from sourcedb import OwnedDatabase, owned_database

from kernel_agent.errors import QueryError, SourceError
from kernel_agent.sources import DescribeLimits, QueryLimits, Source, SourceSpec, open_source, parse_source
from kernel_agent.sources.postgresql_source import READ_ONLY_HINT

pytestmark = pytest.mark.postgresql

SHOP = (
    "CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL)",
    "CREATE TABLE orders (id bigint PRIMARY KEY, customer_id integer REFERENCES customers (id), total numeric(10, 2))",
    "INSERT INTO customers VALUES (1, 'Ann'), (2, 'Bob'), (3, 'Cy')",
    "INSERT INTO orders VALUES (10, 1, 9.50), (11, 1, 20.25), (12, 3, NULL)",
)


@pytest.fixture
def shop(postgres: PostgresServer) -> OwnedDatabase:
    database = owned_database(postgres)
    database.run(*SHOP)
    return database


@pytest.fixture
def source(shop: OwnedDatabase) -> Iterator[Source]:
    opened = open_source(parse_source(f"shop={shop.owner}"))
    yield opened
    opened.close()


def table(source: Source, query: str, limits: QueryLimits | None = None) -> pyarrow.Table:
    return pyarrow.Table.from_batches(list(source.query(query, limits or QueryLimits())))


def test_a_one_table_schema_is_described(postgres: PostgresServer) -> None:
    database = owned_database(postgres)
    database.run("CREATE TABLE readings (at timestamptz NOT NULL, value double precision)")
    database.run("INSERT INTO readings VALUES (now(), 1.5), (now(), NULL)")
    source = open_source(parse_source(database.owner))
    try:
        described = source.describe(DescribeLimits())
    finally:
        source.close()
    assert described.startswith(f"PostgreSQL source `{database.name}`: 1 table")
    assert "### public.readings (table, 2 rows)" in described
    assert "columns: at timestamp with time zone not null, value double precision" in described
    assert "key:" not in described


def test_a_two_table_schema_is_described_with_its_keys(source: Source) -> None:
    described = source.describe(DescribeLimits())
    assert "### public.customers (table, 3 rows)\ncolumns: id integer not null, name text not null\n" in described
    assert "key: primary key (id)" in described
    assert "### public.orders (table, 3 rows)" in described
    assert "columns: id bigint not null, customer_id integer, total numeric(10,2)" in described
    assert "key: foreign key (customer_id) → customers(id)" in described


def test_a_big_table_is_estimated_and_said_so_and_the_listing_is_bounded(shop: OwnedDatabase) -> None:
    shop.run(
        "CREATE TABLE events AS SELECT n AS id, md5(n::text) AS tag FROM generate_series(1, 100000) AS n",
        "ANALYZE events",
        "CREATE VIEW big_orders AS SELECT * FROM orders WHERE total > 10",
    )
    shop.run("CREATE SCHEMA hidden", "CREATE TABLE hidden.secret (x int)", admin=True)  # not the owner's to read
    source = open_source(parse_source(shop.admin))  # the superuser reads every schema
    try:
        described = source.describe(DescribeLimits())
        assert "### public.big_orders (view)\ncolumns: id bigint, customer_id integer" in described
        assert "### public.events (table, about 100,000 rows (estimated))" in described
        assert "### hidden.secret (table, 0 rows)" in described
        bounded = source.describe(DescribeLimits(max_tables=2))
        assert bounded.startswith(f"PostgreSQL source `{shop.name}`: 5 tables")
        assert bounded.count("\n### ") == 2 and bounded.endswith("… and 3 more (not listed: the description's limits).")
        short = source.describe(DescribeLimits(max_chars=300))
        assert len(short) <= 300 + 80 and "more (not listed" in short
    finally:
        source.close()
    owners = open_source(parse_source(shop.owner))
    try:
        assert "hidden.secret" not in owners.describe(DescribeLimits())
    finally:
        owners.close()


def test_results_come_as_arrow_with_their_types_and_nulls(source: Source) -> None:
    got = table(
        source,
        """SELECT 1::int AS i, 2::bigint AS b, 1.5::float8 AS f, 9.25::numeric(10,2) AS n, 'x'::text AS t,
                  true AS ok, DATE '2024-02-29' AS d, TIMESTAMPTZ '2024-01-02 03:04:05+02' AS at,
                  '{"a": [1]}'::jsonb AS j, ARRAY[1, 2] AS arr, '\\x0102'::bytea AS raw,
                  gen_random_uuid() IS NOT NULL AS u
           UNION ALL
           SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL""",
    )
    assert [str(field.type) for field in got.schema] == [
        "int32", "int64", "double", "double", "string", "bool", "date32[day]", "timestamp[us, tz=UTC]",
        "string", "string", "binary", "bool",
    ]  # fmt: skip
    first, second = got.to_pylist()
    assert first["i"] == 1 and first["b"] == 2 and first["f"] == 1.5 and first["n"] == 9.25 and first["t"] == "x"
    assert first["d"].isoformat() == "2024-02-29" and first["at"].isoformat() == "2024-01-02T01:04:05+00:00"
    assert first["j"] == '{"a": [1]}' and first["arr"] == "[1, 2]" and first["raw"] == b"\x01\x02"
    assert set(second.values()) == {None}
    frame = got.to_pandas()
    assert str(frame["i"].dtype) == "float64" and str(frame["n"].dtype) == "float64"  # NULLs in int: pandas' NaN


def test_an_empty_result_keeps_its_columns(source: Source) -> None:
    got = table(source, "SELECT id, name FROM customers WHERE false")
    assert got.num_rows == 0 and got.schema.names == ["id", "name"]


WRITES = [
    "INSERT INTO customers VALUES (9, 'Eve')",
    "DROP TABLE customers",
    "COPY (SELECT 1) TO PROGRAM 'true'",
    "CREATE TEMP TABLE kept AS SELECT 1",
    "SET TRANSACTION READ WRITE; INSERT INTO customers VALUES (9, 'Eve')",
    "COMMIT; INSERT INTO customers VALUES (9, 'Eve')",
    "WITH gone AS (DELETE FROM customers RETURNING *) SELECT * FROM gone",
    "SELECT sneak()",
    "SELECT nextval('counter')",
    "SELECT set_config('transaction_read_only', 'off', true), sneak()",
    "UPDATE customers SET name = 'Eve' RETURNING *",
    "TRUNCATE customers",
    "CALL sneaky_procedure()",
]


@pytest.mark.parametrize("write", WRITES)
def test_every_write_fails_clearly_and_changes_nothing_for_the_tables_owner(
    shop: OwnedDatabase, source: Source, write: str
) -> None:
    shop.run(
        "CREATE FUNCTION sneak() RETURNS int VOLATILE LANGUAGE sql AS 'INSERT INTO customers VALUES (9, ''Eve'') "
        "RETURNING 1'",
        "CREATE PROCEDURE sneaky_procedure() LANGUAGE sql AS 'INSERT INTO customers VALUES (9, ''Eve'')'",
        "CREATE SEQUENCE counter",
    )
    before = shop.rows("SELECT * FROM customers ORDER BY id")
    with pytest.raises(QueryError) as refused:
        table(source, write)
    message = str(refused.value)
    said = (READ_ONLY_HINT, "in a read-only transaction", "read-write mode must be set before any query")
    assert any(words in message for words in said), message
    assert shop.rows("SELECT * FROM customers ORDER BY id") == before == [(1, "Ann"), (2, "Bob"), (3, "Cy")]
    assert shop.rows("SELECT last_value, is_called FROM counter") == [(1, False)]
    assert table(source, "SELECT count(*) AS n FROM pg_class WHERE relname = 'kept'").to_pylist() == [{"n": 0}]


def test_the_statement_timeout_ends_a_long_query_and_the_next_one_works(source: Source) -> None:
    with pytest.raises(QueryError, match="canceling statement due to statement timeout"):
        table(source, "SELECT pg_sleep(60)", QueryLimits(timeout_s=0.2))
    assert table(source, "SELECT count(*) AS n FROM customers").to_pylist() == [{"n": 3}]


def test_a_cancel_from_another_thread_ends_the_query_and_the_next_one_works(
    shop: OwnedDatabase, source: Source
) -> None:
    results = source.query("SELECT pg_sleep(60)", QueryLimits())
    running = threading.Event()
    failed: list[BaseException] = []

    def pull() -> None:
        running.set()
        try:
            list(results)
        except BaseException as exc:  # the test reads it
            failed.append(exc)

    puller = threading.Thread(target=pull)
    puller.start()
    running.wait()
    while not shop.rows(
        "SELECT 1 FROM pg_stat_activity WHERE query = 'FETCH FORWARD 50000 FROM \"kernel_agent_query\"'"
    ):
        pass  # the FETCH is on the server: now a cancel has something to stop
    results.cancel()
    puller.join(30)
    assert len(failed) == 1 and isinstance(failed[0], QueryError)
    assert "canceling statement due to user request" in str(failed[0])
    assert table(source, "SELECT 1 AS one").to_pylist() == [{"one": 1}]


def test_session_state_a_query_leaves_is_gone_before_the_next(shop: OwnedDatabase, source: Source) -> None:
    assert table(source, "SELECT pg_advisory_lock(42) IS NOT NULL AS locked").to_pylist() == [{"locked": True}]
    assert shop.rows("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == [(0,)]
    table(source, "SELECT set_config('search_path', 'nowhere', false)")
    assert table(source, "SELECT current_setting('search_path') AS path").to_pylist() == [{"path": '"$user", public'}]
    shown = table(
        source, "SELECT current_setting('transaction_read_only') AS ro, current_setting('application_name') AS app"
    )
    assert shown.to_pylist() == [{"ro": "on", "app": "kernel-agent"}]


SECRET = "pw-" + uuid.uuid4().hex


def test_a_password_found_only_in_the_pgpass_file_is_used_and_shown_nowhere(
    postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    database = owned_database(postgres)
    database.run(*SHOP)
    role = f"analyst_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(database.admin, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN IN ROLE {PASSWORD_GROUP} PASSWORD '{SECRET}'".encode())
        admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}".encode())
    uri = database.admin.replace("postgresql://test@", f"postgresql://{role}@", 1)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "nowhere"))
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []

    refused = open_source(parse_source(f"shop={uri}"))
    with pytest.raises(SourceError, match="cannot be reached: .*password") as no_password:
        table(refused, "SELECT 1")  # the server asks for it: the trust lines do not cover this role
    refused.close()
    seen += [str(no_password.value), repr(no_password.value), repr(refused)]

    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:{role}:{SECRET}\n")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    spec = parse_source(f"shop={uri}")
    source = open_source(spec)
    try:
        assert table(source, "SELECT count(*) AS n FROM customers").to_pylist() == [{"n": 3}]
        assert "### public.customers (table, 3 rows)" in source.describe(DescribeLimits())
        with pytest.raises(QueryError) as write:
            table(source, "INSERT INTO customers VALUES (9, 'Eve')")
        seen += [str(write.value), repr(source), repr(spec), str(spec)]
    finally:
        source.close()
    seen.append(caplog.text)
    assert all(SECRET not in text for text in seen)
    assert spec == SourceSpec("shop", "postgresql", uri)


def test_a_kept_connection_the_server_dropped_is_replaced(shop: OwnedDatabase, source: Source) -> None:
    assert table(source, "SELECT 1 AS one").to_pylist() == [{"one": 1}]  # its connection is kept
    dropped = shop.rows(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE application_name = 'kernel-agent' AND datname = '{shop.name}'"
    )
    assert dropped == [(True,)]
    assert table(source, "SELECT 2 AS two").to_pylist() == [{"two": 2}]


def test_a_table_locked_elsewhere_is_estimated_not_waited_for(shop: OwnedDatabase, source: Source) -> None:
    with psycopg.connect(shop.owner) as holder:
        holder.execute(b"LOCK TABLE orders IN ACCESS EXCLUSIVE MODE")  # held until this block ends
        described = source.describe(DescribeLimits())
        holder.rollback()
    assert "### public.orders (table)" in described and "### public.customers (table, 3 rows)" in described
