"""The MCP server over streamable HTTP, through the official SDK client: a kernel per session.

One ``kernel-agent mcp --transport http`` subprocess serves the module; each
test opens its own client sessions. Kernels are found by their working
directory: each HTTP session has its own subfolder of the workspace.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_client import HeldClient
from ports import listening_port
from test_mcp import CLI, kernels_in, text_of, wait_until_gone

pytestmark = pytest.mark.kernel

KEY = "mcp-test-key-never-logged"


def session_kernels(root: Path) -> dict[Path, list[int]]:
    return {folder: kernels_in(folder) for folder in root.glob("session-*") if kernels_in(folder)}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    root = tmp_path_factory.mktemp("mcp-http") / "ws"
    with (root.parent / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [CLI, "mcp", "--transport", "http", "--port", "0", "--workspace", str(root), "--timeout", "60"],
            stdout=log,
            stderr=log,
            env={**os.environ, "KERNEL_AGENT_MCP_KEY": KEY},
        )
        try:
            yield f"http://127.0.0.1:{listening_port(process)}/mcp", root, process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
    assert session_kernels(root) == {}
    assert KEY not in (root.parent / "server.log").read_text()


@asynccontextmanager
async def keyed(url: str, key: str) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport over a client that sends the key (and is closed with it)."""
    async with (
        create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


def connect(url: str, key: str = KEY) -> HeldClient:
    return HeldClient(lambda: keyed(url, key))


def test_a_request_without_the_key_is_refused_before_the_mcp_app(
    server: tuple[str, Path, subprocess.Popen[bytes]],
) -> None:
    url, root, _ = server
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream"}
    for extra in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}, {"Authorization": f"bearer {KEY}x"}):
        refused = httpx.post(url, json=hello, headers={**headers, **extra}, timeout=30)
        assert refused.status_code == 401 and "Bearer" in refused.json()["error"]
    assert not list(root.glob("session-*"))  # no session, no kernel
    accepted = httpx.post(url, json=hello, headers={**headers, "Authorization": f"Bearer {KEY}"}, timeout=30)
    assert accepted.status_code == 200


def test_a_foreign_host_or_origin_is_refused_even_with_the_key(
    server: tuple[str, Path, subprocess.Popen[bytes]],
) -> None:
    """DNS rebinding: the SDK's transport security answers a foreign Host with 421 and a foreign Origin with
    403 (the service matches it: ``server/origins.py``); the loopback names still work."""
    url, root, _ = server
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {KEY}"}
    port = url.split(":")[2].split("/")[0]
    foreign = httpx.post(url, json=hello, headers={**headers, "Host": f"attacker.example:{port}"}, timeout=30)
    assert foreign.status_code == 421
    crossed = httpx.post(url, json=hello, headers={**headers, "Origin": "http://attacker.example"}, timeout=30)
    assert crossed.status_code == 403
    other_port = httpx.post(url, json=hello, headers={**headers, "Origin": "http://localhost:9999"}, timeout=30)
    assert other_port.status_code == 403  # another program's page on this machine is another origin
    ours = httpx.post(url, json=hello, headers={**headers, "Origin": f"http://localhost:{port}"}, timeout=30)
    assert ours.status_code == 200


@pytest.mark.timeout(60)
def test_a_client_that_never_finishes_its_headers_is_disconnected(
    server: tuple[str, Path, subprocess.Popen[bytes]],
) -> None:
    """The service's connection bounds hold here too (``_connections.py``): a request whose headers never
    end is closed at the 10 s header deadline, not held for as long as the client likes."""
    url, _, _ = server
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sock.settimeout(30)
        try:
            closed = sock.recv(4096) == b""
        except ConnectionResetError:
            closed = True
    assert closed
    assert httpx.post(url, json={}, timeout=30).status_code == 401  # and it still serves the next client


def test_http_refuses_a_non_loopback_address_without_allow_remote(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            CLI,
            "mcp",
            "--transport",
            "http",
            "--host",
            "0.0.0.0",
            "--port",
            "0",  # refused before it binds
            "--workspace",
            str(tmp_path / "ws"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "KERNEL_AGENT_MCP_KEY": KEY},
    )
    assert done.returncode == 2 and "without TLS in front" in done.stderr and KEY not in done.stderr


def run(client: HeldClient, code: str, **arguments: object):  # type: ignore[no-untyped-def]
    return client.call("execute_python", {"code": code, **arguments})


def test_each_session_has_its_own_kernel_and_state(server: tuple[str, Path, subprocess.Popen[bytes]]) -> None:
    url, root, _ = server
    with connect(url) as first, connect(url) as second:
        run(first, "mine = 'first'")
        assert "first" in text_of(run(first, "mine"))
        assert "NameError" in text_of(run(second, "mine"))
        folders = {Path(text_of(run(c, "import os; os.getcwd()")).split("'")[1]) for c in (first, second)}
        assert len(folders) == 2 and all(f.parent == root and f.name.startswith("session-") for f in folders)


def test_figures_timeouts_and_deaths_over_http(server: tuple[str, Path, subprocess.Popen[bytes]]) -> None:
    url, _, _ = server
    with connect(url) as client:
        figure = run(client, "import matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()")
        assert [block.type for block in figure.content] == ["text", "image"]
        run(client, "kept = 5")
        stopped = run(client, "while True:\n    pass", timeout=2)
        assert stopped.structured_content["status"] == "timeout"
        assert "5" in text_of(run(client, "kept"))
        died = run(client, "import os\nos._exit(1)")
        assert died.structured_content["status"] == "died"
        assert "ok" in text_of(run(client, "print('ok')"))


def test_closing_a_session_shuts_its_kernel_down(server: tuple[str, Path, subprocess.Popen[bytes]]) -> None:
    url, _, process = server
    with connect(url) as client:
        folder = Path(text_of(run(client, "import os; os.getcwd()")).split("'")[1])
        assert kernels_in(folder)
    assert wait_until_gone(folder) == []  # the client's DELETE ended the session, the server runs on
    assert process.poll() is None
    assert "os.getcwd()" in folder.with_name(f"{folder.name}.ipynb").read_text()


def test_sigterm_shuts_every_kernel_down(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    with (tmp_path / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [CLI, "mcp", "--transport", "http", "--port", "0", "--workspace", str(root)],
            stdout=log,
            stderr=log,
            env={k: v for k, v in os.environ.items() if k != "KERNEL_AGENT_MCP_KEY"},
        )
        port = listening_port(process)
        printed = re.findall(r"Bearer KEY\): (\S+)", (tmp_path / "server.log").read_text())
        assert len(printed) == 1  # no key given: one is made and printed once
        client = connect(f"http://127.0.0.1:{port}/mcp", printed[0]).__enter__()
        try:
            run(client, "x = 1")
            assert session_kernels(root)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=30) is not None
        finally:
            client.close()
    assert all(wait_until_gone(folder) == [] for folder in root.glob("session-*"))
