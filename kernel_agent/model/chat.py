"""The seam between the agent and a chat model: ``ChatModel``, ``ModelReply``, ``ToolCall``, ``ToolCallDelta``.

Pure types. ``llm.py`` implements ``ChatModel`` over the ``openai`` SDK (the
only module that imports it); ``scripted.py`` implements it by playing
replies shipped with the package (the demo without a configured model).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..records import Usage

__all__ = [
    "ChatModel",
    "DeltaCallback",
    "ModelReply",
    "RetryCallback",
    "ToolCall",
    "ToolCallDelta",
    "ToolDeltaCallback",
]

DeltaCallback = Callable[[str], None]
RetryCallback = Callable[[str], None]


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


ToolDeltaCallback = Callable[[ToolCallDelta], None]


@dataclass(frozen=True)
class ModelReply:
    """One assistant reply, streamed or not, as the protocols parse it.

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


@runtime_checkable
class ChatModel(Protocol):
    """Anything that turns a message list into a ``ModelReply``.

    ``options`` are extra request fields chosen by the protocol (``stop``,
    ``tools``). ``on_delta`` receives text as it streams, when the model streams;
    ``on_reasoning`` receives the reasoning (hidden thinking) as it streams;
    ``on_tool_delta`` the tool calls' arguments as they stream (``ToolCallDelta``).
    ``on_retry`` is called with the reason before a failed request is retried;
    text streamed before it is void (the reply starts over).
    Implementations raise ``ModelError`` subclasses, never SDK exceptions.
    """

    name: str
    scripted: bool

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        options: dict[str, Any] | None = None,
        on_delta: DeltaCallback | None = None,
        on_retry: RetryCallback | None = None,
        on_reasoning: DeltaCallback | None = None,
        on_tool_delta: ToolDeltaCallback | None = None,
    ) -> ModelReply: ...

    async def aclose(self) -> None: ...
