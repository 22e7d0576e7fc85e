"""Leases within one replica: a sweep taking over a dead replica's run and a new run of the same thread
starting here are the same holder to the database, so they take the lease under the thread's guard;
the sweep's release never drops the lease the new run has just taken (which would stop it as lost)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kernel_agent.server.leases import Leases
from kernel_agent.server.metrics import Metrics
from kernel_agent.server.records import RunRecord, ThreadRecord
from kernel_agent.server.store import Store
from kernel_agent.server.takeover import Sweeper


def test_a_sweep_never_drops_the_lease_of_a_run_starting_here_meanwhile(tmp_path: Path) -> None:
    async def work() -> tuple[int, bool, str]:
        store = Store(tmp_path / "data")
        await store.load()
        try:
            here, dead = Leases(store.engine, "replica-b", ttl=30), Leases(store.engine, "replica-a", ttl=-1)
            store.save_thread(
                ThreadRecord(id="thread-1", owner="o", task="t", created_at="1", updated_at="1", runs=["run-1"])
            )
            store.save_run(RunRecord(id="run-1", owner="o", thread_id="thread-1", task="t", created_at="1"))
            await store.flush()
            assert await dead.take("thread-1")  # the dead replica's lease, expired already

            async def start_here() -> None:  # Service._start_run's step: the follow-up's lease
                async with here.guard("thread-1"):
                    assert await here.take("thread-1")

            starting: list[asyncio.Task[None]] = []

            def busy(_thread_id: str) -> bool:  # the follow-up arrives just as the sweep looks
                if not starting:
                    starting.append(asyncio.create_task(start_here()))
                return False

            state = {"runs": {}, "live_kernels": 0, "running": 0, "starting": 0, "pending_writes": 0}
            taken = await Sweeper(store, here, Metrics(lambda: state), busy=busy).sweep()
            await starting[0]
            run = store.run("run-1")
            return taken, await here.renew("thread-1"), run.status if run else "gone"
        finally:
            await store.close()

    taken, held, status = asyncio.run(work())
    assert taken == 1 and status == "interrupted"  # the dead replica's run, taken over once
    assert held  # and the follow-up that started meanwhile still holds its thread's lease
