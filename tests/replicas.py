"""Service replicas for tests: ``kernel-agent serve`` as real subprocesses on loopback (port 0: the OS picks),
sharing one database and one data dir, each reachable with its own ``httpx.Client``.

Usage::

    with Replica(data_dir, model.base_url, database=postgres.url) as a, Replica(...) as b:
        run = a.client.post("/v1/runs", json={"task": "..."}).json()
        follow(b.client, run["id"])

``kill()`` is SIGKILL (the replica's kernels die with it: bwrap's --die-with-parent); leaving the
``with`` stops it with SIGTERM and waits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from ports import listening_port

__all__ = ["KEY", "Replica", "follow"]

KEY = "replica-key"


class Replica:
    """One service process. ``options`` are extra ``serve`` flags; ``umask`` the one it is started with."""

    def __init__(
        self,
        data_dir: Path,
        model_url: str,
        *,
        database: str,
        options: tuple[str, ...] = (),
        umask: int | None = None,
    ) -> None:
        self.umask = umask  # the one the process starts with (None: this one's)
        self.port = 0  # the OS picks a free one as the replica binds: read back once it listens (``__enter__``)
        self.url = ""
        self.command = [
            sys.executable,
            "-m",
            "kernel_agent.cli",
            "serve",
            "--port",
            "0",
            "--data-dir",
            str(data_dir),
            "--database",
            database,
            "--model",
            "scripted-test-model",
            "--base-url",
            model_url,
            "--protocol",
            "tools",
            *options,
        ]
        handle, log = tempfile.mkstemp(prefix="replica-", suffix=".log", dir=data_dir.parent)
        os.close(handle)
        self.log = Path(log)
        self.process: subprocess.Popen[bytes] | None = None
        self.client = httpx.Client(headers={"Authorization": f"Bearer {KEY}"}, timeout=60)  # its URL: ``__enter__``

    def __enter__(self) -> Replica:
        """Start the replica and wait until it is ready; raises ``RuntimeError`` when it does not get there,
        its process stopped and its client closed (``with`` calls no ``__exit__`` after a failed ``__enter__``)."""
        env = {**os.environ, "KERNEL_AGENT_SERVER_KEYS": KEY}
        with self.log.open("ab") as log:
            umask = -1 if self.umask is None else self.umask
            self.process = subprocess.Popen(self.command, env=env, stdout=log, stderr=log, umask=umask)
        try:
            return self._ready(self.process)
        except BaseException:
            self.__exit__()
            raise

    def _ready(self, process: subprocess.Popen[bytes]) -> Replica:
        try:
            self.port = listening_port(process)
        except RuntimeError as error:
            self.kill()
            raise RuntimeError(f"{error}: {self.log.read_text()[-3000:]}") from None
        self.url = f"http://127.0.0.1:{self.port}"
        self.client.base_url = httpx.URL(self.url)
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the replica exited: {self.log.read_text()[-3000:]}")
            try:
                if self.client.get("/ready").status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica did not come up: {self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(90)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL: nothing of the replica gets to run, as when its machine is lost."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(30)


def follow(
    client: httpx.Client,
    run_id: str,
    *,
    after: int | None = None,
    until: str = "finished",
) -> list[tuple[int, dict[str, Any]]]:
    """The run's SSE events with their ids, from ``after`` (``Last-Event-ID``) until event ``until``."""
    headers = {} if after is None else {"Last-Event-ID": str(after)}
    seen: list[tuple[int, dict[str, Any]]] = []
    event_id = 0
    with client.stream("GET", f"/v1/runs/{run_id}/events", headers=headers) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("id: "):
                event_id = int(line[4:])
            elif line.startswith("data: "):
                seen.append((event_id, json.loads(line[6:])))
                if seen[-1][1]["event"] == until:
                    break
    return seen
