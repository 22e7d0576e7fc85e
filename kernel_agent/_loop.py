"""A private event loop in a daemon thread (what the sync facades run on), and ``in_thread``.

The sync classes must work where an event loop already runs (an IPython
kernel, a Jupyter notebook), so they never call ``asyncio.run`` on the
caller's thread. Every async object they own is created and used on this
loop only; zmq sockets never cross loops.

``in_thread`` is how async code does blocking work (disk, a subprocess)
without pausing the loop: in a worker thread, finished even when the caller
is cancelled meanwhile, so what it wrote or made is whole for the clean-up.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["LoopThread", "in_thread"]

T = TypeVar("T")

log = logging.getLogger(__name__)

_UNWIND_S = 30.0  # how long an interrupted call may take to save its work and stop its kernel

_open_loops: weakref.WeakSet[LoopThread] = weakref.WeakSet()


class LoopThread:
    """Runs coroutines on a loop owned by one background thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()
        self._closers: list[Callable[[], Awaitable[Any]]] = []
        _open_loops.add(self)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def run(self, coro: Awaitable[T]) -> T:
        """Run ``coro`` on the private loop and wait for it.

        A ``KeyboardInterrupt`` while waiting cancels the coroutine and waits
        (up to ``_UNWIND_S``) until it has finished unwinding, which saves the
        run and stops the kernel, before the interrupt is re-raised. Returning
        earlier would leave an async generator still running its cleanup, so
        closing it would fail.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync facade was called from its own event-loop thread")
        finished = threading.Event()
        task = asyncio.run_coroutine_threadsafe(_spawn(coro, finished), self.loop).result()
        try:
            finished.wait()
        except KeyboardInterrupt:
            self.loop.call_soon_threadsafe(task.cancel)
            finished.wait(timeout=_UNWIND_S)
            raise
        return task.result()

    def iterate(self, agen: AsyncIterator[T]) -> Generator[T, None, None]:
        """Iterate an async iterator living on the private loop, from this thread; closing the generator
        closes ``agen`` there."""
        try:
            while True:
                try:
                    yield self.run(agen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            if self.running:
                aclose = getattr(agen, "aclose", None)
                if aclose is not None:
                    self.run(aclose())

    def on_exit(self, closer: Callable[[], Awaitable[Any]]) -> None:
        """Register an async cleanup to run if the interpreter exits with this loop open."""
        self._closers.append(closer)

    def close(self, closer: Callable[[], Awaitable[Any]]) -> None:
        """Run ``closer()`` on the loop, then stop the loop, even if it failed. Idempotent."""
        if not self.running:
            return
        try:
            self.run(closer())
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop the loop and join its thread. Idempotent."""
        if not self.running:
            return
        self._closers.clear()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()
        _open_loops.discard(self)


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def _spawn(awaitable: Awaitable[T], finished: threading.Event) -> asyncio.Task[T]:
    """Start ``awaitable`` as a task on this loop; ``finished`` is set once it is done (even cancelled)."""
    task = asyncio.ensure_future(_as_coroutine(awaitable))
    task.add_done_callback(lambda _task: finished.set())
    return task


@atexit.register
def _close_open_loops() -> None:  # pragma: no cover - exercised by subprocess tests
    for loop_thread in list(_open_loops):
        for closer in loop_thread._closers:
            try:
                loop_thread.run(closer())
            except BaseException:
                pass
        loop_thread.stop()


async def in_thread(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` in a worker thread, off the event loop.

    A cancel while it runs waits for it to finish, then propagates: a file
    write is never left half done and a resource it creates is there for the
    caller's clean-up to remove. Raises what ``function`` raises.
    """
    task = asyncio.ensure_future(asyncio.to_thread(function, *args, **kwargs))
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})  # a cancel of this wait leaves the task running
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if task.exception() is not None:
            log.warning("work finished after a cancel failed: %r", task.exception())
        raise asyncio.CancelledError
    return task.result()
