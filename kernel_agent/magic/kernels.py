"""The ``%%agent`` magic's warm kernel: one per IPython session, so the next ``%%agent`` starts at once.

Owns a ``LoopThread`` that lives as long as the IPython session and a
``KernelPool`` of size 1 on it. Each cell's ``AsyncAgent`` runs on that loop
(the pool's kernels and the agent's zmq sockets must share one loop) and takes
its kernel from the pool; the pool refills in the background while the user
reads the answer, and a kernel is never used by two cells. The pool is made
for the kernel options of a cell (sandbox, limits, gateway); a cell asking for
other ones replaces it. The first cell does not start its kernel and a spare
at once (two cold starts would fight over the CPU): the spare starts after.

Pool kernels are started on the loop's thread, which outlives them: bwrap's
``--die-with-parent`` ties a sandboxed kernel to the thread that launched it.
``close()`` (``%unload_ext kernel_agent``) and interpreter exit (IPython's or
ipykernel's shutdown, through ``LoopThread.on_exit``) shut the pool down.
Does not render anything and does not parse flags: ``cell.py`` does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from .._loop import LoopThread
from ..events import Event
from ..kernel.interface import Kernel, MadeKernels
from ..kernel.pool import KernelPool

__all__ = ["WarmKernels"]


class CellStream(Protocol):
    def __call__(
        self, task: str, data: list[str], workspace: Path, notebook: str | None, *, setup: str = ""
    ) -> Iterator[Event]: ...


class WarmKernels:
    """The magic's long-lived loop and its one-kernel pool. ``close()`` is idempotent."""

    def __init__(self) -> None:
        self._loop: LoopThread | None = None
        self._pool: KernelPool | None = None
        self._options: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"<WarmKernels {self._pool!r}>"

    @property
    def pool(self) -> KernelPool | None:
        """The current pool (None before the first cell and after ``close``)."""
        return self._pool

    @contextmanager
    def agent(self, options: dict[str, Any]) -> Iterator[CellStream]:
        """An ``AsyncAgent(**options)`` on the long-lived loop, as a blocking ``stream`` function.

        A ``KeyboardInterrupt`` while streaming (Jupyter's ■) stops everything, the warm kernel
        too, once the agent is closed: the next cell starts afresh. Raises what ``AsyncAgent``
        raises (``ConfigError``) before any kernel is started.
        """
        loop = self._started_loop()
        agent = loop.run(_build(options, self._acquire))
        interrupted = False

        def stream(
            task: str, data: list[str], workspace: Path, notebook: str | None, *, setup: str = ""
        ) -> Iterator[Event]:
            nonlocal interrupted
            try:
                yield from loop.iterate(agent.stream(task, data, workspace, notebook, setup=setup))
            except KeyboardInterrupt:
                interrupted = True
                raise

        try:
            yield stream
        finally:
            if loop.running:
                loop.run(agent.close())
            if interrupted:
                self.close()

    def wait_ready(self) -> None:
        """Block until the warm kernel is started and set up (no-op before the first cell)."""
        if self._pool is not None and self._loop is not None:
            self._loop.run(self._pool.wait_ready())

    def close(self) -> None:
        """Shut the warm kernel (and any in use) down and stop the loop. Idempotent."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.close(self._close_pool)

    # ----------------------------------------------------------------- internals
    def _started_loop(self) -> LoopThread:
        if self._loop is None or not self._loop.running:
            self._loop = LoopThread("kernel-agent-magic")
            self._loop.on_exit(self._close_pool)
        return self._loop

    @asynccontextmanager
    async def _acquire(self, kernel_options: dict[str, Any], folder: Path) -> AsyncIterator[Kernel]:
        if self._pool is None or kernel_options != self._options:
            await self._close_pool()
            self._pool, self._options = KernelPool(1, **kernel_options), kernel_options
        async with self._pool.acquire(folder) as kernel:
            yield kernel

    async def _close_pool(self) -> None:
        pool, self._pool, self._options = self._pool, None, None
        if pool is not None:
            await pool.close()


async def _build(options: dict[str, Any], acquire: Callable[[dict[str, Any], Path], Any]) -> Any:
    from ..agent.run.agent import AsyncAgent

    # The factory reads the agent's own resolved config (flags > environment > defaults) when the run
    # starts, so the pool's kernels get the very options a kernel of this agent would get.
    agent: AsyncAgent = AsyncAgent(
        **options,
        session_factory=MadeKernels(
            lambda folder: acquire(agent.config.kernel.session_options(), folder), interchangeable=True
        ),
    )
    return agent
