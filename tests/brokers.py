"""A ``Broker`` running on a loop thread of its own, for tests that call ``sql()`` from their own thread
(as the kernel's code does from another process)."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from kernel_agent.sources import QueryLimits, Source
from kernel_agent.sources.broker import Broker

__all__ = ["running_broker"]


@contextmanager
def running_broker(sources: Mapping[str, Source], limits: QueryLimits | None = None) -> Iterator[Broker]:
    """``Broker(sources, a fresh temp folder, limits)`` entered on a background loop until the block ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="broker-loop")
    thread.start()
    broker = Broker(sources, Path(tempfile.mkdtemp(prefix="broker-")), limits)
    try:
        asyncio.run_coroutine_threadsafe(broker.__aenter__(), loop).result(30)
        yield broker
    finally:
        asyncio.run_coroutine_threadsafe(broker.close(), loop).result(120)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
