"""Wake-ups between replicas: PostgreSQL ``LISTEN/NOTIFY`` on one connection of its own.

Owns the channel names, what a notification carries and the listening connection (reconnected when it
drops). A write announces itself in its own transaction (``announce``: delivered at commit, never
before); ``Listener`` hands each payload to a callback. SQLite has no such thing: followers there
poll (``Store.changed`` waits with a timeout either way, so a lost notification costs at most one
poll). Nothing here reads or writes records.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["EVENTS", "RECORDS", "Listener", "announce"]

log = logging.getLogger(__name__)

EVENTS = "kernel_agent_events"  # payload: a run id whose events grew
RECORDS = "kernel_agent_records"  # payload: "<table>:<id>" of a record saved or deleted
_RETRY_S = 2.0


async def announce(connection: AsyncConnection, channel: str, payload: str) -> None:
    """Notify ``channel`` with ``payload`` when ``connection``'s transaction commits (PostgreSQL only)."""
    if connection.dialect.name == "postgresql":
        await connection.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": channel, "payload": payload})


class Listener:
    """Listens on both channels while started; ``on_event(run_id)`` and ``on_record(table, id)`` are
    called on the loop for each notification. ``start`` returns at once; ``close`` is idempotent."""

    def __init__(self, url: URL, on_event: Callable[[str], None], on_record: Callable[[str, str], None]) -> None:
        self.dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.on_event = on_event
        self.on_record = on_record
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._listen())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _listen(self) -> None:
        import asyncpg

        while True:
            connection: Any = None
            try:
                connection = await asyncpg.connect(self.dsn, timeout=10)
                lost = asyncio.Event()
                connection.add_termination_listener(lambda _c, lost=lost: lost.set())
                await connection.add_listener(EVENTS, lambda _c, _pid, _channel, payload: self.on_event(payload))
                await connection.add_listener(RECORDS, self._record)
                self.connected.set()
                await lost.wait()
                log.warning("the database's notifications stopped: followers poll until they are back")
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.warning("cannot listen for the database's notifications (%s): followers poll", type(exc).__name__)
            finally:
                self.connected.clear()
                if connection is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(connection.close(timeout=5))
            await asyncio.sleep(_RETRY_S)

    def _record(self, _connection: Any, _pid: int, _channel: str, payload: str) -> None:
        table, _, record_id = payload.partition(":")
        self.on_record(table, record_id)
