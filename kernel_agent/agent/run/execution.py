"""One round's code running while its output streams: ``StreamedExecution``.

Owns running ``Kernel.execute`` in a task of its own, so the agent's event
stream can yield ``ExecutionOutput`` events while the code runs, and stopping
it when that stream is cancelled or closed (``aclose``, e.g. a consumer
cancelled between two events): the task is cancelled, so the engine
interrupts the code, and waited for, so nothing runs on unseen; what ran
before the stop is kept in ``partial``. It knows nothing of rounds beyond
the number its events carry.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from ...events import ExecutionOutput
from ...kernel.interface import Kernel
from ...kernel.partial import OutputCallback, OutputChunk
from ...result import ExecutionResult

__all__ = ["StreamedExecution"]


class StreamedExecution:
    """``session.execute(code, timeout)`` as a stream of ``ExecutionOutput`` events for round ``round``.

    Iterate ``events()`` to its end, then read ``result``. When the iteration
    is cancelled or closed early, ``partial`` holds what ran (the engine's
    cancelled result), or None.
    """

    def __init__(self, session: Kernel, code: str, timeout: float | None, round: int) -> None:
        self.session = session
        self.code = code
        self.timeout = timeout
        self.round = round
        self.result: ExecutionResult | None = None
        self.partial: ExecutionResult | None = None

    async def events(self) -> AsyncGenerator[ExecutionOutput, None]:
        """The output events while the code runs. Raises what ``Kernel.execute`` raises."""
        chunks: asyncio.Queue[OutputChunk] = asyncio.Queue()
        task = asyncio.ensure_future(self._run(chunks.put_nowait))
        try:
            while not task.done():
                getter = asyncio.ensure_future(chunks.get())
                try:
                    await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not getter.done():
                        getter.cancel()
                if getter.done() and not getter.cancelled():  # a cancelled get leaves its item queued
                    yield self._event(getter.result())
            while not chunks.empty():  # the engine's last chunk comes before its result
                yield self._event(chunks.get_nowait())
            self.result = task.result()
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})  # the engine interrupts the code and keeps what ran
            if not task.cancelled():
                task.exception()  # retrieved: a failure here is the caller's to see, not asyncio's to log

    async def _run(self, on_output: OutputCallback) -> ExecutionResult:
        try:
            return await self.session.execute(self.code, self.timeout, on_output=on_output)
        except asyncio.CancelledError as cancel:
            self.partial = getattr(cancel, "partial_result", None)
            raise

    def _event(self, chunk: OutputChunk) -> ExecutionOutput:
        return ExecutionOutput(self.round, chunk.text, chunk.elapsed_s, chunk.skipped_chars, chunk.figures)
