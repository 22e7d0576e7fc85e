"""HTTP connections bounded in time and number, and where they arrive: ``ConnectionLimits``, ``uvicorn_options``
and ``listen``; ``answer_json``, the one way the servers' ASGI middleware answers a request themselves.

A client that opens a connection and trickles its request a byte at a time costs the service a
descriptor for as long as it likes: uvicorn's h11 protocol has no deadline on a request's headers (its
keep-alive timer starts only after a response and is cancelled by any byte) and no cap on connections
(``limit_concurrency`` answers 503 to a *request* over it, once its headers are in, so a connection that
never finishes them is held). 500 such connections stayed open past 40 s, bounded only by the process's
open-file limit, which the service shares with its kernels and the workspace walks.

So the service and the MCP server over HTTP run uvicorn with h11's protocol bounded by three rules
of its own, each kept by a timer on the event loop (no thread, no proxy needed in front):

* **headers**: a request's line and headers must be in within ``header_timeout`` seconds of the
  connection's start, or of the previous response's end on a kept-alive connection; else the
  connection is closed. A total deadline, not an idle one: a byte a second does not extend it.
* **body**: while a request's body is being read, ``body_timeout`` seconds without a byte closes the
  connection (an idle deadline: a large upload on a slow link goes on; while uvicorn has paused
  reading because the app is behind, the timer waits for it).
* **count**: a connection beyond ``max_connections`` open ones is answered ``503`` with
  ``Connection: close`` at once and closed, before it is read.

Headers are capped at ``max_header_bytes`` (h11's ``max_incomplete_event_size``: 400 past it), an idle
kept-alive connection closes after ``keep_alive`` seconds (uvicorn's ``timeout_keep_alive``), and
``limit_concurrency`` is set one over the cap so uvicorn's own 503 covers requests still running for
clients that left.
uvicorn and h11 are imported at the first ``uvicorn_options`` call: a shared value of the servers' own.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import logging
import socket
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:  # imported with uvicorn, at the first uvicorn_options call
    import h11
    from uvicorn.protocols.http.flow_control import FlowControl

__all__ = ["ConnectionLimits", "answer_json", "listen", "uvicorn_options"]

AsgiSend = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_BUSY_BODY = b"the server has too many open connections; try again shortly\n"
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    b"retry-after: 1\r\ncontent-length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY
)


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take over a request and how many may be connected at once
    (``uvicorn_options``' protocol keeps them).

    header_timeout: seconds a request's line and headers may take, from the connection's start or the
        previous response's end (a total, not an idle, deadline); then the connection is closed.
    body_timeout: seconds without a byte while a request's body is read; then it is closed.
    keep_alive: seconds an idle kept-alive connection stays open after a response.
    max_connections: connections open at once; one more is answered 503 and closed before it is read.
    max_header_bytes: the most a request's line and headers may take; past it, 400.
    """

    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive: float = 5.0
    max_connections: int = 256
    max_header_bytes: int = 16 * 1024

    def __post_init__(self) -> None:
        if min(self.header_timeout, self.body_timeout, self.keep_alive) <= 0:
            raise ConfigError("header_timeout, body_timeout and keep_alive must be positive")
        if self.max_connections < 1 or self.max_header_bytes < 1024:
            raise ConfigError("max_connections must be at least 1 and max_header_bytes at least 1024")


async def answer_json(send: AsgiSend, status: int, body: object, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """Answer an ASGI request with ``body`` as JSON and ``status`` (a middleware's refusal, before the app)."""
    payload = json.dumps(body).encode()
    start = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()), *headers]
    await send({"type": "http.response.start", "status": status, "headers": start})
    await send({"type": "http.response.body", "body": payload})


def listen(host: str, port: int) -> list[socket.socket]:
    """Bound sockets for ``host:port``, one per address ``host`` resolves to (as asyncio's ``create_server``
    binds), for ``serve`` and ``mcp --transport http``. Raises ``ConfigError`` naming the port and ``--port``
    when it is taken or forbidden, and naming ``--host`` when the host is not an address of this machine."""
    try:
        infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(
            f"cannot listen on {host!r}: {exc.strerror}; give an address of this machine with --host"
        ) from exc
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart binds while old connections linger
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # the IPv4 address gets its own socket
            sock.bind(address)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ConfigError(_bind_failure(host, port, exc)) from exc
    return sockets


def _bind_failure(host: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use (another server is listening there); choose another with --port"
        )
    if exc.errno == errno.EACCES:
        return f"port {port} on {host} needs privileges this user does not have; choose one from 1024 up with --port"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{host} is not an address of this machine; give one with --host"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another address with --host or --port"


def uvicorn_options(limits: ConnectionLimits) -> dict[str, Any]:
    """``uvicorn.Config`` keyword arguments that bound its connections by ``limits``."""
    protocol = type("BoundedH11Protocol", (_protocol_class(),), {"limits": limits})
    return {
        "http": protocol,
        "timeout_keep_alive": limits.keep_alive,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
        "limit_concurrency": limits.max_connections + 1,
    }


class _Deadlines:
    """What ``BoundedH11Protocol`` (``_protocol_class``) adds to uvicorn's h11 protocol, whose attributes it
    uses: a deadline on a request's headers, an idle deadline on its body, the cap on open connections."""

    limits = ConnectionLimits()
    transport: asyncio.Transport
    conn: h11.Connection
    flow: FlowControl
    loop: asyncio.AbstractEventLoop
    logger: logging.Logger
    _deadline: asyncio.TimerHandle | None = None
    _waiting: str | None = None  # "headers", "body" or None: what the deadline is for

    def _refused(self, open_now: int) -> bool:
        """Close a connection over the cap (``open_now`` counts it) with a 503; whether it was."""
        if open_now <= self.limits.max_connections:
            return False
        self.logger.warning("refused a connection: the cap of %d open ones is reached", self.limits.max_connections)
        self.transport.write(_BUSY)
        self.transport.close()
        return True

    def _watch(self, *, fresh: bool) -> None:
        """Set the deadline for what the connection waits on now: a request's headers (counted from when
        it began waiting for them), its body (from the last byte), or nothing (the app has the request)."""
        import h11

        if self.transport.is_closing():
            self._cancel()
            return
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._waiting != "headers":
                self._arm("headers", self.limits.header_timeout)
        elif state is h11.SEND_BODY:
            if fresh or self._waiting != "body":
                self._arm("body", self.limits.body_timeout)
        else:
            self._cancel()

    def _arm(self, waiting: str, seconds: float) -> None:
        self._cancel()
        self._waiting = waiting
        self._deadline = self.loop.call_later(seconds, self._expired)

    def _cancel(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._waiting = None, None

    def _expired(self) -> None:
        waiting, self._deadline = self._waiting, None
        if self.transport.is_closing():
            return
        if waiting == "body" and self.flow.read_paused:  # the app is behind, not the client: wait for it
            self._arm("body", self.limits.body_timeout)
            return
        self.logger.info("closed a connection: its request's %s took too long", waiting)
        self.transport.close()


@functools.cache
def _protocol_class() -> type:
    """uvicorn's h11 protocol with ``_Deadlines`` (``limits``: the subclass ``uvicorn_options`` makes sets it)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(_Deadlines, H11Protocol):
        """uvicorn's h11 protocol with a deadline on a request's headers, an idle deadline on its body and a
        cap on open connections (``limits``: a subclass made by ``uvicorn_options`` sets it)."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if not self._refused(len(self.connections)):
                self._watch(fresh=True)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._watch(fresh=True)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._watch(fresh=False)

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel()
            super().connection_lost(exc)

        def handle_websocket_upgrade(self, event: h11.Request) -> None:
            self._cancel()  # the connection is the websocket protocol's from here
            super().handle_websocket_upgrade(event)

    return BoundedH11Protocol
