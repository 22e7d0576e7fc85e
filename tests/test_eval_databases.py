"""The docs' example database suites (``docs/examples/db-suite/``) run end to end through ``kernel-agent eval``:
the SQLite file made by its own script, copied into each question's sandboxed kernel and described to the
model, queried there by a scripted model whose answers are what the kernel printed, and scored; and the
same questions of a live PostgreSQL source the suite names and ``eval --data`` connects, queried with
``sql()`` through the broker, the connection in no request, notebook or result."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from leaks import our_kernel_pids
from openai_server import OpenAIServer, Reply, python_call
from postgres import PostgresServer

from kernel_agent.cli import cli

pytestmark = pytest.mark.kernel

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "db-suite"
_ANSWER = re.compile(r"@(\w+)\[([^\]\n]*)\]")

# Each question's query, by the answer name its task asks for; the kernel prints the answer.
_QUERIES = {
    "north_orders": "SELECT count(*) AS n FROM orders o JOIN customers c ON c.id = o.customer_id "
    "WHERE c.region = 'North'",
    "top_customer": "SELECT c.name AS n FROM orders o JOIN customers c ON c.id = o.customer_id "
    "GROUP BY c.name ORDER BY sum(o.total) DESC LIMIT 1",
    "mean_total": "SELECT round(avg(total), 2) AS n FROM orders",
}


class QueryingAnalyst:
    """A script entry for ``OpenAIServer``: round 1 queries the question's database in the kernel and prints
    ``@name[value]``; round 2 answers with what the kernel printed, so a score is right only when the
    query ran against the real data in the kernel."""

    def __init__(self, code: str) -> None:
        self.code = code  # a format string: {query}, {name}
        self.first_requests: list[str] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        first = next(m["content"] for m in messages if m["role"] == "user")
        name = next(n for n in _QUERIES if f"@{n}[" in json.dumps(first))
        if not any(m["role"] == "assistant" for m in messages):
            self.first_requests.append(json.dumps(messages, ensure_ascii=False))
            code = self.code.format(query=_QUERIES[name], name=name)
            return Reply("Querying.", tool_calls=(python_call(code),))
        seen = json.dumps([m for m in messages if m["role"] not in ("system", "assistant")][1:])
        found = [value for key, value in _ANSWER.findall(seen) if key == name]
        return Reply(f"@{name}[{found[-1]}]" if found else "I could not tell.")


def _suite(tmp_path: Path, name: str) -> Path:
    """The example folder copied out of the checkout (a suite in a tree every kernel reads is refused), its
    data made by its own script."""
    folder = tmp_path / "db-suite"
    shutil.copytree(EXAMPLE, folder)
    subprocess.run([sys.executable, str(folder / "make_shop.py")], check=True)
    return folder / name


def test_the_example_sqlite_suite_is_copied_described_queried_in_the_kernel_and_scored(
    tmp_path: Path, openai_server: OpenAIServer
) -> None:
    suite = _suite(tmp_path, "suite.jsonl")
    code = (
        "import sqlite3\n"
        "import pandas as pd\n"
        "with sqlite3.connect('file:shop.sqlite?mode=ro', uri=True) as con:\n"
        "    df = pd.read_sql({query!r}, con)\n"
        "print(f'@{name}[{{df.n[0]}}]')"
    )
    analyst = QueryingAnalyst(code)
    openai_server.add(*[analyst] * 20)
    out = tmp_path / "out"
    args = ["eval", str(suite), "--model", "m", "--base-url", openai_server.base_url, "--out", str(out), "-j", "1"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output

    rows = {row["id"]: row for row in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert {qid: row["outcome"] for qid, row in rows.items()} == {"db1": "correct", "db2": "correct", "db3": "correct"}
    assert rows["db1"]["parsed"] == {"north_orders": "8"} and rows["db2"]["parsed"] == {"top_customer": "Cleo"}
    assert "accuracy by question        100.00%  (3/3)" in result.stdout
    for row in rows.values():  # the file, copied whole into each question's workspace, read-only
        copy = out / Path(row["notebook"]).parent / "workspace" / "shop.sqlite"
        assert copy.read_bytes() == (suite.parent / "shop.sqlite").read_bytes()
        assert not copy.stat().st_mode & 0o222
    assert len(analyst.first_requests) == 3
    for request in analyst.first_requests:  # described to the model: the file, its tables, columns and keys
        assert "shop.sqlite" in request and "SQLite database" in request
        assert "table `customers` · 6 rows" in request and "table `orders` · 16 rows" in request
        assert "`customer_id` INTEGER (→ `customers`.`id`)" in request
        assert 'sqlite3.connect(\\"file:shop.sqlite?mode=ro\\", uri=True)' in request  # the line that opens it
    assert not our_kernel_pids()


@pytest.mark.postgresql
def test_the_example_live_suite_queries_the_source_the_runner_names_and_is_scored(
    tmp_path: Path, openai_server: OpenAIServer, postgres: PostgresServer
) -> None:
    import psycopg

    suite = _suite(tmp_path, "suite-live.jsonl")
    url = postgres.database("evalshop")
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute((suite.parent / "shop.sql").read_text().replace("BEGIN;", "").replace("COMMIT;", ""))
    analyst = QueryingAnalyst("df = sql({query!r})\nprint(f'@{name}[{{df.n[0]}}]')")
    openai_server.add(*[analyst] * 20)
    out = tmp_path / "out"
    args = ["eval", str(suite), "--model", "m", "--base-url", openai_server.base_url, "--out", str(out), "-j", "1"]
    result = CliRunner().invoke(cli, [*args, "--data", f"shop={url}"], catch_exceptions=False)
    assert result.exit_code == 0, result.output

    rows = {row["id"]: row for row in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert {qid: row["outcome"] for qid, row in rows.items()} == {"db1": "correct", "db2": "correct", "db3": "correct"}
    for request in analyst.first_requests:  # the source described by the host, under its name
        assert "## shop · live postgresql database" in request and "### public.orders (table, 16 rows)" in request
    where = url.split("host=")[1]  # the server's socket folder: the connection, never recorded
    recorded = [json.dumps(body) for body in openai_server.requests]
    recorded += [
        path.read_text() for path in out.rglob("*") if path.is_file() and path.suffix in (".ipynb", ".jsonl", ".json")
    ]
    assert not [text for text in recorded if where in text or postgres.folder.name in text]
    notebook = json.loads((out / rows["db1"]["notebook"]).read_text())
    assert notebook["metadata"]["kernel_agent"]["sources"] == [{"name": "shop", "kind": "postgresql"}]
    assert not our_kernel_pids()
