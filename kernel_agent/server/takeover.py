"""Runs whose executor is gone: marked ``interrupted`` honestly, by whoever finds them.

Owns what "interrupted" means for a run's records (its status and error, its thread's status, the
``finished`` event its log never got; the notebook already holds every completed round, and the round
in flight is not re-run: no code executes twice) and the sweep that finds, on a shared database, the
runs whose replica stopped renewing their thread's lease (``Sweeper``). A single process marks every
open run it finds at start instead (``Service.recover``). No HTTP, no kernels.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Container
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from .leases import Leases
from .metrics import Metrics
from .records import RunRecord, ThreadRecord
from .store import Store
from .threads import RunLog

__all__ = ["ORPHANED", "Sweeper", "close_orphan", "finished_event", "interrupt", "now"]

log = logging.getLogger(__name__)

_OPEN = ("queued", "running")
ORPHANED = (
    "the replica running it stopped (its lease expired); completed rounds are in the notebook, the round "
    "in flight was not re-run"
)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def finished_event(run: RunRecord, events: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``finished`` event the agent could not send (cancelled, failed, server killed)."""
    rounds = sum(1 for e in events if e.get("event") == "round_finished")
    return {
        "event": "finished",
        "run": {
            "answer": run.answer,
            "stop_reason": run.stop_reason,
            "error": run.error,
            "rounds": rounds,
            "status": run.status,
        },
    }


async def interrupt(store: Store, run: RunRecord, reason: str) -> None:
    """Mark ``run`` (open, its executor gone) interrupted, and its thread; close its event log."""
    run.status, run.stop_reason, run.finished_at, run.error = "interrupted", None, now(), reason
    store.save_run(run)
    thread = store.thread(run.thread_id)
    if thread is not None:
        thread.status, thread.updated_at = "interrupted", now()
        store.save_thread(thread)
    run_log = RunLog(store, run.id, await store.events(run.id))
    if not run_log.events or run_log.events[-1].get("event") != "finished":
        await run_log.add(finished_event(run, run_log.events))
    await store.flush()


async def close_orphan(store: Store, thread: ThreadRecord, running: Container[str]) -> bool:
    """With the thread's lease in hand: its last run, still open but not ``running`` here (its replica
    died and the lease expired before a sweep found it), is marked interrupted now. True if it was."""
    if not thread.runs or thread.runs[-1] in running:
        return False
    await store.refresh("runs", thread.runs[-1])
    previous = store.run(thread.runs[-1])
    if previous is None or previous.status not in _OPEN:
        return False
    await interrupt(store, previous, ORPHANED)
    return True


class Sweeper:
    """Every ``period`` seconds, take over the open runs whose thread's lease has expired: take the
    lease (one replica wins), mark the run interrupted, let the lease go. ``busy(thread_id)`` tells
    whether this replica is running that thread itself (then it is not an orphan)."""

    def __init__(self, store: Store, leases: Leases, metrics: Metrics, busy: Any) -> None:
        self.store = store
        self.leases = leases
        self.metrics = metrics
        self.busy = busy
        self.period = max(leases.ttl / 3, 0.2)

    async def run(self) -> None:
        while True:
            try:
                await self.sweep()
            except (SQLAlchemyError, OSError) as exc:  # the database away: try again next time
                log.warning("cannot look for orphaned runs: %s", type(exc).__name__)
            await asyncio.sleep(self.period)

    async def sweep(self) -> int:
        """Take over every orphaned run now; return how many."""
        taken = 0
        for run_id, thread_id in await self.leases.orphans():
            async with self.leases.guard(thread_id):  # a run of this thread starting here waits, or is seen busy
                taken += await self._take_over(run_id, thread_id)
        return taken

    async def _take_over(self, run_id: str, thread_id: str) -> int:
        if self.busy(thread_id) or not await self.leases.take(thread_id):
            return 0
        try:
            await self.store.refresh("runs", run_id)
            await self.store.refresh("threads", thread_id)
            run = self.store.run(run_id)
            if run is None or run.status not in _OPEN:
                return 0
            await interrupt(self.store, run, ORPHANED)
            self.metrics.takeovers.inc()
            log.warning(
                "took over run %s of thread %s: marked interrupted",
                run_id,
                thread_id,
                extra={"run_id": run_id, "thread_id": thread_id},
            )
            return 1
        finally:
            await self.leases.release(thread_id)
