"""A run with a database file as data: the first request describes its tables (names, columns, row counts) with
the line that opens it read-only, and the model's code opens it so in the sandboxed kernel and gets the right
numbers, while a write to the copy fails and changes nothing.

Real parts: the openai SDK over HTTP to the scripted server, a real sandboxed kernel, real SQLite and DuckDB.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from dbfiles import run_with, shop, shop_duckdb
from openai_server import OpenAIServer, Reply
from replicas import Replica, follow

from kernel_agent.agent.datafiles import describer
from kernel_agent.cli import cli
from kernel_agent.records import Run

pytestmark = pytest.mark.kernel

TOTALS = (
    "SELECT c.name, sum(o.amount) AS total FROM orders o JOIN customers c ON c.id = o.customer_id "
    "GROUP BY c.name ORDER BY c.name"
)
EXPECTED = "[['Ann', 30.5], ['Bob', 7.25], ['Cy', 3.0]]\n"

SQLITE_CODE = f"""\
import sqlite3
con = sqlite3.connect("file:shop.sqlite?mode=ro", uri=True)
print(pd.read_sql_query("{TOTALS}", con).values.tolist())
for opened in (con, sqlite3.connect("shop.sqlite")):  # read-only, then as if it were writable
    try:
        opened.execute("DELETE FROM orders")
        opened.commit()
        print("written!")
    except sqlite3.Error as exc:
        print("write refused:", exc)
"""

DUCKDB_CODE = f"""\
import duckdb
con = duckdb.connect("shop.duckdb", read_only=True)
print(con.sql("{TOTALS}").df().values.tolist())
try:
    con.execute("DELETE FROM orders")
    print("written!")
except duckdb.Error as exc:
    print("write refused:", type(exc).__name__)
try:
    duckdb.connect("shop.duckdb").execute("DELETE FROM orders")
    print("written!")
except duckdb.Error as exc:
    print("write refused:", type(exc).__name__)
"""


def stdout_of(run: Run) -> str:
    (code_round,) = [r for r in run.rounds if r.code is not None]
    assert code_round.result is not None and code_round.result.status == "ok", code_round.result
    return code_round.result.stdout


def test_a_sqlite_file_is_described_first_and_opened_read_only_in_the_kernel(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    def check(prompt: str) -> None:
        assert "## shop.sqlite · `data.shop`\nSQLite database · 12.0 KB" in prompt
        assert (
            "### table `customers` · 3 rows\nColumns: `id` INTEGER (primary key), `name` TEXT, `region` TEXT" in prompt
        )
        assert "### table `orders` · 5 rows\nColumns: `id` INTEGER (primary key), `customer_id` INTEGER" in prompt
        assert 'Open it read-only with `con = sqlite3.connect("file:shop.sqlite?mode=ro", uri=True)`' in prompt

    run = run_with(openai_server, tmp_path, [shop(tmp_path / "shop.sqlite")], SQLITE_CODE, check)
    assert run.stop_reason == "answer"
    assert stdout_of(run) == EXPECTED + "write refused: attempt to write a readonly database\n" * 2
    with sqlite3.connect(f"file:{tmp_path / 'ws' / 'shop.sqlite'}?mode=ro", uri=True) as copy:
        assert copy.execute("SELECT count(*) FROM orders").fetchone() == (5,)
    copy.close()


def test_a_duckdb_file_is_described_first_and_opened_read_only_in_the_kernel(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    def check(prompt: str) -> None:
        assert "## shop.duckdb · `data.shop`\nDuckDB database · " in prompt
        assert "### table `customers` · 3 rows\nColumns: `id` INTEGER (primary key), `name` VARCHAR" in prompt
        assert "### table `orders` · 5 rows\nColumns: `id` INTEGER (primary key), `customer_id` INTEGER" in prompt
        assert 'Open it read-only with `con = duckdb.connect("shop.duckdb", read_only=True)`' in prompt

    run = run_with(openai_server, tmp_path, [shop_duckdb(tmp_path / "shop.duckdb")], DUCKDB_CODE, check)
    assert run.stop_reason == "answer"
    output = stdout_of(run)
    assert output.startswith(EXPECTED) and "written!" not in output
    assert output.count("write refused:") == 2
    with duckdb.connect(str(tmp_path / "ws" / "shop.duckdb"), read_only=True) as copy:
        assert copy.execute("SELECT count(*) FROM orders").fetchone() == (5,)


def test_a_service_upload_of_a_database_file_is_described_the_same(model: OpenAIServer, tmp_path: Path) -> None:
    files = [shop(tmp_path / "shop.sqlite"), shop_duckdb(tmp_path / "shop.duckdb")]
    data = tmp_path / "data"
    data.mkdir()
    with Replica(data, model.base_url, database=f"sqlite:///{tmp_path / 'records.db'}") as server:
        ids = []
        for path in files:
            with path.open("rb") as handle:
                uploaded = server.client.post("/v1/files", files={"file": (path.name, handle)})
            assert uploaded.status_code == 200, uploaded.text
            ids.append(uploaded.json()["id"])
        model.add(Reply("Both databases are described."))
        run = server.client.post("/v1/runs", json={"task": "Describe", "file_ids": ids})
        assert run.status_code == 201, run.text
        follow(server.client, run.json()["id"])
        record = server.client.get(f"/v1/runs/{run.json()['id']}").json()
    assert record["status"] == "completed", record
    told = "\n".join(str(message.get("content")) for message in model.requests[-1]["messages"])
    for path in files:
        described = describer.describe(path)
        assert described in told  # as `run --data` describes it
    assert "## shop.sqlite · `data.shop`\nSQLite database · 12.0 KB" in told
    assert "## shop.duckdb · `data.shop_duckdb`\nDuckDB database · " in told


def test_an_r_kernel_is_told_the_dbi_line(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(Reply("Two tables: customers and orders."))
    data = shop(tmp_path / "shop.sqlite")
    result = CliRunner().invoke(
        cli,
        ["run", "Which tables?", "--kernel", "ir", "--model", "m", "--base-url", openai_server.base_url,
         "--data", str(data), "--workspace", str(tmp_path / "ws"), "--quiet"],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    told = "\n".join(str(message.get("content")) for message in openai_server.requests[0]["messages"])
    assert "### table `orders` · 5 rows" in told
    assert (
        'Open it read-only with `con <- DBI::dbConnect(RSQLite::SQLite(), "shop.sqlite", flags = RSQLite::SQLITE_RO)`'
        ' and query it with `DBI::dbGetQuery(con, "SELECT …")`'
    ) in told
