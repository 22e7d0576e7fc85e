"""MCP sessions end with their client: an HTTP client that vanishes (SIGKILL: no DELETE, no goodbye)
leaves no kernel behind once the session's idle time has passed, and one key holder cannot open more
than the cap of sessions (each may hold a ~100 MB sandboxed kernel).

A ``kernel-agent mcp --transport http`` subprocess with a small idle time; each client is its own
process (the official SDK client) so it can be killed the way a crashed IDE or a dropped laptop is.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ports import listening_port
from test_mcp import CLI, kernels_in
from test_mcp_http import KEY, connect, run, session_kernels

pytestmark = pytest.mark.kernel

IDLE = 3.0  # the server's idle bound for these tests (the default is 60 s)
MARGIN = 30.0  # the kernel's shutdown after the session ends, on a loaded machine

CLIENT = """
import sys, anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

async def main() -> None:
    url, key = sys.argv[1], sys.argv[2]
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("execute_python", {"code": "import os; os.getcwd()"})
                texts = " ".join(getattr(part, "text", "") for part in result.content)
                print("CWD", texts.replace("\\n", " "), flush=True)
                await anyio.sleep_forever()  # holding the session open until killed

anyio.run(main)
"""


@pytest.fixture
def reaping_server(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    root = tmp_path / "ws"
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [CLI, "mcp", "--transport", "http", "--port", "0", "--workspace", str(root)]
            + ["--session-idle", str(IDLE), "--max-sessions", "3"],
            stdout=log,
            stderr=log,
            env={**os.environ, "KERNEL_AGENT_MCP_KEY": KEY},
        )
        try:
            yield f"http://127.0.0.1:{listening_port(process)}/mcp", root, log_path
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    assert session_kernels(root) == {}


def start_client(url: str) -> tuple[subprocess.Popen[str], Path]:
    client = subprocess.Popen(
        [sys.executable, "-c", CLIENT, url, KEY], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert client.stdout is not None
    line = client.stdout.readline()  # the client's first tool call answered: its kernel runs
    match = re.search(r"CWD .*'(/[^']+)'", line)
    if match is None:
        client.kill()
        client.wait(timeout=30)
        raise AssertionError(f"the client did not get its kernel: {line!r}")
    return client, Path(match.group(1))


def wait_for_no_kernels(folders: list[Path], seconds: float) -> list[int]:
    end = time.monotonic() + seconds
    while (left := [pid for folder in folders for pid in kernels_in(folder)]) and time.monotonic() < end:
        time.sleep(0.2)
    return left


def test_killed_clients_kernels_are_shut_down_after_the_idle_bound(reaping_server: tuple[str, Path, Path]) -> None:
    url, root, log_path = reaping_server
    clients: list[tuple[subprocess.Popen[str], Path]] = []
    try:
        for _ in range(3):
            clients.append(start_client(url))
        folders = [folder for _, folder in clients]
        assert len(set(folders)) == 3 and all(kernels_in(folder) for folder in folders)
    finally:
        for client, _ in clients:
            client.send_signal(signal.SIGKILL)
            client.wait(timeout=30)
            client.stdout.close()  # type: ignore[union-attr]
    assert wait_for_no_kernels(folders, IDLE + MARGIN) == []  # the server saw no DELETE: the idle bound did it
    assert session_kernels(root) == {}
    # The line is written once the kernel's shutdown returns, a moment after its process is gone.
    end = time.monotonic() + MARGIN
    while "ended, its kernel shut down: 0 live" not in log_path.read_text() and time.monotonic() < end:
        time.sleep(0.2)
    log = log_path.read_text()
    assert "MCP session opened" in log and "3 live" in log and "ended, its kernel shut down: 0 live" in log


def test_sessions_past_the_cap_are_refused_with_a_clear_error(reaping_server: tuple[str, Path, Path]) -> None:
    url, root, log_path = reaping_server
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {KEY}"}
    held = [connect(url).__enter__() for _ in range(3)]
    try:
        run(held[0], "x = 1")
        refused = httpx.post(url, json=hello, headers=headers, timeout=30)
        assert refused.status_code == 503 and "Too many open sessions" in refused.text
        assert "sessions are already open" in log_path.read_text()
    finally:
        for client in held:
            client.close()
    accepted = httpx.post(url, json=hello, headers=headers, timeout=30)  # room again once they ended
    assert accepted.status_code == 200
    assert wait_for_no_kernels(list(root.glob("session-*")), MARGIN) == []
