"""A PostgreSQL database of two tables reached by a role with a password only ``PGPASSFILE`` holds (the
server asking for it: scram), for tests of live sources: ``Shop``, made by ``shop_database`` (the ``shop``
fixture), and what a test checks of it (``open_connections``, ``order_totals``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from postgres import PostgresServer

__all__ = ["QUERY", "QUERIED", "Shop", "open_connections", "order_totals", "shop_database"]

# Kernel code querying the shop with sql(), and what it prints from the right DataFrame.
QUERY = (
    'df = sql("SELECT c.name, count(*) AS n, sum(o.amount) AS total FROM orders o '
    'JOIN customers c ON c.id = o.customer_id GROUP BY c.name ORDER BY c.name")\n'
    'print(type(df).__name__, df.shape, int(df["n"].sum()), float(df["total"].sum()))'
)
QUERIED = "DataFrame (5, 3) 40 1230.0"


@dataclass(frozen=True)
class Shop:
    """A database of two tables, reached by a role with a password (``url``: no password in it)."""

    url: str  # the role's URI, as a user gives it
    admin: str  # the superuser's, for the test's own checks
    role: str
    password: str
    socket: Path  # the server's Unix socket


@contextmanager
def shop_database(postgres: PostgresServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shop]:
    """A fresh database on ``postgres``, its role's password in a ``PGPASSFILE`` under ``tmp_path`` (set in the
    environment by ``monkeypatch``, with no pg_service.conf of anyone's); dropped with its role on exit."""
    name = f"shop_{uuid.uuid4().hex[:8]}"
    admin = postgres.database(name)
    role, password = f"analyst_{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute("CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL)")
        connection.execute(
            "CREATE TABLE orders (id integer PRIMARY KEY, customer_id integer NOT NULL REFERENCES customers (id), "
            "amount numeric(10, 2) NOT NULL)"
        )
        connection.execute("INSERT INTO customers SELECT g, 'customer ' || g FROM generate_series(1, 5) AS g")
        connection.execute("INSERT INTO orders SELECT g, g % 5 + 1, g * 1.5 FROM generate_series(1, 40) AS g")
        connection.execute("ANALYZE")
        # A role the database itself would let write: the broker's read-only transaction is what refuses.
        connection.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        connection.execute(f"GRANT ALL ON customers, orders TO {role}")
    hba = postgres.data / "pg_hba.conf"
    original = hba.read_text()
    hba.write_text(f"local all {role} scram-sha-256\n{original}")  # this role must give its password
    _reload(admin)
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:{role}:{password}\n")
    passfile.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    monkeypatch.setenv("PGSERVICEFILE", str(tmp_path / "no-services.conf"))  # no service of anyone's
    monkeypatch.setenv("PGSYSCONFDIR", str(tmp_path))
    url = admin.replace("postgresql://test@", f"postgresql://{role}@", 1)
    try:
        yield Shop(url, admin, role, password, postgres.folder / ".s.PGSQL.5432")
    finally:
        hba.write_text(original)
        _reload(admin)
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f"DROP OWNED BY {role}")
            connection.execute(f"DROP ROLE {role}")


def _reload(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("SELECT pg_reload_conf()")


def open_connections(shop: Shop) -> int:
    """The connections the role has open now (the run's must all be closed)."""
    with psycopg.connect(shop.admin, autocommit=True) as connection:
        row = connection.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (shop.role,)).fetchone()
    assert row is not None
    return int(row[0])


def order_totals(shop: Shop) -> tuple[int, float]:
    with psycopg.connect(shop.admin, autocommit=True) as connection:
        row = connection.execute("SELECT count(*), sum(amount) FROM orders").fetchone()
    assert row is not None
    return int(row[0]), float(row[1])
