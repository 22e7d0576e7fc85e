"""Database files for tests: a small shop as SQLite and as DuckDB, the same rows in each."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb

__all__ = ["shop", "shop_duckdb"]


def shop(path: Path) -> Path:
    """A two-table SQLite file: 3 customers, 5 orders keyed to them, a view."""
    with sqlite3.connect(path) as connection:
        connection.executescript(
            """
            CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL, region TEXT);
            CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id),
                                amount REAL, scan BLOB);
            INSERT INTO customers VALUES (1, 'Ann', 'north'), (2, 'Bob', 'south'), (3, 'Cy', 'north');
            INSERT INTO orders VALUES (1, 1, 10.5, x'0102'), (2, 1, 20.0, NULL), (3, 2, 7.25, NULL),
                                      (4, 3, 1.0, NULL), (5, 3, 2.0, NULL);
            CREATE VIEW totals AS SELECT customer_id, sum(amount) AS total FROM orders GROUP BY customer_id;
            """
        )
    connection.close()
    return path


def shop_duckdb(path: Path) -> Path:
    """The same two tables in DuckDB, and a view that reads a host file when external access is on."""
    with duckdb.connect(str(path)) as connection:
        connection.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name VARCHAR, region VARCHAR)")
        connection.execute(
            "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), amount DOUBLE)"
        )
        connection.execute("INSERT INTO customers VALUES (1, 'Ann', 'north'), (2, 'Bob', 'south'), (3, 'Cy', 'north')")
        connection.execute(
            "INSERT INTO orders VALUES (1, 1, 10.5), (2, 1, 20.0), (3, 2, 7.25), (4, 3, 1.0), (5, 3, 2.0)"
        )
        connection.execute("CREATE VIEW secrets AS SELECT * FROM read_csv('/etc/passwd')")
    return path
