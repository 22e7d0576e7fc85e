"""``sql()`` on database FILE sources through a whole run: a run whose only data is a two-table SQLite (or DuckDB)
file gets ``sql`` from its setup cell, the first request says ``sql("SELECT …", source=NAME)`` works on it, and the
model's ``sql()`` returns the right DataFrame in the sandboxed kernel while a write through it fails clearly; beside
a live PostgreSQL source, ``sql()`` without ``source`` names both, and ``source=`` picks each.

Real parts: the openai SDK over HTTP to the scripted server, a real sandboxed kernel, real SQLite, DuckDB and
PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from dbfiles import run_with, shop, shop_duckdb
from openai_server import OpenAIServer
from postgres import PostgresServer
from sourcedb import owned_database

from kernel_agent.records import Run

pytestmark = pytest.mark.kernel

TOTALS = (
    "SELECT c.name, sum(o.amount) AS total FROM orders o JOIN customers c ON c.id = o.customer_id "
    "GROUP BY c.name ORDER BY c.name"
)

FILE_CODE = f"""\
df = sql("{TOTALS}", source="shop")
print(type(df).__name__, df.values.tolist())
print("alone:", int(sql("SELECT count(*) AS n FROM orders")["n"][0]))
try:
    sql("DELETE FROM orders", source="shop")
    print("written!")
except RuntimeError as exc:
    print("write refused:", exc)
print("orders now:", int(sql("SELECT count(*) AS n FROM orders")["n"][0]))
"""


def stdout_of(run: Run) -> str:
    (code_round,) = [r for r in run.rounds if r.code is not None]
    assert code_round.result is not None and code_round.result.status == "ok", code_round.result
    return code_round.result.stdout


@pytest.mark.parametrize(
    ("make", "name", "refusal"),
    [
        (shop, "shop.sqlite", "attempt to write a readonly database"),
        (shop_duckdb, "shop.duckdb", "read-only mode"),
    ],
)
def test_sql_queries_a_database_file_read_only_in_the_sandboxed_kernel(
    openai_server: OpenAIServer, tmp_path: Path, make: Callable[[Path], Path], name: str, refusal: str
) -> None:
    def check(prompt: str) -> None:
        assert f"## {name} · `data.shop`" in prompt
        assert 'or in one step with `df = sql("SELECT …", source="shop")` (the setup cell\'s)' in prompt

    run = run_with(openai_server, tmp_path, [str(make(tmp_path / name))], FILE_CODE, check)
    assert run.stop_reason == "answer"
    assert "def sql(query" in run.info.setup_code and 'FILE_SOURCES.update({"shop": "' + name + '"})' in (
        run.info.setup_code
    )
    output = stdout_of(run)
    assert output.startswith("DataFrame [['Ann', 30.5], ['Bob', 7.25], ['Cy', 3.0]]\nalone: 5\n"), output
    assert f"write refused: sql() on {name}: " in output and refusal in output, output
    assert "written!" not in output and output.endswith("orders now: 5\n")


@pytest.mark.postgresql
def test_a_database_file_beside_a_live_source_each_by_name(
    openai_server: OpenAIServer, tmp_path: Path, postgres: PostgresServer
) -> None:
    live = owned_database(postgres, "live")
    live.run("CREATE TABLE visits (id integer PRIMARY KEY)", "INSERT INTO visits SELECT generate_series(1, 7)")
    code = (
        "try:\n"
        '    sql("SELECT 1 AS one")\n'
        "except RuntimeError as exc:\n"
        '    print("no source:", exc)\n'
        'print("file:", int(sql("SELECT count(*) AS n FROM orders", source="shop")["n"][0]))\n'
        'print("live:", int(sql("SELECT count(*) AS n FROM visits", source="live")["n"][0]))\n'
    )

    def check(prompt: str) -> None:
        assert 'source="shop"' in prompt and 'source="live"' in prompt and "visits" in prompt

    data = [str(shop(tmp_path / "shop.sqlite")), f"live={live.owner}"]
    output = stdout_of(run_with(openai_server, tmp_path, data, code, check))
    assert output == (
        "no source: sql(): there are several data sources; name one with source=: shop, live\nfile: 5\nlive: 7\n"
    ), output
