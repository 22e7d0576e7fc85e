"""Leases: which replica executes a thread's run, as rows with an expiry the holder renews; and which
replica owns a thread's kernel on a gateway (so the next one can adopt it).

Owns taking, renewing and releasing a thread's lease (each one atomic statement, so two replicas
never both hold one) and finding the runs whose executor stopped renewing (``orphans``). A lease
is held from a run's start until its records are committed at its end; a replica that loses one
(it renewed too late, another took it) must stop the run and write nothing more of it. Expiry is
wall-clock time, so replicas' clocks must agree (NTP) to well within the lease's length.

Within one replica the database cannot tell a run's lease from a sweep's (same holder), so both take
it under that thread's ``guard``: a sweep's take, mark and release never interleaves with a run's
start (a release there would drop the lease the new run just took, and the run would stop as lost).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Callable

from sqlalchemy import and_, delete, or_, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from .database import tables

__all__ = ["Leases"]

log = logging.getLogger(__name__)

_OPEN = ("queued", "running")


class Leases:
    """The leases of one replica (``holder``), each lasting ``ttl`` seconds unless renewed."""

    def __init__(self, engine: AsyncEngine, holder: str, ttl: float) -> None:
        self.engine = engine
        self.holder = holder
        self.ttl = ttl
        self._guards: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def __repr__(self) -> str:
        return f"<Leases {self.holder} ttl={self.ttl}>"

    def guard(self, thread_id: str) -> asyncio.Lock:
        """This replica's lock on the thread's lease (see the module's docstring); forgotten once unused."""
        lock = self._guards.get(thread_id)
        if lock is None:
            lock = self._guards[thread_id] = asyncio.Lock()
        return lock

    async def take(self, thread_id: str) -> bool:
        """Take (or renew) the thread's lease: True when this replica holds it now, False when another
        replica holds it and it has not expired."""
        table, now = tables["leases"], time.time()
        dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        statement = dialect.insert(table).values(thread_id=thread_id, holder=self.holder, expires_at=now + self.ttl)
        statement = statement.on_conflict_do_update(
            index_elements=["thread_id"],
            set_={"holder": self.holder, "expires_at": now + self.ttl},
            where=or_(table.c.holder == self.holder, table.c.expires_at < now),
        )
        async with self.engine.begin() as connection:
            return (await connection.execute(statement)).rowcount == 1

    async def renew(self, thread_id: str) -> bool:
        """Extend a lease this replica holds; False when it no longer does (expired and taken)."""
        table, now = tables["leases"], time.time()
        async with self.engine.begin() as connection:
            done = await connection.execute(
                table.update()
                .where(table.c.thread_id == thread_id, table.c.holder == self.holder)
                .values(expires_at=now + self.ttl)
            )
        return done.rowcount == 1

    async def keep(self, thread_id: str, lost: Callable[[], None]) -> None:
        """Renew the thread's lease every third of ``ttl`` until cancelled; call ``lost`` and return when
        another replica has taken it. A database that does not answer is retried: the lease may hold."""
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                held = await self.renew(thread_id)
            except (SQLAlchemyError, OSError) as exc:
                log.warning(
                    "cannot renew the lease of thread %s: %s",
                    thread_id,
                    type(exc).__name__,
                    extra={"thread_id": thread_id},
                )
                continue
            if not held:
                lost()
                return

    async def release(self, thread_id: str) -> None:
        table = tables["leases"]
        async with self.engine.begin() as connection:
            await connection.execute(delete(table).where(table.c.thread_id == thread_id, table.c.holder == self.holder))

    async def kernel_of(self, thread_id: str) -> str | None:
        """The id of the thread's kernel on the gateway, when a replica recorded one."""
        table = tables["kernels"]
        async with self.engine.connect() as connection:
            return (await connection.execute(select(table.c.kernel_id).where(table.c.thread_id == thread_id))).scalar()

    async def own_kernel(self, thread_id: str, kernel_id: str) -> None:
        """Record that this replica owns ``kernel_id``, the thread's kernel on the gateway."""
        dialect = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        row = {"thread_id": thread_id, "kernel_id": kernel_id, "holder": self.holder}
        statement = (
            dialect.insert(tables["kernels"])
            .values(**row)
            .on_conflict_do_update(index_elements=["thread_id"], set_={"kernel_id": kernel_id, "holder": self.holder})
        )
        async with self.engine.begin() as connection:
            await connection.execute(statement)

    async def owns_kernel(self, thread_id: str, kernel_id: str) -> bool:
        """True while this replica is the recorded owner of the thread's ``kernel_id``."""
        table = tables["kernels"]
        query = select(table.c.holder).where(table.c.thread_id == thread_id, table.c.kernel_id == kernel_id)
        async with self.engine.connect() as connection:
            return (await connection.execute(query)).scalar() == self.holder

    async def forget_kernel(self, thread_id: str, kernel_id: str) -> None:
        """The thread's kernel is gone (shut down by its owner): forget it."""
        table = tables["kernels"]
        async with self.engine.begin() as connection:
            await connection.execute(
                delete(table).where(table.c.thread_id == thread_id, table.c.kernel_id == kernel_id)
            )

    async def release_all(self) -> None:
        """Drop every lease (a single process starting: whoever held them is gone)."""
        async with self.engine.begin() as connection:
            await connection.execute(delete(tables["leases"]))

    async def orphans(self) -> list[tuple[str, str]]:
        """``(run id, thread id)`` of the open runs whose thread no replica holds a live lease on."""
        runs, leases, now = tables["runs"], tables["leases"], time.time()
        query = (
            select(runs.c.id, runs.c.thread_id)
            .select_from(runs.outerjoin(leases, leases.c.thread_id == runs.c.thread_id))
            .where(and_(runs.c.status.in_(_OPEN), or_(leases.c.thread_id.is_(None), leases.c.expires_at < now)))
        )
        async with self.engine.connect() as connection:
            return [(row.id, row.thread_id) for row in await connection.execute(query)]
