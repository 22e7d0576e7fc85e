"""``sql()`` as the kernel runs it, on database FILE sources (no broker: the kernel opens the workspace's
copy read-only itself), its choice of source, and its text run on its own (the setup cell defines it, so a
notebook replays without kernel-agent in the kernel's environment)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import duckdb
import pytest

from kernel_agent.kernel.inside import sql_client


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The client's text run in a namespace of its own, as the setup cell runs it, with two file sources."""
    namespace: dict[str, Any] = {"__name__": "setup_cell"}
    exec(compile(Path(sql_client.__file__).read_text(), "sql_client", "exec"), namespace)
    lite = sqlite3.connect(tmp_path / "sales.sqlite")
    with lite:
        lite.execute("CREATE TABLE sales (region TEXT, amount REAL)")
        lite.executemany("INSERT INTO sales VALUES (?, ?)", [("north", 10.5), ("south", 4.0), ("north", 1.5)])
    lite.close()
    with duckdb.connect(str(tmp_path / "stock.duckdb")) as duck:
        duck.execute("CREATE TABLE stock AS SELECT * FROM (VALUES ('bolt', 7), ('nut', 0)) AS t(item, count)")
    namespace["FILE_SOURCES"].update({"sales": "sales.sqlite", "stock": "stock.duckdb"})
    monkeypatch.chdir(tmp_path)  # the kernel's cwd is its workspace, where the copies are
    monkeypatch.delenv(sql_client.SOCKET_ENV, raising=False)
    return namespace


def test_a_sqlite_and_a_duckdb_file_are_queried_by_name(client: dict[str, Any]) -> None:
    sql = client["sql"]
    totals = sql("SELECT region, sum(amount) AS total FROM sales GROUP BY region ORDER BY region", source="sales")
    assert totals.to_dict("records") == [{"region": "north", "total": 12.0}, {"region": "south", "total": 4.0}]
    stock = sql("SELECT item FROM stock WHERE count > 0", source="stock")
    assert stock["item"].tolist() == ["bolt"]


@pytest.mark.parametrize(
    ("source", "write", "said"),
    [
        ("sales", "INSERT INTO sales VALUES ('east', 1)", "attempt to write a readonly database"),
        ("sales", "DROP TABLE sales", "attempt to write a readonly database"),
        ("stock", "DELETE FROM stock", "read-only mode"),
    ],
)
def test_a_file_is_opened_read_only(client: dict[str, Any], tmp_path: Path, source: str, write: str, said: str) -> None:
    with pytest.raises(RuntimeError, match=said):
        client["sql"](write, source=source)
    assert len(client["sql"]("SELECT * FROM sales", source="sales")) == 3
    assert len(client["sql"]("SELECT * FROM stock", source="stock")) == 2


def test_the_source_must_be_named_when_there_are_several(client: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match="there are several data sources; name one with source=: sales, stock"):
        client["sql"]("SELECT 1")
    client["FILE_SOURCES"].pop("stock")
    assert client["sql"]("SELECT count(*) AS n FROM sales")["n"].tolist() == [3]  # the only one
    client["LIVE_SOURCES"].append("shop")
    with pytest.raises(RuntimeError, match="name one with source=: sales, shop"):
        client["sql"]("SELECT 1")


def test_a_live_source_without_a_broker_is_a_clear_error(client: dict[str, Any]) -> None:
    # e.g. Run All in a notebook's own kernel: the source is named, and how to reach it said
    with pytest.raises(RuntimeError, match=r"no query broker reaches this kernel for 'shop': .*replay NOTEBOOK --data"):
        client["sql"]("SELECT 1", source="shop")
    with pytest.raises(TypeError, match="sql\\(\\) wants the query as a non-empty string"):
        client["sql"]("  ", source="sales")


def test_the_client_text_imports_only_what_a_kernel_has() -> None:
    import ast

    tree = ast.parse(Path(sql_client.__file__).read_text())
    imported = {
        (alias.name if isinstance(node, ast.Import) else node.module or "").partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported == {"__future__", "json", "os", "socket", "struct", "sys", "typing", "pandas", "sqlite3",
                        "urllib", "duckdb", "pyarrow"}  # fmt: skip
