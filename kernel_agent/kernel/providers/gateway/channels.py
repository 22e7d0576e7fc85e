"""One gateway kernel's messages over a websocket: ``GatewayChannels``, a ``ChannelClient``.

Owns the ``/api/kernels/<id>/channels`` websocket (the ``websockets``
library; Jupyter's JSON wire format, binary frames for messages with
buffers), TCP_NODELAY and quick ACKs on our side, a reader task that sorts incoming
messages into iopub/shell/control queues, a writer task that sends in
order, and reconnection: a dropped socket is reopened with the same
``session_id``, so the server replays what it buffered meanwhile; messages
seen twice are dropped by ``msg_id``, so nothing in flight is lost or
counted twice. It also watches the kernel's ``restarting``/``dead`` status
(how a gateway reports a death) for ``lost``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import socket
import struct
import uuid
from collections import deque
from datetime import UTC, datetime
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from ....errors import KernelError, KernelStartError
from ..base import max_message_bytes
from .settings import GatewaySettings

__all__ = ["GatewayChannels", "parse_frame"]

log = logging.getLogger(__name__)

_RECONNECT_S = (0.05, 0.2, 0.5, 1.0, 2.0, 3.0)  # back-off between reconnection attempts
_SEEN = 10_000  # message ids remembered to drop what a reconnect replays twice
_TOO_BIG = 1009  # the websocket close code for a message over max_size
_QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)  # Linux only; elsewhere ACKs stay as the OS does them


def parse_frame(frame: str | bytes) -> dict[str, Any]:
    """A Jupyter message from a websocket frame: JSON text, or the binary form carrying buffers.

    Raises ``ValueError`` for a frame that is neither. Pure.
    """
    if isinstance(frame, str):
        parsed: dict[str, Any] = json.loads(frame)
        return parsed
    if len(frame) < 4:
        raise ValueError("binary frame too short")
    count = struct.unpack("!I", frame[:4])[0]
    offsets = [*struct.unpack(f"!{count}I", frame[4 : 4 * (count + 1)]), len(frame)]
    parts = [frame[offsets[i] : offsets[i + 1]] for i in range(count)]
    message: dict[str, Any] = json.loads(parts[0])
    message["buffers"] = parts[1:]
    return message


class GatewayChannels:
    """The channels of kernel ``kernel_id`` on the gateway. ``open()`` then use; ``close()`` when done."""

    def __init__(
        self, settings: GatewaySettings, kernel_id: str, *, max_message: int = max_message_bytes(10_000_000)
    ) -> None:
        self.settings = settings
        self.kernel_id = kernel_id
        self.max_message = max_message  # a bigger frame closes the websocket unread (then it reconnects)
        self.dropped = 0  # frames over max_message
        self.session_id = uuid.uuid4().hex
        self.lost = False  # the gateway said restarting/dead since the kernel last answered
        self.lost_reason = ""
        self.gone = False  # the socket is closed for good (reconnecting failed, or closed)
        self.reconnects = 0
        self._queues: dict[str, asyncio.Queue[dict[str, Any]]] = {
            name: asyncio.Queue() for name in ("iopub", "shell", "control", "stdin")
        }
        self._outgoing: asyncio.Queue[str] = asyncio.Queue()
        self._seen: deque[str] = deque(maxlen=_SEEN)
        self._seen_set: set[str] = set()
        self._ws: ClientConnection | None = None
        self._tcp: Any = None  # the transport's TCP socket (asyncio's wrapper: setsockopt only), None on a UNIX socket
        self._connected = asyncio.Event()
        self._probes: set[str] = set()  # kernel_info requests whose iopub status shows iopub is live
        self._iopub_live = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def __repr__(self) -> str:
        return f"<GatewayChannels {self.settings.url} kernel={self.kernel_id}>"

    # ----------------------------------------------------------------- lifecycle
    async def open(self) -> None:
        """Connect the websocket. Raises ``KernelStartError`` naming the URL."""
        await self._connect()
        self._tasks = [asyncio.ensure_future(self._read()), asyncio.ensure_future(self._write())]

    async def _connect(self) -> None:
        url = f"{self.settings.websocket_url}/api/kernels/{self.kernel_id}/channels?session_id={self.session_id}"
        try:
            self._ws = await connect(
                url,
                additional_headers=self.settings.headers(),
                compression=None,
                max_size=self.max_message,
                open_timeout=self.settings.request_timeout,
                ping_interval=20,
                ping_timeout=20,
            )
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            status = exc.response.status_code if isinstance(exc, InvalidStatus) else None
            hint = ": check the token" if status in (401, 403) else ""
            raise KernelStartError(
                f"cannot open the kernel's websocket on the gateway at {self.settings.url}{hint} ({exc})"
            ) from exc
        sock = self._ws.transport.get_extra_info("socket")
        self._tcp = sock if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6) else None
        if self._tcp is not None:
            # Small request/reply frames otherwise wait on Nagle + delayed ACK (~40 ms each).
            self._tcp.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._connected.set()

    def _ack_now(self) -> None:
        """Leave Linux's delayed-ACK mode (it re-arms on traffic, so after every frame each way).

        A gateway without TCP_NODELAY on its end (Enterprise Gateway 3.3 has no way to set it) holds each
        reply frame until the previous one is ACKed; a delayed ACK makes that ~40 ms per small reply.
        """
        if self._tcp is not None and _QUICKACK is not None:
            try:
                self._tcp.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
            except OSError:
                self._tcp = None  # the socket is closing; the reader reconnects

    def drop(self) -> None:
        """Abort the socket as a network failure would (the reader then reconnects). For tests and benches."""
        if self._ws is not None:
            self._ws.transport.abort()

    def close(self) -> None:
        """Stop the tasks and close the socket. Idempotent; the kernel is not touched."""
        self.gone = True
        for task in self._tasks:
            task.cancel()
        if self._ws is not None:
            self._ws.transport.close()
        self._tasks = []

    stop_channels = close

    async def aclose(self) -> None:
        tasks = self._tasks
        self.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._ws is not None:
            await self._ws.close()

    # ----------------------------------------------------------------- ChannelClient
    def execute(
        self,
        code: str,
        silent: bool = False,
        store_history: bool = True,
        user_expressions: dict[str, Any] | None = None,
        allow_stdin: bool | None = None,
        stop_on_error: bool = True,
    ) -> str:
        content = {
            "code": code,
            "silent": silent,
            "store_history": store_history,
            "user_expressions": user_expressions or {},
            "allow_stdin": bool(allow_stdin),
            "stop_on_error": stop_on_error,
        }
        return self.send("shell", "execute_request", content)

    def send(self, channel: str, msg_type: str, content: dict[str, Any]) -> str:
        """Queue a request; return its ``msg_id``. Raises ``KernelError`` once the socket is gone."""
        if self.gone:
            raise KernelError(f"the connection to the gateway at {self.settings.url} is closed")
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": msg_type,
            "username": "kernel-agent",
            "session": self.session_id,
            "date": datetime.now(UTC).isoformat(),
            "version": "5.3",
        }
        message = {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": channel}
        self._outgoing.put_nowait(json.dumps(message))
        return msg_id

    async def get_iopub_msg(self, timeout: float | None = None) -> dict[str, Any]:
        return await _get(self._queues["iopub"], timeout)

    async def get_shell_msg(self, timeout: float | None = None) -> dict[str, Any]:
        return await _get(self._queues["shell"], timeout)

    async def kernel_info(self, timeout: float) -> dict[str, Any]:
        """Ask until the kernel answers on shell *and* iopub; its reply content.

        Requests sent while a kernel restarts get lost, and the server's iopub
        subscription to a restarted kernel reconnects on its own schedule: a
        shell reply alone does not mean the next execution's output will reach
        us (it once hung a run forever waiting for an ``idle`` that was
        published before the server listened again). So, as Jupyter's own
        ``nudge`` does, ask again every second until a ``kernel_info_reply``
        has come back and iopub has carried a status for one of our requests.
        Clears ``lost``. Raises ``KernelStartError`` after ``timeout`` seconds.
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        self._probes.clear()
        self._iopub_live.clear()
        info: dict[str, Any] | None = None
        try:
            while loop.time() < end and not self.gone:
                self._probes.add(self.send("shell", "kernel_info_request", {}))
                ask_again = min(loop.time() + 1.0, end)
                while info is None and loop.time() < ask_again:
                    try:
                        msg = await self.get_shell_msg(timeout=ask_again - loop.time())
                    except queue.Empty:
                        break
                    if msg.get("parent_header", {}).get("msg_id") in self._probes:
                        info = msg.get("content", {})
                if info is not None:
                    try:
                        async with asyncio.timeout(max(ask_again - loop.time(), 0.0)):
                            await self._iopub_live.wait()
                    except TimeoutError:
                        continue
                    self.lost, self.lost_reason = False, ""
                    return info
        finally:
            self._probes.clear()
        raise KernelStartError(f"the kernel on the gateway at {self.settings.url} did not answer within {timeout:g}s")

    # ----------------------------------------------------------------- tasks
    async def _read(self) -> None:
        while not self.gone:
            assert self._ws is not None
            try:
                async for frame in self._ws:
                    self._ack_now()
                    self._dispatch(frame)
            except ConnectionClosed as exc:
                if exc.sent is not None and exc.sent.code == _TOO_BIG:
                    self.dropped += 1
                    log.warning(
                        "kernel %s sent a message over %d bytes: dropped unread", self.kernel_id, self.max_message
                    )
            if self.gone:
                return
            await self._reconnect()

    async def _reconnect(self) -> None:
        self._connected.clear()
        for pause in _RECONNECT_S:
            await asyncio.sleep(pause)
            try:
                await self._connect()
            except KernelStartError:
                continue
            self.reconnects += 1
            log.info("reconnected to kernel %s on %s (session %s)", self.kernel_id, self.settings.url, self.session_id)
            return
        log.warning("lost the websocket to kernel %s on %s for good", self.kernel_id, self.settings.url)
        self.gone = True
        self._connected.set()  # wake the writer so it can end

    async def _write(self) -> None:
        pending: str | None = None
        while not self.gone:
            if pending is None:
                pending = await self._outgoing.get()
            await self._connected.wait()
            if self.gone or self._ws is None:
                return
            ws = self._ws
            try:
                await ws.send(pending)
                self._ack_now()
            except ConnectionClosed:
                if self._ws is ws:
                    self._connected.clear()  # the reader reconnects; send it again then
                continue
            pending = None

    def _dispatch(self, frame: str | bytes) -> None:
        try:
            msg = parse_frame(frame)
        except (ValueError, struct.error):
            log.warning("dropped a frame that is not a Jupyter message")
            return
        msg_id = msg.get("header", {}).get("msg_id")
        if msg_id:
            if msg_id in self._seen_set:
                return  # replayed after a reconnect, already delivered
            if len(self._seen) == self._seen.maxlen:
                self._seen_set.discard(self._seen[0])
            self._seen.append(msg_id)
            self._seen_set.add(msg_id)
        msg.setdefault("msg_type", msg.get("header", {}).get("msg_type"))
        channel = msg.pop("channel", "iopub")
        if channel == "iopub" and msg["msg_type"] == "status":
            state = msg.get("content", {}).get("execution_state")
            if state in ("restarting", "dead"):
                self.lost, self.lost_reason = True, state
            elif msg.get("parent_header", {}).get("msg_id") in self._probes:
                self._iopub_live.set()
        self._queues.get(channel, self._queues["iopub"]).put_nowait(msg)


async def _get(source: asyncio.Queue[dict[str, Any]], timeout: float | None) -> dict[str, Any]:
    """The next message, or ``queue.Empty`` after ``timeout`` (as jupyter_client's clients do)."""
    try:
        return source.get_nowait()
    except asyncio.QueueEmpty:
        pass
    try:
        async with asyncio.timeout(timeout):
            return await source.get()
    except TimeoutError:
        raise queue.Empty from None
