"""The database docs say what the code does: every ``kernel-agent`` line of the tutorial and of eval's
database section parses against the real commands, and the source plug-in the plug-ins page shows is a
working ``SourceKind`` (read-only, one statement, a timeout, a cancel, a password refused unechoed), run as
written and through the real broker."""

from __future__ import annotations

import importlib.util
import re
import shlex
import sqlite3
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
from brokers import running_broker
from test_docs import parse

from kernel_agent.errors import QueryError, SourceError
from kernel_agent.kernel.inside.sql_client import SOCKET_ENV, sql
from kernel_agent.sources import DescribeLimits, QueryLimits, SourceKind, SourceSpec

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "docs" / "tutorials" / "databases.md", ROOT / "docs" / "how-to" / "eval.md")
PLUGINS = ROOT / "docs" / "how-to" / "plugins.md"


def command_lines(page: Path) -> list[list[str]]:
    """Every ``kernel-agent …`` line in ``page``'s shell blocks, continuation lines joined, as argv (a synopsis
    with ``[--option …]`` placeholders left out)."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if "&&" in words:
                words = words[words.index("&&") + 1 :]
            if words and words[0] == "kernel-agent" and not any(word.startswith("[") for word in words):
                lines.append(words[1:])
    return lines


def test_every_kernel_agent_command_of_the_database_pages_parses() -> None:
    argvs = [argv for page in PAGES for argv in command_lines(page)]
    for argv in argvs:
        try:
            parse(argv)
        except click.ClickException as exc:
            raise AssertionError(f"kernel-agent {shlex.join(argv)}: {exc.format_message()}") from exc
    given = [argv[argv.index("--data") + 1] for argv in argvs if "--data" in argv]
    assert "shop=postgresql://ann@localhost/shop" in given and "postgresql:///?service=shop" in given
    assert {"run", "replay", "resume", "show", "eval"} <= {argv[0] for argv in argvs}


def plugin_example(tmp_path: Path) -> ModuleType:
    """The plug-ins page's source kind, its code block written to a module and imported as written."""
    text = PLUGINS.read_text(encoding="utf-8")
    (code,) = [block for block in re.findall(r"```python\n(.*?)```", text, re.S) if "SourceKind(" in block]
    path = tmp_path / "their_hostsqlite.py"
    path.write_text(code, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("their_hostsqlite", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_the_plugin_pages_source_kind_keeps_its_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kind = plugin_example(tmp_path).HOSTSQLITE
    assert isinstance(kind, SourceKind) and kind.schemes == ("hostsqlite",)
    with pytest.raises(SourceError) as refused:
        kind.check("hostsqlite://ann:hunter2@db.example/srv/big.db")
    assert "hunter2" not in str(refused.value)

    database = tmp_path / "big.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
        connection.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"n{i}") for i in range(25_000)])
    connection.close()
    target = f"hostsqlite://{database}"
    assert kind.check(target) == "big"
    source: Any = kind.open(SourceSpec("big", "hostsqlite", target))  # the example's own HostSQLite
    try:
        assert "- t (table): id INTEGER, name TEXT" in source.describe(DescribeLimits())
        rows = source.query("SELECT id, name FROM t ORDER BY id", QueryLimits())
        batches = list(rows)
        assert sum(batch.num_rows for batch in batches) == 25_000 and batches[0].schema.names == ["id", "name"]
        (empty,) = list(source.query("SELECT id FROM t WHERE id < 0", QueryLimits()))
        assert empty.num_rows == 0 and empty.schema.names == ["id"]

        for write in ("INSERT INTO t VALUES (-1, 'x')", "DROP TABLE t", "SELECT 1; DROP TABLE t"):
            with pytest.raises(QueryError):
                list(source.query(write, QueryLimits()))
        forever = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"
        with pytest.raises(QueryError, match="interrupted"):  # a query without end, ended by its timeout
            list(source.query(forever, QueryLimits(timeout_s=0.2)))

        failed: list[BaseException] = []

        def run_forever() -> None:
            try:
                list(source.query(forever, QueryLimits(timeout_s=600)))
            except QueryError as exc:
                failed.append(exc)

        worker = threading.Thread(target=run_forever)
        worker.start()
        while not source.running and worker.is_alive():  # the query is under way
            time.sleep(0.01)
        source.cancel()  # from another thread: it ends now, long before its timeout
        worker.join(30)
        assert not worker.is_alive() and len(failed) == 1 and not source.running
        assert sum(b.num_rows for b in source.query("SELECT * FROM t", QueryLimits())) == 25_000

        # Through the broker, as a kernel's sql() reaches it: capped by the broker, a write refused in words.
        with running_broker({"big": source}, QueryLimits(max_rows=10_000)) as broker:
            monkeypatch.setenv(SOCKET_ENV, str(broker.socket))
            frame = sql("SELECT id, name FROM t ORDER BY id", source="big")
            assert frame.shape == (10_000, 2) and frame.name.iloc[-1] == "n9999"
            assert "sql(): result stopped at 10000 rows (the row cap)" in capsys.readouterr().err
            with pytest.raises(RuntimeError, match="sql\\(\\): .*readonly database"):
                sql("DELETE FROM t", source="big")
    finally:
        source.close()
    with sqlite3.connect(database) as connection:
        assert connection.execute("SELECT count(*), min(id) FROM t").fetchone() == (25_000, 0)
    connection.close()
