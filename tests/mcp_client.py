"""The official MCP SDK client held open for synchronous tests: ``HeldClient``.

A ``ClientSession`` and its transport are anyio context managers that must be
entered and left by one task, so a background thread runs one task that opens
them, then runs each call it is handed (as its own task, so a test can cancel
one) until it is told to close.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Self

from mcp import ClientSession
from mcp.types import Implementation

Opener = Callable[[], AbstractAsyncContextManager[Any]]
Job = Callable[[ClientSession], Awaitable[Any]]


class HeldClient:
    """An initialised SDK ``ClientSession`` over ``opener()``'s transport, used from sync code."""

    def __init__(self, opener: Opener) -> None:
        self._opener = opener
        self._jobs: asyncio.Queue[tuple[Job, concurrent.futures.Future[Any], list[Any]] | None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = concurrent.futures.Future[None]()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="mcp-test-client", daemon=True)
        self.server_info: Any = None

    def __enter__(self) -> Self:
        self._thread.start()
        self._ready.result(timeout=60)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._jobs.put_nowait, None)  # type: ignore[union-attr]
        self._thread.join(timeout=60)

    def submit(self, job: Job) -> tuple[concurrent.futures.Future[Any], Callable[[], None]]:
        """Start ``job(session)``; return its future and a function that cancels it."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        holder: list[Any] = []
        assert self._loop is not None and self._jobs is not None
        self._loop.call_soon_threadsafe(self._jobs.put_nowait, (job, future, holder))

        def cancel() -> None:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(lambda: holder and holder[0].cancel())

        return future, cancel

    def call(self, name: str, arguments: dict[str, Any] | None = None, timeout: float = 120, **options: Any) -> Any:
        """``session.call_tool(name, arguments)``, waited for."""
        future, _ = self.submit(lambda session: session.call_tool(name, arguments or {}, **options))
        return future.result(timeout=timeout)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._jobs = asyncio.Queue()
        try:
            async with (
                self._opener() as streams,
                ClientSession(
                    streams[0], streams[1], client_info=Implementation(name="pytest-client", version="1.0")
                ) as session,
            ):
                self.server_info = await session.initialize()
                self._ready.set_result(None)
                await self._serve(session)
        except BaseException as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            raise

    async def _serve(self, session: ClientSession) -> None:
        running: set[asyncio.Task[Any]] = set()
        while (item := await self._jobs.get()) is not None:  # type: ignore[union-attr]
            job, future, holder = item
            task = asyncio.ensure_future(job(session))
            holder.append(task)
            running.add(task)
            task.add_done_callback(functools.partial(_finished, running, future))
        for task in running:
            task.cancel()


def _finished(running: set[asyncio.Task[Any]], future: concurrent.futures.Future[Any], task: asyncio.Task[Any]) -> None:
    running.discard(task)
    _settle(task, future)


def _settle(task: asyncio.Task[Any], future: concurrent.futures.Future[Any]) -> None:
    if task.cancelled():
        future.cancel()
    elif (error := task.exception()) is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())
