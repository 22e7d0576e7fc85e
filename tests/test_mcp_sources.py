"""The MCP server's live sources: ``kernel-agent mcp --data NAME=URI`` over stdio, the official SDK client,
a real PostgreSQL (a role whose password only ``PGPASSFILE`` holds), a real sandboxed kernel querying it with
``sql()`` through the session's broker; ``describe_data`` describes the database."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from pgshop import QUERIED, QUERY, Shop, open_connections
from test_mcp import open_stdio, stdio_params, text_of, wait_until_gone

from kernel_agent.cli import cli


@pytest.mark.kernel
@pytest.mark.postgresql
def test_the_mcp_kernel_queries_a_live_source_and_describe_data_describes_it(shop: Shop, tmp_path: Path) -> None:
    workspace, errlog = tmp_path / "ws", tmp_path / "server.log"
    params = stdio_params(workspace, "--data", f"shop={shop.url}", "--timeout", "60")
    with open_stdio(params, errlog) as client:
        described = text_of(client.call("describe_data"))
        for word in ("shop", "customers", "orders", "customer_id", "sql("):
            assert word in described, word
        result = client.call("execute_python", {"code": QUERY})
        assert not result.is_error and QUERIED in text_of(result)
        refused = client.call("execute_python", {"code": 'sql("DELETE FROM orders")'})
        assert refused.is_error and "RuntimeError" in text_of(refused)
        environment = client.call("execute_python", {"code": "import os; print(sorted(os.environ))"})
        assert "KERNEL_AGENT_SQL" in text_of(environment) and "PGPASSFILE" not in text_of(environment)
        assert not client.call("export_notebook", {"path": "session.ipynb"}).is_error
        outputs = [text_of(result), text_of(refused), described]
    assert wait_until_gone(workspace) == []
    assert open_connections(shop) == 0  # the session's broker closed with it
    notebook = json.loads((workspace / "session.ipynb").read_text())
    assert notebook["metadata"]["kernel_agent"]["sources"] == [{"name": "shop", "kind": "postgresql"}]
    assert any("def sql(" in "".join(cell["source"]) for cell in notebook["cells"])  # the setup cell's, replayable
    secret = shop.password.encode()
    assert secret not in errlog.read_bytes() and not any(shop.password in text for text in outputs)
    for path in [*workspace.rglob("*"), *tmp_path.glob("*.ipynb")]:
        if path.is_file() and not path.is_symlink():
            assert secret not in path.read_bytes(), path


def test_mcp_refuses_a_source_with_a_password_and_never_echoes_it(tmp_path: Path) -> None:
    given = "shop=postgresql://ann:hunter2@db/shop"
    result = CliRunner().invoke(cli, ["mcp", "--workspace", str(tmp_path / "ws"), "--data", given])
    assert result.exit_code == 2 and "~/.pgpass" in result.output and "hunter2" not in result.output
    assert not (tmp_path / "ws").exists() or not os.listdir(tmp_path / "ws")
