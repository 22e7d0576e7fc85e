"""``Ask``, one request to the model read as its stream: sent when made, closed when its reader stops.

Pure: a model of the test's own against the ``ChatModel`` contract (its stream notes what happened to it);
the real SDK's side of the same contract is ``test_llm.py``'s.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any

import pytest

from kernel_agent.agent.protocols import TagsProtocol
from kernel_agent.agent.run.loop import Ask
from kernel_agent.errors import ModelError
from kernel_agent.model.chat import ChatModel, ModelReply, Piece, TextPiece
from kernel_agent.model.messages import ChatMessage

MESSAGES: list[ChatMessage] = [{"role": "user", "content": "Count."}]


class _Noted:
    """Streams ``words`` (and the reply, unless ``replies`` is false), noting its start and how it ended."""

    name = "noted"
    scripted = True

    def __init__(self, words: Sequence[str], *, replies: bool = True) -> None:
        self.words = words
        self.replies = replies
        self.started = asyncio.Event()
        self.ended: list[str] = []

    async def stream(
        self, messages: Sequence[ChatMessage], options: dict[str, Any] | None = None
    ) -> AsyncIterator[Piece]:
        self.started.set()
        try:
            for word in self.words:
                yield TextPiece(word)
            if self.replies:
                yield ModelReply(" ".join(self.words), finish_reason="stop")
            self.ended.append("whole")
        except GeneratorExit:
            self.ended.append("closed")
            raise

    async def aclose(self) -> None:
        pass


def test_an_ask_sends_its_request_when_made_not_when_read() -> None:
    async def scenario() -> list[Piece]:
        model = _Noted(["one", "two"])
        assert isinstance(model, ChatModel)
        ask = Ask(model, TagsProtocol(), MESSAGES)
        await asyncio.wait_for(model.started.wait(), 10)  # nobody has read it yet
        return [piece async for piece in ask.pieces()]

    assert asyncio.run(scenario()) == [TextPiece("one"), TextPiece("two"), ModelReply("one two", finish_reason="stop")]


def test_a_reader_that_stops_early_closes_the_models_stream() -> None:
    async def scenario() -> tuple[Piece, list[str]]:
        model = _Noted([str(n) for n in range(100)])
        ask = Ask(model, TagsProtocol(), MESSAGES)
        async with aclosing(ask.pieces()) as pieces:
            first = await anext(pieces)
        return first, model.ended

    assert asyncio.run(scenario()) == (TextPiece("0"), ["closed"])


def test_an_ask_dropped_before_it_is_read_leaves_no_task() -> None:
    async def scenario() -> set[asyncio.Task[Any]]:
        ask = Ask(_Noted(["never", "read"]), TagsProtocol(), MESSAGES)
        await ask.aclose()
        await ask.aclose()  # idempotent
        return asyncio.all_tasks() - {asyncio.current_task()}

    assert asyncio.run(scenario()) == set()


def test_a_stream_that_ends_without_its_reply_is_a_model_error() -> None:
    async def scenario() -> list[Piece]:
        ask = Ask(_Noted(["only", "words"], replies=False), TagsProtocol(), MESSAGES)
        return [piece async for piece in ask.pieces()]

    with pytest.raises(ModelError, match="'noted' ended its stream without a reply"):
        asyncio.run(scenario())
