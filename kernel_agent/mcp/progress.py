"""Progress notifications while code runs: ``with_progress`` and ``progress_message``.

Owns what an MCP client hears during a long ``execute_python``: a progress
notification at least every ``PROGRESS_S`` (so clients with request timeouts
that reset on progress keep waiting), and one soon after new output, whose
``message`` carries the tail of the output so far (``OutputTail``, bounded).
The engine throttles the output (``kernel.partial``), so a chatty cell sends
at most a few notifications a second. The tool result is unchanged: it
still carries the whole bounded output. A client that asked for no progress
(no progress token) gets nothing; the SDK makes ``report_progress`` a no-op.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import anyio
from mcp.server.mcpserver import Context

if TYPE_CHECKING:  # the kernel modules load after the server is up (``connections.py``)
    from ..kernel.partial import OutputCallback, OutputChunk, OutputTail

__all__ = ["PROGRESS_S", "TAIL_CHARS", "progress_message", "with_progress"]

PROGRESS_S = 1.0  # the longest gap between notifications while code runs
TAIL_CHARS = 2000  # output shown in a notification's message

T = TypeVar("T")


def progress_message(elapsed: float, tail: OutputTail) -> str:
    """The notification's words: time so far, figures, and the output tail (pure)."""
    words = f"running for {elapsed:.0f} s"
    if tail.figures:
        words += f", {tail.figures} figure{'s' if tail.figures != 1 else ''} so far"
    shown = tail.text
    return f"{words}; output so far:\n{shown}" if shown else words


async def with_progress(
    ctx: Context, work: Callable[[OutputCallback], Awaitable[T]], total: float, *, tail_chars: int = TAIL_CHARS
) -> T:
    """Await ``work(on_output)`` while reporting progress to the client: at least every ``PROGRESS_S``,
    and soon after new output arrives through ``on_output``. Raises what ``work`` raises."""
    from ..kernel.partial import OutputTail

    started = time.monotonic()
    tail = OutputTail(tail_chars)
    fresh = anyio.Event()

    def on_output(chunk: OutputChunk) -> None:
        tail(chunk)
        fresh.set()  # called on this loop (the session's), so setting the event here is safe

    async def report() -> None:
        nonlocal fresh
        progress = 0.0
        while True:
            with anyio.move_on_after(PROGRESS_S):
                await fresh.wait()
            fresh = anyio.Event()
            elapsed = time.monotonic() - started
            progress = max(round(elapsed, 3), progress + 0.001)  # the protocol wants it to increase every time
            await ctx.report_progress(progress, total, progress_message(elapsed, tail))

    async with anyio.create_task_group() as group:
        group.start_soon(report)
        try:
            result = await work(on_output)
        finally:
            group.cancel_scope.cancel()
    return result
