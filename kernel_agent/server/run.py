"""Running the service: uvicorn on a host and port, until SIGINT/SIGTERM; ``DeferredApp``.

Owns the server process's loop and the order it starts in. Importing the app (FastAPI, the
agent, kernels, notebooks) takes most of a second of CPU, so the socket comes first: uvicorn
binds with a ``DeferredApp`` in front, which answers ``/health`` with ``{"status": "starting"}``
at once, builds the real app in a worker thread and then enters its lifespan (the store, the
warm pool, whose kernels start in the background). Every other request waits until the app is
up, then goes to it; none is refused for being early. ``/health`` then says what the app says.
A build or start-up failure is logged and stops the server. The listening sockets come before all of it
(``listen``): a port that is taken, or a host that is not this machine's, is a ``ConfigError`` naming
``--port``/``--host`` before a line is logged, never uvicorn's bind error among its start-up lines.
Its connections are bounded (``connections.py``): a request's headers have ``header_timeout`` seconds,
its body ``body_timeout`` seconds between bytes, and past ``max_connections`` open ones a new one gets 503.
On SIGTERM (or SIGINT) the service drains: uvicorn stops accepting connections, the service takes no
new run and its running ones get ``drain_grace`` seconds to finish (open streams go on), then the app's
lifespan stops the rest and every kernel. Logging is ``logs.configure``'s (text, or JSON lines). The process's
umask is ``private.PRIVATE_UMASK`` from the start: whatever it writes, and its kernels, is owner-only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from types import FrameType
from typing import Any, Literal

from .._connections import answer_json, listen
from .._loop import in_thread
from .config import ServerConfig
from .logs import configure
from .private import PRIVATE_UMASK

__all__ = ["DeferredApp", "serve"]

log = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Message, Receive, Send], Awaitable[None]]


class DeferredApp:
    """An ASGI app that is up at once and becomes ``build()``'s app as soon as that is built and started.

    ``build`` runs in a worker thread when the server's lifespan starts; the built app's own
    lifespan is then driven from here. ``on_failure`` is called (on the loop) when building or
    starting fails, e.g. to stop the server; requests then get 503.
    """

    def __init__(self, build: Callable[[], ASGIApp], on_failure: Callable[[], None] = lambda: None) -> None:
        self._build = build
        self._on_failure = on_failure
        self._app: ASGIApp | None = None
        self._settled: asyncio.Event | None = None  # set once the app is up, or failed
        self._starting: asyncio.Task[None] | None = None
        self._inbox: asyncio.Queue[Message] | None = None  # to the app's lifespan
        self._outbox: asyncio.Queue[Message] | None = None  # from it
        self._lifespan: asyncio.Task[None] | None = None
        self._state: dict[str, Any] = {}  # what the app's lifespan keeps for its requests
        self.failed = False

    @property
    def ready(self) -> bool:
        """True once the built app has started."""
        return self._app is not None

    @property
    def built(self) -> ASGIApp | None:
        """The built app once it has started (None before, or when it failed)."""
        return self._app

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._serve_lifespan(receive, send)
            return
        if self._app is None and not self.failed and scope["type"] == "http" and scope.get("path") == "/health":
            await answer_json(send, 200, {"status": "starting"})
            return
        if self._settled is not None:
            await self._settled.wait()
        if self._app is None:
            if scope["type"] == "http":
                await answer_json(
                    send, 503, {"error": {"message": "the service failed to start", "type": "server_error"}}
                )
            return
        if self._state and "state" in scope:
            scope["state"].update(self._state)
        await self._app(scope, receive, send)

    async def _serve_lifespan(self, receive: Receive, send: Send) -> None:
        """uvicorn's lifespan: start-up completes at once (the app starts in the background);
        shutdown waits for that start, then shuts the app down."""
        self._settled = asyncio.Event()
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self._starting = asyncio.create_task(self._start())
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start(self) -> None:
        assert self._settled is not None
        try:
            app = await in_thread(self._build)
            self._inbox, self._outbox = asyncio.Queue(), asyncio.Queue()
            scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": self._state}
            self._lifespan = asyncio.ensure_future(app(scope, self._inbox.get, self._outbox.put))
            answer = await self._exchange({"type": "lifespan.startup"})
            if answer["type"] != "lifespan.startup.complete":
                raise RuntimeError(answer.get("message") or "the app's start-up failed")
            self._app = app
        except Exception:
            log.exception("the service could not start")
            if self._lifespan is not None and self._lifespan.done() and not self._lifespan.cancelled():
                self._lifespan.exception()  # logged above; retrieved so asyncio does not warn again
            self.failed = True
            self._on_failure()
        finally:
            self._settled.set()

    async def _exchange(self, message: Message) -> Message:
        """Send the app's lifespan ``message`` and wait for its answer (or for the lifespan to end)."""
        assert self._inbox is not None and self._outbox is not None and self._lifespan is not None
        await self._inbox.put(message)
        answer = asyncio.ensure_future(self._outbox.get())
        await asyncio.wait({answer, self._lifespan}, return_when=asyncio.FIRST_COMPLETED)
        if answer.done():
            return answer.result()
        answer.cancel()
        self._lifespan.result()  # raises what the app raised
        return {"type": f"{message['type']}.failed", "message": "the app's lifespan ended"}

    async def _stop(self) -> None:
        if self._starting is not None:
            await asyncio.shield(self._starting)
        if self._app is not None:
            answer = await self._exchange({"type": "lifespan.shutdown"})
            if answer["type"] != "lifespan.shutdown.complete":
                log.error("the service did not shut down cleanly: %s", answer.get("message"))


def serve(
    config: ServerConfig,
    host: str,
    port: int,
    log_format: Literal["text", "json"] = "text",
    sockets: list[socket.socket] | None = None,
) -> None:
    """Serve ``config`` on ``host:port`` (on ``sockets`` from ``listen`` when given) until stopped, logging
    in ``log_format``. Raises ``ConfigError`` when the port is taken (``listen``), ``ServiceError`` when the
    app could not be built or started (the log says why)."""
    if sockets is None:
        sockets = listen(host, port)
    try:
        _serve_on(config, host, port, log_format, sockets)
    finally:  # whatever ends it (a failure before uvicorn runs too), the port is let go
        for sock in sockets:
            sock.close()


def _serve_on(
    config: ServerConfig, host: str, port: int, log_format: Literal["text", "json"], sockets: list[socket.socket]
) -> None:
    import uvicorn

    from .._connections import uvicorn_options
    from ..errors import ServiceError

    configure(log_format)
    os.umask(PRIVATE_UMASK)  # before anything is written: this process's files and its kernels' are owner-only
    kept = " (a temporary folder, removed at exit)" if config.temporary else ""
    log.info(
        "kernel-agent service: data in %s%s, auth %s", config.data_dir.absolute(), kept, "on" if config.auth else "off"
    )
    server: uvicorn.Server | None = None

    def build() -> ASGIApp:
        from .app import create_app

        return create_app(config)

    def stop() -> None:
        if server is not None:
            server.should_exit = True

    app = DeferredApp(build, on_failure=stop)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="info",
            access_log=True,
            log_config=None,
            # uvicorn waits with it as a timeout, a float is fine; its annotation says int
            timeout_graceful_shutdown=max(config.drain_grace, 0.1),  # type: ignore[arg-type]
            **uvicorn_options(config.connections),  # a deadline on headers and body, a cap on connections
        )
    )
    exit_now = server.handle_exit

    def drain_then_stop(sig: int, frame: FrameType | None) -> None:
        service = getattr(getattr(app.built, "state", None), "service", None)
        if service is not None:  # the signal handler runs on the loop's thread: no lock needed
            service.begin_drain()
        exit_now(sig, frame)

    server.handle_exit = drain_then_stop  # type: ignore[method-assign]  # uvicorn has no hook before its exit
    for sock in sockets:  # uvicorn names what it listens on only when it binds itself
        log.info("kernel-agent service: listening on %s", _url(sock))
    server.run(sockets=sockets)
    if app.failed:
        raise ServiceError("the service failed to start (the log above says why)", status=503)


def _url(sock: socket.socket) -> str:
    address, port = sock.getsockname()[:2]
    return f"http://[{address}]:{port}" if sock.family == socket.AF_INET6 else f"http://{address}:{port}"
