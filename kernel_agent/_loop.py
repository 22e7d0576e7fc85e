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
import inspect
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from typing import Any, Generic, TypeVar

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

        A ``KeyboardInterrupt`` while waiting (even before the loop has started
        ``coro``) cancels the coroutine and waits (up to ``_UNWIND_S``) until it
        has finished unwinding, which saves the run and stops the kernel, before
        the interrupt is re-raised. Returning earlier would leave an async
        generator still running its cleanup, so closing it would fail.
        """
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync facade was called from its own event-loop thread")
        call: _Call[T] = _Call(coro)
        try:
            # Callbacks run in the order they were queued, so a cancel queued by the handler below
            # always finds the task started (or finds nothing queued, and drops the coroutine).
            self.loop.call_soon_threadsafe(call.start)
            call.finished.wait()
        except KeyboardInterrupt:
            self.loop.call_soon_threadsafe(call.cancel)
            call.finished.wait(timeout=_UNWIND_S)
            raise
        return call.result()

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


class _Call(Generic[T]):
    """One awaitable handed to the loop: started and cancelled there, its end seen from any thread."""

    def __init__(self, awaitable: Awaitable[T]) -> None:
        self.awaitable = awaitable
        self.finished = threading.Event()
        self.task: asyncio.Task[T] | None = None

    def start(self) -> None:
        self.task = asyncio.ensure_future(_as_coroutine(self.awaitable))
        self.task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[T]) -> None:
        if inspect.iscoroutine(self.awaitable) and inspect.getcoroutinestate(self.awaitable) == "CORO_CREATED":
            self.awaitable.close()  # cancelled before its first step: it never runs, and is not left unawaited
        self.finished.set()

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
            return
        if inspect.iscoroutine(self.awaitable):  # interrupted before it was queued: it never runs
            self.awaitable.close()
        self.finished.set()

    def result(self) -> T:
        assert self.task is not None  # set before ``finished``
        return self.task.result()


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
