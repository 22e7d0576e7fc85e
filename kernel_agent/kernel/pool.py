"""A warm pool of kernels: ``KernelPool``.

Owns kernels started ahead of time (local or on a gateway: whatever the
session options say) with the set-up already run (pandas, numpy,
matplotlib imported, inline PNG figures), handed out one per run by
``acquire(folder)`` (or by calling the pool: it is a ``KernelFactory``) and
closed when that run ends: a kernel is never reused, so no run sees another's state. Taking a kernel starts a refill in
the background; ``max_kernels`` caps the kernels alive at once (ready, in
use and shutting down); ``close()`` (and cancellation, e.g. Ctrl-C) shuts
every kernel the pool started down.

A used kernel is shut down in the background: its run has ended and nothing
can reach it any more, so the run need not wait the ~0.5 s a graceful
shutdown takes. The pool tracks each such shutdown, refills when one frees a
place under the cap, and ``close()`` waits for them all.

Binding after start: a pooled kernel was started before its run had a
folder, so it works in its own private folder (inside its sandbox, the only
place it may write); ``AsyncKernelSession.bind`` copies the run's data files
in and copies changed files back into the run's folder after each round.
The sandbox is not widened to reach the run's folder.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from ..errors import ConfigError, KernelError
from .interface import KernelsAhead, kernels_ahead_of
from .session import AsyncKernelSession

__all__ = ["PRELOAD", "KernelPool"]

log = logging.getLogger(__name__)

# Imports only warm the module cache (no names are left behind: the run's own setup cell binds pd, np,
# plt, sns); ANSI is stripped from tracebacks on our side, for any kernel. seaborn (optional, as in the
# setup cell) pulls in scipy.stats and statsmodels: ~1 s the setup cell would otherwise pay. The PNG
# format is the inline default, set here too because its first setting costs ~30 ms. One version lookup
# fills importlib.metadata's directory caches, which a package probe (the agent's) would otherwise fill.
PRELOAD = (
    "import importlib.metadata, pandas, numpy, matplotlib.pyplot\n"
    "importlib.metadata.version('pandas')\n"
    "try:\n"
    "    import seaborn\n"
    "except ImportError:\n"
    "    seaborn = None\n"
    "get_ipython().run_line_magic('matplotlib', 'inline')\n"
    "get_ipython().run_line_magic('config', 'InlineBackend.figure_formats = [\"png\"]')\n"
    "del importlib, pandas, numpy, matplotlib, seaborn"
)


class KernelPool:
    """``size`` warm kernels; ``async with pool.acquire(folder) as kernel:`` runs one run on one of them.

    ``session_options`` go to each ``AsyncKernelSession`` (``gateway=``, ``limits=``, ``rebuild=``...).
    ``preload`` is run silently in each kernel before it counts as ready. The pool is a ``KernelFactory``
    (calling it is ``acquire``). Raises ``ConfigError`` for a size below 0 or a cap below 1.
    """

    # A pooled kernel started before its run had a folder: it works in its own (``KernelFactory.kernels_apart``).
    kernels_apart = True
    # Fresh kernels of the options given: a run that needs one made for it may take another (interface.py).
    interchangeable = True

    def __init__(
        self, size: int = 2, *, preload: str = PRELOAD, max_kernels: int | None = None, **session_options: Any
    ) -> None:
        if size < 0 or (max_kernels is not None and max_kernels < 1):
            raise ConfigError(f"a pool needs size >= 0 and max_kernels >= 1, not {size} and {max_kernels}")
        self.size = size
        self.preload = preload
        self.max_kernels = max_kernels
        self._options = session_options
        self._ready: asyncio.Queue[AsyncKernelSession] = asyncio.Queue()
        self._alive: set[AsyncKernelSession] = set()  # every kernel started and not yet closed
        self._starting = 0
        self._fillers: set[asyncio.Task[None]] = set()
        self._discards: set[asyncio.Task[None]] = set()  # used kernels shutting down in the background
        self._changed = asyncio.Event()  # set when a start or a shutdown ends, and on close
        self._closed = False
        self.served_warm = 0  # acquires that found a ready kernel (observable by front ends and tests)
        self.served_cold = 0

    @property
    def kernels_ahead(self) -> KernelsAhead | None:
        """What its kernels are before one is taken (``KernelFactory``): from its session options."""
        return kernels_ahead_of(self._options)

    def __repr__(self) -> str:
        return f"<KernelPool ready={self._ready.qsize()} alive={len(self._alive)} size={self.size}>"

    @property
    def ready(self) -> int:
        """Kernels waiting, started and set up."""
        return self._ready.qsize()

    async def start(self) -> KernelPool:
        """Begin filling to ``size`` in the background; return at once."""
        self._refill()
        return self

    async def wait_ready(self) -> None:
        """Wait until ``size`` kernels are ready (for benchmarks and start-up scripts).
        Raises ``KernelError`` when the pool closes meanwhile."""
        while self._ready.qsize() < self.size:
            if self._closed:
                raise KernelError("the kernel pool is closed")
            self._changed.clear()
            self._refill()
            # A start, a shutdown or close() changes what the pool can do; with the cap full of kernels
            # in use there may be nothing to wait for yet but the shutdown their runs' end begins.
            await self._changed.wait()

    @asynccontextmanager
    async def acquire(self, folder: str | os.PathLike[str]) -> AsyncIterator[AsyncKernelSession]:
        """A ready kernel bound to the run's ``folder``, closed (never reused) on exit.

        The exit does not wait for the shutdown: the pool finishes it in the background
        (``close()`` waits for it). Starts one cold when none is ready. Raises ``KernelError``
        once the pool is closed, ``KernelStartError`` when a kernel cannot be started.
        """
        if self._closed:
            raise KernelError("the kernel pool is closed")
        session = self._take_ready()
        if session is None:
            self.served_cold += 1
            session = await self._start_one()
        else:
            self.served_warm += 1
        self._refill()
        try:
            session.bind(folder)
            yield session
        finally:
            self._discard_later(session)  # no await: a cancelled run still hands its kernel back

    def __call__(self, folder: Path, /) -> AbstractAsyncContextManager[AsyncKernelSession]:
        """``acquire(folder)``: the pool is a ``KernelFactory``."""
        return self.acquire(folder)

    async def close(self) -> None:
        """Stop refilling and shut every kernel of the pool down (in use ones, and those still
        shutting down after their run, too); return when all are gone. Idempotent."""
        self._closed = True
        self._changed.set()
        fillers, self._fillers = list(self._fillers), set()
        for task in fillers:
            task.cancel()
        await asyncio.gather(*fillers, return_exceptions=True)
        await asyncio.gather(*(session.close() for session in list(self._alive)), return_exceptions=True)
        # Shutdowns begun after a run share each session's one close; wait for their tasks to end too.
        await asyncio.gather(*list(self._discards), return_exceptions=True)
        self._alive.clear()
        while not self._ready.empty():
            self._ready.get_nowait()

    async def __aenter__(self) -> KernelPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- internals
    def _take_ready(self) -> AsyncKernelSession | None:
        try:
            return self._ready.get_nowait()
        except asyncio.QueueEmpty:
            return None

    def _refill(self) -> None:
        if self._closed:
            return
        wanted = self.size - self._ready.qsize() - self._starting
        for _ in range(max(wanted, 0)):
            if self.max_kernels is not None and len(self._alive) + self._starting >= self.max_kernels:
                return
            self._starting += 1
            task = asyncio.ensure_future(self._fill_one())
            self._fillers.add(task)
            task.add_done_callback(self._fillers.discard)

    async def _fill_one(self) -> None:
        try:
            try:
                session = await self._start_one()
            except KernelError:
                log.warning("the pool could not start a kernel", exc_info=True)
                return
            finally:
                self._starting -= 1
            if self._closed:
                await self._discard(session)
            else:
                self._ready.put_nowait(session)
        finally:
            self._changed.set()

    async def _start_one(self) -> AsyncKernelSession:
        session = AsyncKernelSession(**self._options)
        self._alive.add(session)
        try:
            await session.start()
            if self.preload:
                reply = await session.engine.run_silently(self.preload, {}, 120.0)
                if reply.get("status") != "ok":
                    log.warning("the pool's preload failed: %s", reply.get("evalue"))
        except BaseException:
            await self._discard(session)
            raise
        return session

    async def _discard(self, session: AsyncKernelSession) -> None:
        self._alive.discard(session)
        await session.close()

    def _discard_later(self, session: AsyncKernelSession) -> None:
        """Shut a used kernel down in a task of the pool's; it counts as alive (under the cap) until gone."""
        task = asyncio.ensure_future(self._shut_down(session))
        self._discards.add(task)
        task.add_done_callback(self._discards.discard)

    async def _shut_down(self, session: AsyncKernelSession) -> None:
        try:
            await session.close()  # cancelled (e.g. the loop ends), it still finishes its clean-up first
        except Exception:  # a task nobody awaits: log, never "exception was never retrieved"
            log.warning("the pool could not shut a used kernel down", exc_info=True)
        finally:
            self._alive.discard(session)
            self._changed.set()
        self._refill()  # the cap may have held a refill back while this kernel was alive
