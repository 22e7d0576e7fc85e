"""Issue 50's benchmark of the model seam as a stream: what each piece of a reply costs. ``NAME`` and ``PARTS``.

* ``pieces``: a 10,000-piece scripted reply (one character a piece; 500 in a smoke run) read through the
  run's ``Ask`` from ``ScriptedChatModel.stream``, against the seam it replaced, written here: the same
  pieces handed to callbacks (``complete(..., on_delta=...)``) that put them on a queue, which the reader
  drained by waiting on the queue and the request together, as ``Ask`` did before the stream. Alternating,
  median of each. Both must deliver every piece in order and the whole reply: a fast wrong answer raises.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from report import Row, median, scaled

from kernel_agent.agent.protocols import TagsProtocol
from kernel_agent.agent.run.loop import Ask
from kernel_agent.model.chat import ModelReply, TextPiece
from kernel_agent.model.messages import ChatMessage
from kernel_agent.model.scripted import ScriptedChatModel

NAME = "seam"

MESSAGES: list[ChatMessage] = [{"role": "user", "content": "Say it, one character at a time."}]


class _CallbackModel:
    """The scripted model as it was before the stream: one ``complete`` handing each chunk to ``on_delta``."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def complete(self, messages: list[ChatMessage], on_delta: Callable[[str], None]) -> ModelReply:
        for char in self.text:
            on_delta(char)
            await asyncio.sleep(0)  # as the scripted model did between chunks
        return ModelReply(text=self.text, finish_reason="stop")


async def _queued(model: _CallbackModel) -> AsyncIterator[str | ModelReply]:
    """The old ``Ask.pieces``: the request in a task feeding a queue, read by waiting on both."""
    queue: asyncio.Queue[str] = asyncio.Queue()
    task = asyncio.ensure_future(model.complete(MESSAGES, on_delta=queue.put_nowait))
    getter: asyncio.Future[str] | None = None
    try:
        while not task.done() or not queue.empty():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({task, getter}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
        yield task.result()
    finally:
        for pending in (task, getter):
            if pending is not None and not pending.done():
                pending.cancel()


async def _through_callbacks(text: str) -> tuple[float, str, ModelReply | None]:
    started = time.perf_counter()
    parts: list[str] = []
    reply: ModelReply | None = None
    async for piece in _queued(_CallbackModel(text)):
        if isinstance(piece, ModelReply):
            reply = piece
        else:
            parts.append(piece)
    return time.perf_counter() - started, "".join(parts), reply


async def _through_stream(text: str) -> tuple[float, str, ModelReply | None]:
    started = time.perf_counter()
    parts: list[str] = []
    reply: ModelReply | None = None
    ask = Ask(ScriptedChatModel([text], chunk_size=1), TagsProtocol(), MESSAGES)
    async for piece in ask.pieces():
        if isinstance(piece, ModelReply):
            reply = piece
        elif isinstance(piece, TextPiece):
            parts.append(piece.text)
    return time.perf_counter() - started, "".join(parts), reply


def pieces(quick: bool) -> list[Row]:
    """Median seconds to read a 10,000-piece reply (500 in a smoke run) through ``stream`` vs callbacks into
    a queue, alternating."""
    rounds, count = scaled(quick, (9, 10_000), (3, 10_000), (1, 500))
    text = "".join(chr(ord("a") + i % 26) for i in range(count))
    samples: dict[str, list[float]] = {"stream": [], "callbacks": []}
    sides: dict[str, Callable[[str], Any]] = {"stream": _through_stream, "callbacks": _through_callbacks}
    for index in range(rounds):
        for side in ("stream", "callbacks") if index % 2 == 0 else ("callbacks", "stream"):
            seconds, said, reply = asyncio.run(sides[side](text))
            if said != text or reply is None or reply.text != text:
                raise AssertionError(f"{side}: {len(said)} of {count} characters, reply {reply!r:.80}")
            samples[side].append(seconds)
    return [
        Row(
            f"a {count:,}-piece reply through the model seam, median of {rounds}: stream vs callbacks into a queue",
            median(samples["stream"]),
            median(samples["callbacks"]),
            max_ratio=0.5,
        ),
        Row("  ↳ per piece, through the stream", median(samples["stream"]) / count),
    ]


PARTS = {"pieces": pieces}
