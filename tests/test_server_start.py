"""``kernel-agent serve`` is up before its app is: ``DeferredApp`` answers ``/health`` at once, holds every
other request until the app is built and started, then hands it over; a failed start stops the server."""

from __future__ import annotations

import asyncio
import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from ports import listening_port
from replicas import Replica
from service_server import ServiceServer

from kernel_agent.server.run import DeferredApp


class Lifespan:
    """Drives an ASGI app's lifespan as uvicorn does."""

    def __init__(self, app: Any) -> None:
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.task = asyncio.create_task(
            app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, self.inbox.get, self.outbox.put)
        )

    async def send(self, kind: str) -> str:
        await self.inbox.put({"type": f"lifespan.{kind}"})
        value: str = (await self.outbox.get())["type"]
        return value


async def get(app: Any, path: str) -> tuple[int, dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "path": path, "method": "GET", "headers": [], "state": {}}, receive, send)
    return sent[0]["status"], json.loads(b"".join(m.get("body", b"") for m in sent[1:]))


def recording_app(events: list[str]) -> Any:
    """A small ASGI app: its lifespan keeps a value for requests; requests echo their path and it."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                events.append(message["type"])
                if message["type"] == "lifespan.startup":
                    scope["state"]["kept"] = "by the lifespan"
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = json.dumps({"path": scope["path"], "kept": scope["state"].get("kept")}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    return app


def held_build(release: threading.Event, events: list[str]) -> Any:
    """A build that waits for ``release``, then gives a recording app (a slow import, held by the test)."""

    def build() -> Any:
        assert release.wait(30)
        return recording_app(events)

    return build


def test_health_answers_while_the_app_builds_and_other_requests_wait_for_it() -> None:
    async def scenario() -> None:
        release = threading.Event()
        events: list[str] = []
        app = DeferredApp(held_build(release, events))
        lifespan = Lifespan(app)
        assert await lifespan.send("startup") == "lifespan.startup.complete"  # before the build has finished
        assert await get(app, "/health") == (200, {"status": "starting"})
        early = asyncio.create_task(get(app, "/v1/info"))
        done, _ = await asyncio.wait({early}, timeout=0.2)
        assert not done and not app.ready and events == []  # held, not refused, not answered by the stand-in
        release.set()
        assert await early == (200, {"path": "/v1/info", "kept": "by the lifespan"})
        assert app.ready and events == ["lifespan.startup"]
        assert await get(app, "/health") == (200, {"path": "/health", "kept": "by the lifespan"})  # the app's own
        assert await lifespan.send("shutdown") == "lifespan.shutdown.complete"
        assert events == ["lifespan.startup", "lifespan.shutdown"]
        await lifespan.task

    asyncio.run(scenario())


def test_shutdown_during_the_build_waits_for_it_then_shuts_the_app_down() -> None:
    async def scenario() -> None:
        release = threading.Event()
        events: list[str] = []
        app = DeferredApp(held_build(release, events))
        lifespan = Lifespan(app)
        await lifespan.send("startup")
        stopping = asyncio.create_task(lifespan.send("shutdown"))
        done, _ = await asyncio.wait({stopping}, timeout=0.2)
        assert not done
        release.set()
        assert await stopping == "lifespan.shutdown.complete"
        assert events == ["lifespan.startup", "lifespan.shutdown"]

    asyncio.run(scenario())


def test_a_failed_build_stops_the_server_and_requests_get_503(caplog: Any) -> None:
    async def scenario() -> None:
        stopped = []

        def build() -> Any:
            raise RuntimeError("no such data dir")

        app = DeferredApp(build, on_failure=lambda: stopped.append(True))
        lifespan = Lifespan(app)
        await lifespan.send("startup")
        status, body = await get(app, "/v1/info")
        assert status == 503 and "failed to start" in body["error"]["message"]
        assert app.failed and stopped == [True]
        assert await lifespan.send("shutdown") == "lifespan.shutdown.complete"

    asyncio.run(scenario())
    assert "no such data dir" in caplog.text


def test_an_app_whose_start_up_fails_is_never_served() -> None:
    async def refusing(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "the store is locked"})

    async def scenario() -> None:
        app = DeferredApp(lambda: refusing)
        lifespan = Lifespan(app)
        await lifespan.send("startup")
        assert (await get(app, "/v1/info"))[0] == 503  # waits for the start to settle
        assert (await get(app, "/health"))[0] == 503
        assert app.failed and not app.ready
        assert await lifespan.send("shutdown") == "lifespan.shutdown.complete"

    asyncio.run(scenario())


def _get(port: int, path: str) -> tuple[int, dict[str, Any]] | None:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    except ConnectionRefusedError:
        return None
    finally:
        connection.close()


def test_kernel_agent_serve_answers_health_then_serves_and_stops_cleanly(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kernel_agent.cli",
            "serve",
            "--no-auth",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
            "--model",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        port = listening_port(process)  # the OS picked it: it stays this server's
        deadline = time.monotonic() + 60
        while (health := _get(port, "/health")) is None:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        assert health[0] == 200 and health[1]["status"] in ("starting", "ok")
        info = _get(port, "/v1/info")  # held until the app is up, then the app's answer
        assert info is not None and info[0] == 200 and info[1]["default_model"] == "m"
        assert _get(port, "/health") == (200, {"status": "ok"})
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(60)
    assert process.stderr is not None
    with process.stderr:
        stderr = process.stderr.read().decode()
    assert code in (0, -signal.SIGTERM), stderr
    assert "Application shutdown complete" in stderr and "Traceback" not in stderr
    assert f"listening on http://127.0.0.1:{port}" in stderr  # uvicorn names the address only when it binds


def test_serve_on_a_port_in_use_is_a_usage_error_naming_the_port_and_the_option(tmp_path: Path) -> None:
    from kernel_agent.cli.drive import EXIT_USAGE

    with socket.socket() as held:  # another server's port: bound and listening for the whole test
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "kernel_agent.cli", "serve", "--demo", "--port", str(port)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
    assert result.returncode == EXIT_USAGE, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"Error: port {port} on 127.0.0.1 is already in use (another server is listening there); "
        "choose another with --port"
    ]  # one line: no uvicorn start-up lines, no "[Errno 98]"


def test_a_service_server_that_cannot_start_lets_its_socket_go(tmp_path: Path) -> None:
    """The tests' in-process service (``service_server.py``) closes its socket when its start fails: left
    open, the garbage collector would close it, and warn, during some later test."""
    (tmp_path / "data").write_text("a file where the data dir should be")
    server = ServiceServer(tmp_path / "data", "http://127.0.0.1:9/v1")
    with pytest.raises(RuntimeError, match="did not start"), server:
        pass
    assert server.socket.fileno() == -1 and not server.thread.is_alive()


def test_a_replica_that_cannot_start_closes_its_client_and_stops(tmp_path: Path) -> None:
    """The tests' service process (``replicas.py``) whose start fails (here its database cannot be reached)
    closes its client, whose connection the garbage collector would otherwise close during a later test."""
    nowhere = f"postgresql://nobody@/nothing?host={tmp_path / 'no-server-here'}"
    replica = Replica(tmp_path / "data", "http://127.0.0.1:9/v1", database=nowhere)
    with pytest.raises(RuntimeError, match="the replica exited"), replica:
        pass
    assert replica.client.is_closed and replica.process is not None and replica.process.poll() is not None
