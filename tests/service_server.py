"""A real kernel-agent service for tests: uvicorn on a free 127.0.0.1 port, in a background thread, its
connections bounded as ``serve`` bounds them (``connections.uvicorn_options``).

Usage (module scope, with the scripted model server of ``openai_server.py`` as its model)::

    with OpenAIServer() as model, ServiceServer(tmp_dir, model.base_url, keys={"k1"}) as server:
        httpx.get(server.url + "/v1/info")

``close()`` stops uvicorn, whose lifespan cancels the runs in flight and shuts every kernel down.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from kernel_agent._connections import uvicorn_options
from kernel_agent.server.app import create_app
from kernel_agent.server.config import ServerConfig

__all__ = ["ServiceServer"]


class ServiceServer:
    """The service in-process. ``agent`` adds or overrides ``AsyncAgent`` options."""

    def __init__(self, data_dir: Path, model_url: str, *, keys: set[str] | None = None, **options: Any) -> None:
        agent = {
            "model": "scripted-test-model",
            "base_url": model_url,
            "api_key": "model-secret-key",
            "protocol": "tools",
            "max_rounds": 6,
            **options.pop("agent", {}),
        }
        options.setdefault("drain_grace", 0.0)  # a test that leaves with a run in flight stops it at once
        self.config = ServerConfig(data_dir, keys=frozenset(keys or ()), auth=bool(keys), agent=agent, **options)
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        server_config = uvicorn.Config(
            create_app(self.config), log_level="warning", lifespan="on", **uvicorn_options(self.config.connections)
        )
        self.server = uvicorn.Server(server_config)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        try:
            self.server.run(sockets=[self.socket])
        except SystemExit:  # uvicorn exits when the app's start fails: ``__enter__`` raises for it
            pass

    def __enter__(self) -> ServiceServer:
        """Start serving; raises ``RuntimeError`` when the service does not start, its thread stopped and its
        socket closed (``with`` calls no ``__exit__`` after a failed ``__enter__``)."""
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError("the service did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(60)
        self.socket.close()
