"""Write the example database suite's data: ``shop.sqlite`` (for ``suite.jsonl``) and ``shop.sql`` (the same
tables for PostgreSQL, for ``suite-live.jsonl``), next to this script or in the folder given.

    python make_shop.py [FOLDER]
    psql postgresql://ann@localhost/shop -f shop.sql     # the live variant's database

Two tables, fixed rows (no randomness): ``customers`` (id, name, region) and ``orders`` (id, customer_id,
placed, total). Standard library only.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

CUSTOMERS = [
    (1, "Ada", "North"),
    (2, "Bram", "South"),
    (3, "Cleo", "North"),
    (4, "Dov", "East"),
    (5, "Edda", "South"),
    (6, "Finn", "North"),
]
# (id, customer_id, placed, total): Cleo spends most (312.40 in three orders); eight orders come from the North
# (Ada's three, Cleo's three, Finn's two); the mean order total is 64.8625.
ORDERS = [
    (1, 1, "2026-01-04", 40.00),
    (2, 2, "2026-01-09", 120.50),
    (3, 3, "2026-01-15", 99.90),
    (4, 4, "2026-02-02", 15.25),
    (5, 3, "2026-02-11", 150.00),
    (6, 5, "2026-02-20", 60.00),
    (7, 6, "2026-03-01", 33.30),
    (8, 1, "2026-03-05", 75.00),
    (9, 2, "2026-03-12", 18.75),
    (10, 3, "2026-03-20", 62.50),
    (11, 6, "2026-03-28", 44.20),
    (12, 4, "2026-04-03", 61.60),
    (13, 1, "2026-04-09", 12.00),
    (14, 5, "2026-04-17", 88.80),
    (15, 2, "2026-04-25", 59.40),
    (16, 4, "2026-05-02", 96.60),
]

SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, region TEXT NOT NULL);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customers (id),
    placed DATE NOT NULL,
    total NUMERIC(10, 2) NOT NULL
);
"""


def write_sqlite(path: Path) -> None:
    """``path`` (replaced) as a SQLite database of the two tables."""
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as connection:
        connection.executescript(SCHEMA)
        connection.executemany("INSERT INTO customers VALUES (?, ?, ?)", CUSTOMERS)
        connection.executemany("INSERT INTO orders VALUES (?, ?, ?, ?)", ORDERS)
    connection.close()


def sql_script() -> str:
    """The same tables as PostgreSQL statements (``psql -f``)."""
    rows = [f"INSERT INTO customers VALUES ({i}, '{name}', '{region}');" for i, name, region in CUSTOMERS]
    rows += [f"INSERT INTO orders VALUES ({i}, {c}, DATE '{day}', {total:.2f});" for i, c, day, total in ORDERS]
    return "BEGIN;\n" + SCHEMA.strip() + "\n" + "\n".join(rows) + "\nCOMMIT;\n"


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_sqlite(folder / "shop.sqlite")
    (folder / "shop.sql").write_text(sql_script(), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
