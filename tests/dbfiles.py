"""Database files for tests: a small shop as SQLite and as DuckDB, the same rows in each."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
from openai_server import OpenAIServer, Reply

from kernel_agent import AsyncAgent
from kernel_agent.records import Run

__all__ = ["run_with", "shop", "shop_duckdb"]


def run_with(
    openai_server: OpenAIServer,
    tmp_path: Path,
    data: Sequence[str | Path],
    code: str,
    check: Callable[[str], None],
) -> Run:
    """A run over ``data`` whose scripted model ``check``s its first request's text, runs ``code``, then answers."""

    def first(body: dict[str, Any]) -> Reply:
        check("\n".join(str(message.get("content")) for message in body["messages"]))
        return Reply(f"<Code>\n{code}</Code>")

    openai_server.add(first, Reply("<Answer>done</Answer>"))

    async def scenario() -> Run:
        async with AsyncAgent(
            model="m", base_url=openai_server.base_url, api_key="sk-test", protocol="tags", max_rounds=3
        ) as agent:
            return await agent.run("Total per customer?", list(data), tmp_path / "ws", tmp_path / "run.ipynb")

    return asyncio.run(scenario())


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
