"""Live PostgreSQL sources through a whole run: ``--data NAME=URI`` → the broker → ``sql()`` in the sandboxed
kernel → the notebook → ``replay`` and ``resume`` reconnecting by name. A real PostgreSQL (a role whose
password only ``PGPASSFILE`` holds, the server asking for it), a real sandboxed kernel, the real CLI and
``openai`` SDK against the scripted server."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import tempfile
from contextlib import aclosing
from pathlib import Path
from typing import Any

import nbformat
import pytest
from click.testing import CliRunner, Result
from leaks import kernels_of, source_connections, temp_leftovers
from openai_server import OpenAIServer, Reply, python_call
from pgshop import QUERIED, QUERY, Shop, order_totals

from kernel_agent import AsyncAgent
from kernel_agent.agent.run.live import LiveSources
from kernel_agent.cli import cli
from kernel_agent.events import ExecutionOutput
from kernel_agent.sources.spec import parse_source

pytestmark = [pytest.mark.kernel, pytest.mark.postgresql]


def invoke(*args: Any) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def _reach(socket_path: Path, url: str) -> str:
    """Code that tries the database directly from the kernel: its socket, then psycopg with the URI."""
    return (
        "import socket\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect({str(socket_path)!r})\n"
        "    print('socket REACHED')\n"
        "except OSError as exc:\n"
        "    print('socket unreachable:', type(exc).__name__)\n"
        "import psycopg\n"
        "try:\n"
        f"    psycopg.connect({url!r}, connect_timeout=5).close()\n"
        "    print('psycopg REACHED')\n"
        "except psycopg.OperationalError:\n"
        "    print('psycopg unreachable')\n"
        # What it was started with (a forked kernel's: its template's) and what it runs with: both password-free.
        "import os\n"
        "print('environ:', open('/proc/self/environ', 'rb').read().replace(b'\\0', b' ').decode(),\n"
        "      ' '.join(f'{k}={v}' for k, v in os.environ.items()))\n"
    )


WRITE = (
    "try:\n"
    '    sql("DELETE FROM orders")\n'
    "    print('write WENT THROUGH')\n"
    "except RuntimeError as exc:\n"
    "    print('write refused:', exc)\n"
    'print("orders now:", int(sql("SELECT count(*) AS n FROM orders")["n"][0]))'
)


def test_a_run_queries_postgresql_through_the_broker_and_replays_and_resumes_by_name(
    openai_server: OpenAIServer,
    shop: Shop,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    openai_server.add(Reply("Query.", tool_calls=(python_call(QUERY),)))
    openai_server.add(Reply("Reach it directly.", tool_calls=(python_call(_reach(shop.socket, shop.url)),)))
    openai_server.add(Reply("Write.", tool_calls=(python_call(WRITE),)))
    openai_server.add(Reply("40 orders worth 1230."))
    workspace, notebook = tmp_path / "ws", tmp_path / "out" / "run.ipynb"
    result = invoke(
        "run", "Orders by customer", "--data", f"shop={shop.url}", "--model", "m", "--json",
        "--workspace", workspace, "--out", notebook,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert events[-1]["event"] == "finished" and events[-1]["run"]["stop_reason"] == "answer"

    # The first request describes the schema: both tables, their columns, their row counts.
    first = openai_server.requests[0]["messages"][-1]["content"]
    for word in ("shop", "customers", "orders", "customer_id", "amount", "40", 'sql("SELECT'):
        assert word in first, word
    outputs = [message.get("content") or "" for message in openai_server.requests[-1]["messages"]]
    seen = "\n".join(str(output) for output in outputs)
    assert QUERIED in seen  # sql() in the sandboxed kernel
    assert "socket unreachable" in seen and "psycopg unreachable" in seen and "REACHED" not in seen
    assert "write refused:" in seen and "WENT THROUGH" not in seen and "orders now: 40" in seen
    assert order_totals(shop) == (40, 1230.0)

    # The notebook names the source and its kind, never where it is.
    meta = nbformat.read(notebook, as_version=4).metadata["kernel_agent"]
    assert meta["sources"] == [{"name": "shop", "kind": "postgresql"}]
    report = tmp_path / "report.html"
    assert invoke("show", notebook, "--html", report).exit_code == 0
    assert "sql(" in report.read_text()

    # Nothing is left (tests/leaks.py): no source's connection, no socket folder, no kernel.
    assert source_connections() == []

    # Replay reconnects by name: given again it runs; without it (no service either) it names the source.
    replayed = invoke("replay", notebook, "--no-check", "--data", f"shop={shop.url}")
    assert replayed.exit_code == 0, replayed.output
    missing = invoke("replay", notebook)
    assert missing.exit_code == 2 and "'shop'" in missing.output and "pg_service.conf" in missing.output
    assert source_connections() == []

    # Resume reconnects too, and its new round queries again.
    openai_server.add(Reply("Again.", tool_calls=(python_call('print("again", len(sql("SELECT * FROM orders")))'),)))
    openai_server.add(Reply("Still 40."))
    resumed = invoke(
        "resume", notebook, "Still there?", "--data", f"shop={shop.url}", "--model", "m", "--json",
        "--workspace", workspace,
    )  # fmt: skip
    assert resumed.exit_code == 0, resumed.output
    assert "again 40" in json.dumps(openai_server.requests[-1]["messages"])
    assert nbformat.read(notebook, as_version=4).cells[1].source.count("def sql(") == 1  # defined once, not again
    assert source_connections() == []

    # The password is nowhere: no request, event, log line, notebook, page, workspace file, kernel environment.
    secret = shop.password.encode()
    assert secret not in json.dumps(openai_server.requests).encode()
    assert secret not in (result.output + resumed.output + replayed.output + missing.output).encode()
    assert shop.password not in caplog.text
    assert secret not in report.read_bytes()
    for path in [*workspace.rglob("*"), *notebook.parent.rglob("*")]:
        if path.is_file() and not path.is_symlink():
            assert secret not in path.read_bytes(), path
    assert "environ:" in seen and "KERNEL_AGENT_SQL=/run/kernel-agent/" in seen  # the kernel's own environment


def test_a_run_stopped_mid_query_leaves_no_connection_socket_or_kernel(
    openai_server: OpenAIServer, shop: Shop, tmp_path: Path
) -> None:
    code = (
        'print("first", int(sql("SELECT count(*) AS n FROM orders")["n"][0]), flush=True)\nsql("SELECT pg_sleep(60)")'
    )
    openai_server.add(Reply("Query, then wait.", tool_calls=(python_call(code),)))
    seen: list[str] = []

    async def stopped() -> None:
        agent = AsyncAgent(model="m", base_url=openai_server.base_url, api_key="sk-test", protocol="tools")
        async with agent:
            events = agent.stream("t", [f"shop={shop.url}"], tmp_path / "ws", tmp_path / "run.ipynb")
            async with aclosing(events):  # closed mid-query: the run stops, its code too
                async for event in events:
                    if isinstance(event, ExecutionOutput):
                        seen.append(event.text)
                        if "first 40" in "".join(seen):
                            break

    asyncio.run(stopped())
    assert "first 40" in "".join(seen)
    assert source_connections() == []  # the broker cancelled the sleeping query and closed its connections
    assert kernels_of(os.getpid()) == []
    assert not list(Path(tempfile.gettempdir()).glob("kernel-agent-sql-*"))


def test_a_run_whose_source_cannot_be_reached_fails_clearly_and_leaves_nothing(
    openai_server: OpenAIServer, shop: Shop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    failed = invoke(
        "run", "t", "--data", "postgresql:///?service=nowhere_known", "--model", "m", "--workspace", tmp_path / "ws"
    )
    assert failed.exit_code == 2 and "'nowhere_known'" in failed.output, failed.output
    assert openai_server.requests == []  # no model call
    assert kernels_of(os.getpid()) == []
    assert not list(Path(tempfile.gettempdir()).glob("kernel-agent-sql-*"))
    assert source_connections() == []


def test_the_leak_check_counts_a_broker_folder_and_a_source_connection_left_open(shop: Shop) -> None:
    live = LiveSources([parse_source(f"shop={shop.url}")])

    async def scenario() -> str:
        async with live:
            assert live.socket is not None
            folder = live.socket.parent.name
            assert "customers" in await live.described()  # a connection of the role, kept for the next query
            assert folder.startswith("kernel-agent-sql-") and folder in temp_leftovers()
            (held,) = source_connections(wait_s=0)
            assert held.endswith(f"{shop.role}@{shop.url.rsplit('/', 1)[1].split('?')[0]}"), held
        return folder

    folder = asyncio.run(scenario())
    assert folder not in temp_leftovers() and source_connections() == []
