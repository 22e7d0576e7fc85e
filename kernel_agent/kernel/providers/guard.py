"""``MessageGuard``: a local kernel's client sockets bounded in message size, and kept connected.

Model code can write to its kernel's sockets directly (``kernel.session.send(kernel.iopub_socket, …)``),
past the kernel's own output cap: one 2 GB message would be read whole into the host's memory. So
every socket of the client refuses a message over a bound before reading it (ZMQ ``MAXMSGSIZE``,
``base.bound_messages``). libzmq then drops the connection and, for that protocol error, never
reconnects: this guard watches each socket's monitor for the disconnect, connects it again at once,
and counts it, so the engine knows a message (perhaps the execution's ``idle``) was lost and can find
where the kernel is (``engine.py`` asks ``kernel_info`` and waits for its ``idle``).

Owns only the watching; the client, its sockets and their lifecycle stay jupyter_client's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import zmq
from zmq.utils.monitor import parse_monitor_message

__all__ = ["MessageGuard"]

log = logging.getLogger(__name__)

_CHANNELS = ("shell", "iopub", "stdin", "control")
_EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
_RETRY_WAIT_S = 0.1  # libzmq schedules its retry within microseconds of an ordinary disconnect


class MessageGuard:
    """Watches ``client``'s channel sockets (after ``start_channels``) until ``close``."""

    def __init__(self, client: Any, limit: int) -> None:
        self.client = client
        self.limit = limit
        self.dropped = 0  # messages over the bound, each of which dropped a connection
        self._watches: list[tuple[asyncio.Task[None], Any, Any]] = []

    def __repr__(self) -> str:
        return f"<MessageGuard limit={self.limit} dropped={self.dropped}>"

    def start(self) -> None:
        """Start watching every channel socket the client has opened. Raises nothing."""
        for name in _CHANNELS:
            channel = getattr(self.client, f"_{name}_channel", None)
            socket = getattr(channel, "socket", None)
            if socket is None:
                continue
            monitor = socket.get_monitor_socket(_EVENTS)
            url = self.client._make_url(name)
            task = asyncio.ensure_future(self._watch(name, socket, monitor, url))
            self._watches.append((task, socket, monitor))

    async def _watch(self, name: str, socket: Any, monitor: Any, url: str) -> None:
        while True:
            if await _next_event(monitor, None) != zmq.EVENT_DISCONNECTED:
                continue
            # A peer that went away (the kernel restarting or dead) is retried by libzmq at once; a
            # message over the bound is a protocol error, after which libzmq never connects again.
            if await _next_event(monitor, _RETRY_WAIT_S) == zmq.EVENT_CONNECT_RETRIED:
                continue
            self.dropped += 1
            log.warning(
                "the kernel sent a message over %d bytes on %s: dropped unread; connecting again", self.limit, name
            )
            with contextlib.suppress(zmq.ZMQError):
                socket.disconnect(url)
            with contextlib.suppress(zmq.ZMQError):
                socket.connect(url)

    async def close(self) -> None:
        """Stop watching (before the client's channels stop). Idempotent."""
        watches, self._watches = self._watches, []
        for task, socket, monitor in watches:
            task.cancel()
            with contextlib.suppress(zmq.ZMQError):
                socket.disable_monitor()
            monitor.close(linger=0)
        await asyncio.gather(*(task for task, _, _ in watches), return_exceptions=True)


async def _next_event(monitor: Any, timeout: float | None) -> int | None:
    """The next monitor event's number; None after ``timeout`` seconds. Ends the watch (``CancelledError``)
    when the monitor is closed."""
    try:
        frames = await asyncio.wait_for(monitor.recv_multipart(), timeout)
    except TimeoutError:
        return None
    except zmq.ZMQError as exc:
        raise asyncio.CancelledError from exc
    return int(parse_monitor_message(frames)["event"])
