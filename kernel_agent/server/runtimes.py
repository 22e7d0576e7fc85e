"""The thread kernels alive on this replica: made on demand, capped, shut down when idle, taken warm.

Owns the map of thread ids to their ``ThreadRuntime`` (an agent and a live kernel, ``threads.py``),
the live cap (the idlest kernel is shut down to make room; a later follow-up rebuilds it from the
notebook), the idle reaper and the warm ``KernelPool`` new threads take their kernels from when
``pool`` (the warm kernels' count) is set. Which run uses a runtime, and when, is ``executor.py``'s; no
records, no HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from .._loop import in_thread
from ..agent.config import AgentConfig
from ..agent.run.agent import warm_host
from ..errors import KernelAgentError, ServiceError
from ..kernel.pool import KernelPool
from .config import ServerConfig
from .leases import Leases
from .records import ThreadRecord
from .store import Store
from .threads import ThreadRuntime

__all__ = ["Runtimes", "pool_for"]

log = logging.getLogger(__name__)


class Runtimes:
    """This replica's thread runtimes. ``start`` the pool and the reaper first, ``close`` last."""

    def __init__(self, config: ServerConfig, store: Store, leases: Callable[[], Leases]) -> None:
        self.config = config
        self.store = store
        self._leases = leases
        self._by_thread: dict[str, ThreadRuntime] = {}
        self.pool: KernelPool | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._warming: asyncio.Future[None] | None = None

    def get(self, thread_id: str) -> ThreadRuntime | None:
        return self._by_thread.get(thread_id)

    def busy(self, thread_id: str) -> bool:
        """True while a run of ``thread_id`` executes here."""
        runtime = self._by_thread.get(thread_id)
        return runtime is not None and runtime.busy

    @property
    def live(self) -> int:
        """Thread kernels alive here."""
        return sum(1 for r in self._by_thread.values() if r.live)

    async def start(self) -> None:
        if self.config.pool:
            self.pool = await pool_for(self.config).start()
            self._warming = asyncio.ensure_future(in_thread(warm_host))  # the pool's first runs as fast as later ones
        self._reaper = asyncio.create_task(self._reap_idle())

    async def of(self, thread: ThreadRecord) -> ThreadRuntime:
        """``thread``'s runtime, made when it has none here, with room made for its kernel. Raises
        ``ServiceError`` 422 for agent options its agent refuses, or a source the thread names that this server
        no longer offers."""
        runtime = self._by_thread.get(thread.id)
        if runtime is None:
            offered = self.config.source_specs()
            missing = [name for name in thread.sources if name not in offered]
            if missing:
                raise ServiceError(
                    f"thread {thread.id} queries the data source {missing[0]!r}, which this server no longer offers "
                    f"(its operator's --source {missing[0]}=...)",
                    status=422,
                )
            options = dict(self.config.agent)
            if thread.protocol:
                options["protocol"] = thread.protocol
            if self.config.demo:  # a script plays in order: each thread its own
                from ..demo import TYPING_DELAY_S, demo_model

                options["chat_model"] = demo_model(delay=TYPING_DELAY_S)
            try:
                runtime = ThreadRuntime(
                    thread.id,
                    self.store.workspace(thread.id),
                    options,
                    self.pool,
                    self._leases(),
                    sources=[offered[name] for name in thread.sources],
                )
            except KernelAgentError as exc:
                raise ServiceError(str(exc), status=422) from None
            self._by_thread[thread.id] = runtime
        await self._make_room(keep=runtime)
        return runtime

    async def remove(self, thread_id: str) -> None:
        """Shut ``thread_id``'s kernel down and forget its runtime (the thread is deleted). Raises
        ``ServiceError`` 409 while it runs."""
        runtime = self._by_thread.get(thread_id)
        if runtime is None:
            return
        if runtime.busy:
            raise ServiceError(f"thread {thread_id} is running a run; cancel it first", status=409)
        del self._by_thread[thread_id]
        await runtime.close()

    async def stop_reaping(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None

    async def close(self) -> None:
        """Shut every kernel here down, and the pool. Idempotent."""
        await self.stop_reaping()
        if self._warming is not None:
            await self._warming  # a thread: let it end rather than leave it behind
            self._warming = None
        runtimes, self._by_thread = list(self._by_thread.values()), {}
        for runtime in runtimes:
            await runtime.close()
        if self.pool is not None:
            await self.pool.close()
            self.pool = None

    async def _make_room(self, keep: ThreadRuntime) -> None:
        """Shut the idlest kernels down while more than ``max_live_kernels`` would be alive."""
        live = [r for r in self._by_thread.values() if r.live and r is not keep and not r.busy]
        excess = len(live) + 1 - self.config.max_live_kernels
        for runtime in sorted(live, key=lambda r: r.last_used)[: max(excess, 0)]:
            await runtime.stop_kernel()

    async def _reap_idle(self) -> None:
        period = min(self.config.idle_ttl / 2, 30.0)
        while True:
            await asyncio.sleep(period)
            cutoff = time.monotonic() - self.config.idle_ttl
            for runtime in list(self._by_thread.values()):
                if runtime.live and not runtime.busy and runtime.last_used < cutoff:
                    log.info(
                        "thread %s idle: shutting its kernel down",
                        runtime.thread_id,
                        extra={"thread_id": runtime.thread_id},
                    )
                    # A shutdown may cancel this mid-stop: the session's close finishes its clean-up
                    # first (AsyncKernelSession.close), and close() awaits this task.
                    await runtime.stop_kernel()


def pool_for(config: ServerConfig) -> KernelPool:
    """The warm pool for ``config`` (not started): kernels started as ``AsyncAgent.new_session`` starts
    them (the same sandbox and limits, or the same gateway), at most ``max_live_kernels`` alive at once.
    Raises ``ConfigError`` for bad agent options."""
    seams = ("chat_model", "session_factory", "session_options", "model_options")
    agent = AgentConfig.resolve(**{k: v for k, v in config.agent.items() if k not in seams})
    options = {**agent.kernel.session_options(), **config.agent.get("session_options", {})}
    return KernelPool(config.pool, max_kernels=config.max_live_kernels, **options)
