"""The chat messages a model is sent: ``ChatMessage`` and its parts, as TypedDicts (wire shapes).

Owns the shapes only, as the OpenAI chat API reads them (plus DeepAnalyze's ``execute`` role); what the
messages say is the protocols' job (``agent/protocols/``). Pure types: a message is a plain ``dict`` at
run time, sent as it is.
"""

from __future__ import annotations

from typing import Literal, TypedDict

__all__ = [
    "AssistantMessage",
    "ChatMessage",
    "ContentPart",
    "ExecuteMessage",
    "FunctionCall",
    "ImagePart",
    "ImageURL",
    "SystemMessage",
    "TextPart",
    "ToolCallMessage",
    "ToolMessage",
    "UserMessage",
]


class TextPart(TypedDict):
    """A piece of text in a message's content."""

    type: Literal["text"]
    text: str


class ImageURL(TypedDict):
    """Where an image is: here always a ``data:image/png;base64,...`` URL."""

    url: str


class ImagePart(TypedDict):
    """An image in a message's content (a vision model reads it)."""

    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = TextPart | ImagePart


class SystemMessage(TypedDict):
    """The instructions before the conversation."""

    role: Literal["system"]
    content: str


class UserMessage(TypedDict):
    """The user's turn: text, or text and images in parts."""

    role: Literal["user"]
    content: str | list[ContentPart]


class FunctionCall(TypedDict):
    """The function a tool call names, and its arguments as raw JSON text."""

    name: str
    arguments: str


class ToolCallMessage(TypedDict):
    """One tool call of an assistant message, as the history sends it back."""

    id: str
    type: Literal["function"]
    function: FunctionCall


class _AssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None


class AssistantMessage(_AssistantMessage, total=False):
    """The model's earlier reply: its text (None beside tool calls with no text) and its tool calls."""

    tool_calls: list[ToolCallMessage]


class ToolMessage(TypedDict):
    """What a tool call gave back, paired with it by ``tool_call_id``."""

    role: Literal["tool"]
    tool_call_id: str
    content: str


class ExecuteMessage(TypedDict):
    """DeepAnalyze's own role: the output of the code it wrote, sent back raw."""

    role: Literal["execute"]
    content: str


ChatMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage | ExecuteMessage
