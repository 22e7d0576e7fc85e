"""Issue 41: a revoked key's open work ends at once, on every replica.

Two ``serve`` replicas share a real PostgreSQL (and, on the embedded SQLite file, one server). A key added
with ``kernel-agent keys add`` starts a run on replica A and follows its events on both replicas; while the
run's second round is running (a long sleep), ``kernel-agent keys revoke`` revokes the key: both streams
end within 5 s with the ``KeyRevoked`` error event, the run is stopped as ``cancelled``, and its first round
is kept in the thread's notebook.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import nbformat
import pytest
from openai_server import OpenAIServer, Reply, python_call
from postgres import PostgresServer
from replicas import Replica

from kernel_agent.server.config import owner_of

pytestmark = [pytest.mark.kernel, pytest.mark.postgresql]

LONG = "import time\nprint('waiting', flush=True)\ntime.sleep(120)"


class Stream(threading.Thread):
    """A client following a run's events (SSE) until the server ends the stream."""

    def __init__(self, url: str, key: str, run_id: str) -> None:
        super().__init__(daemon=True)
        self.url, self.key, self.run_id = url, key, run_id
        self.events: list[dict[str, Any]] = []
        self.ended_at: float | None = None

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.stream("GET", f"{self.url}/v1/runs/{self.run_id}/events", headers=headers, timeout=120) as response:
            for line in response.iter_lines():
                if line.startswith("data: "):
                    self.events.append(json.loads(line[6:]))
        self.ended_at = time.monotonic()

    def saw(self, text: str) -> bool:
        return any(text in json.dumps(event) for event in list(self.events))


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling another process's progress


def run_row(database: str, run_id: str) -> dict[str, Any]:
    if database.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(database.removeprefix("sqlite:///"))) as connection:
            value: dict[str, Any] = json.loads(
                connection.execute("SELECT body FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
            )
            return value

    async def read() -> dict[str, Any]:
        connection = await asyncpg.connect(database.replace("postgresql+asyncpg", "postgresql"))
        try:
            value: dict[str, Any] = json.loads(await connection.fetchval("SELECT body FROM runs WHERE id = $1", run_id))
            return value
        finally:
            await connection.close()

    return asyncio.run(read())


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_key_revoked_mid_stream_ends_its_streams_on_every_replica_and_its_run_is_cancelled_with_rounds_kept(
    backend: str, postgres: PostgresServer, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """Two replicas on PostgreSQL; on the embedded SQLite file (one server) two streams on the one."""
    shared = backend == "postgresql"
    data = tmp_path / "data"
    database = postgres.database("revoked_mid_stream") if shared else f"sqlite:///{data}/kernel-agent.db"

    def keys_cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "kernel_agent.cli", "keys", *args, "--database", database],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    openai_server.add(Reply("First.", tool_calls=(python_call("print('first done')"),)))
    openai_server.add(Reply("Waiting.", tool_calls=(python_call(LONG),)))
    with (
        Replica(data, openai_server.base_url, database=database) as a,
        Replica(data, openai_server.base_url, database=database) if shared else contextlib.nullcontext(a) as b,
    ):
        key = keys_cli("add", "--name", "carol").strip()
        started = httpx.post(
            a.url + "/v1/runs", json={"task": "wait"}, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        assert started.status_code == 201, started.text
        run = started.json()
        streams = [Stream(replica.url, key, run["id"]) for replica in (a, b)]
        for stream in streams:
            stream.start()
        wait_for(lambda: all(s.saw("waiting") for s in streams), 120, "the second round to run")
        keys_cli("revoke", owner_of(key))
        revoked_at = time.monotonic()
        for stream in streams:
            stream.join(max(0.0, revoked_at + 5 - time.monotonic()))
        assert [s.is_alive() for s in streams] == [False, False], "a stream went on after the revoke"
        for stream in streams:
            assert stream.events[-1]["event"] == "error" and stream.events[-1]["error_type"] == "KeyRevoked"
            assert stream.saw("first done")
        wait_for(lambda: run_row(database, run["id"])["status"] != "running", 60, "the run to stop")
        record = run_row(database, run["id"])
        assert record["status"] == "cancelled" and record["rounds"] >= 1, record  # the round that finished
        assert a.client.get("/v1/threads").status_code == 200  # another key is untouched
    notebook = data / "threads" / run["thread_id"] / "analysis.ipynb"
    cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    first = next(c for c in cells if c.source == "print('first done')")
    assert first.outputs[0]["text"] == "first done\n"
    assert any("time.sleep(120)" in c.source for c in cells)  # the stopped round, kept (commented out)
