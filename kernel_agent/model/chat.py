"""The seam between the agent and a chat model: ``ChatModel``, its pieces, ``ModelReply``, ``complete``.

Pure types and one helper. ``ChatModel.stream`` yields a reply as it arrives, in typed pieces (pure
values): ``TextPiece``, ``ReasoningPiece``, ``ToolCallDelta``, ``Retry`` (what came before it is void:
the reply starts over), and last the whole ``ModelReply``. ``complete`` drains a stream into its reply
for callers that want only that. ``llm.py`` implements ``ChatModel`` over the ``openai`` SDK (the only
module that imports it); ``scripted.py`` implements it by playing replies shipped with the package (the
demo without a configured model). What the messages may hold is ``messages.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ModelError
from ..records import Usage
from .messages import ChatMessage

__all__ = [
    "ChatModel",
    "ModelReply",
    "Piece",
    "ReasoningPiece",
    "Retry",
    "TextPiece",
    "ToolCall",
    "ToolCallDelta",
    "close_stream",
    "complete",
]


@dataclass(frozen=True)
class ToolCall:
    """A function call the model asked for. ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of a tool call as it streams: call ``index`` of the reply, its ``name`` (as far as known:
    servers send it with the call's first piece) and the next piece of its raw JSON ``arguments``."""

    index: int
    name: str
    arguments: str


@dataclass(frozen=True)
class TextPiece:
    """The next piece of the reply's text."""

    text: str


@dataclass(frozen=True)
class ReasoningPiece:
    """The next piece of the reasoning (hidden thinking) a reasoning model sends beside its reply."""

    text: str


@dataclass(frozen=True)
class Retry:
    """The request failed and is sent again: every piece before this one is void (the reply starts over)."""

    reason: str


@dataclass(frozen=True)
class ModelReply:
    """One assistant reply, streamed or not, as the protocols parse it: the last piece of a stream.

    ``finish_reason`` is the standard field (``stop``, ``length``,
    ``tool_calls``); ``stop_reason`` is vLLM's extra field naming the stop
    string that ended generation (e.g. ``"</Code>"``), None elsewhere.
    ``usage`` is None when the server did not report it. ``reasoning`` is
    the hidden thinking a reasoning model sent beside its reply
    (``reasoning_content``, as vLLM's reasoning parsers and DeepSeek-style
    endpoints name it): kept for people, never sent back to the model.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    usage: Usage | None = None
    reasoning: str = ""


Piece = TextPiece | ReasoningPiece | ToolCallDelta | Retry | ModelReply


@runtime_checkable
class ChatModel(Protocol):
    """Anything that turns a message list into a stream of ``Piece``s ending in its ``ModelReply``.

    ``stream(messages, options)`` sends the request when first iterated and yields the reply's pieces as
    they arrive (a model that does not stream may yield only the ``ModelReply``); ``options`` are extra
    request fields chosen by the protocol (``stop``, ``tools``). A consumer that stops early closes the
    stream (``aclose``), which must drop the request. Implementations raise ``ModelError`` subclasses,
    never SDK exceptions. ``aclose()`` releases the model's connections.
    """

    name: str
    scripted: bool

    def stream(self, messages: Sequence[ChatMessage], options: dict[str, Any] | None = None) -> AsyncIterator[Piece]:
        """The reply to ``messages`` in pieces, the last one the ``ModelReply``; raises ``ModelError``."""
        ...

    async def aclose(self) -> None: ...


async def close_stream(pieces: AsyncIterator[Piece]) -> None:
    """Close a model's stream (its ``aclose``, when it has one: async generators do), dropping its request."""
    aclose = getattr(pieces, "aclose", None)
    if aclose is not None:
        await aclose()


def no_reply(model: ChatModel) -> ModelError:
    """The error for a stream that ended without its ``ModelReply`` (a broken plug-in)."""
    return ModelError(f"the model {model.name!r} ended its stream without a reply")


async def complete(
    model: ChatModel, messages: Sequence[ChatMessage], options: dict[str, Any] | None = None
) -> ModelReply:
    """Drain ``model.stream(messages, options)`` into its ``ModelReply``, for callers that want only the reply.

    Raises ``ModelError`` as the model does, or when its stream ends without a reply.
    """
    pieces = model.stream(messages, options)
    try:
        async for piece in pieces:
            if isinstance(piece, ModelReply):
                return piece
    finally:
        await close_stream(pieces)
    raise no_reply(model)
