"""Folding the SDK's reply objects into a ``ModelReply``: ``StreamAccumulator``, ``completion_reply``.

Owns reading what an OpenAI-compatible server sent back: text, tool calls,
``finish_reason``, vLLM's ``stop_reason``, a reasoning model's
``reasoning_content`` (or ``reasoning``), and usage with reasoning tokens,
from streamed ``chat.completion.chunk`` objects or one ``chat.completion``.
Duck-typed over the SDK's pydantic objects, so it does not import ``openai``
(``llm.py`` does, and owns the requests, retries and errors). Pure.
"""

from __future__ import annotations

from typing import Any

from ..records import Usage
from .chat import ModelReply, ToolCall, ToolCallDelta

__all__ = ["StreamAccumulator", "completion_reply"]


def completion_reply(completion: Any) -> ModelReply | None:
    """The ``ModelReply`` of a non-streamed completion; None when it has no choices. Raises nothing."""
    if not completion.choices:
        return None
    choice = completion.choices[0]
    message = choice.message
    calls = tuple(
        ToolCall(id=call.id or f"call_{i}", name=_call_name(call), arguments=_call_arguments(call))
        for i, call in enumerate(message.tool_calls or ())
    )
    return ModelReply(
        text=message.content or "",
        tool_calls=calls,
        finish_reason=choice.finish_reason,
        stop_reason=_stop_reason(choice),
        usage=_usage(completion.usage),
        reasoning=_reasoning(message),
    )


class StreamAccumulator:
    """Folds ``chat.completion.chunk`` objects into one ``ModelReply``."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.received = 0
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.stop_reason: str | int | None = None
        self.usage: Usage | None = None
        self.thoughts: list[str] = []

    def add(self, chunk: Any) -> tuple[str, str, tuple[ToolCallDelta, ...]]:
        """Take one chunk; return its text delta, its reasoning delta ("" when none) and its tool calls'
        argument pieces."""
        if getattr(chunk, "usage", None) is not None:
            self.usage = _usage(chunk.usage)
        text = thought = ""
        pieces: list[ToolCallDelta] = []
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None and delta.content:
                text += delta.content
            if delta is not None:
                thought += _reasoning(delta)
            for call in (getattr(delta, "tool_calls", None) or ()) if delta is not None else ():
                piece = self._add_call(call)
                if piece is not None:
                    pieces.append(piece)
            if choice.finish_reason is not None:
                self.finish_reason = choice.finish_reason
            stop = _stop_reason(choice)
            if stop is not None:
                self.stop_reason = stop
        if text:
            self.parts.append(text)
            self.received += len(text)
        if thought:
            self.thoughts.append(thought)
            self.received += len(thought)
        return text, thought, tuple(pieces)

    def _add_call(self, call: Any) -> ToolCallDelta | None:
        """Fold one tool-call delta in; return its arguments piece (None when it brought none)."""
        index = call.index if call.index is not None else len(self.calls)
        slot = self.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
        if call.id and not slot["id"]:
            slot["id"] = call.id
        function = getattr(call, "function", None)
        if function is not None:
            # Names arrive whole (some servers repeat them); arguments arrive in pieces.
            if function.name and not slot["name"]:
                slot["name"] = function.name
            if function.arguments:
                slot["arguments"].append(function.arguments)
                self.received += len(function.arguments)
                return ToolCallDelta(index, slot["name"], function.arguments)
        return None

    def reply(self) -> ModelReply:
        calls = tuple(
            ToolCall(id=slot["id"] or f"call_{index}", name=slot["name"], arguments="".join(slot["arguments"]))
            for index, slot in sorted(self.calls.items())
        )
        return ModelReply(
            text="".join(self.parts),
            tool_calls=calls,
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
            usage=self.usage,
            reasoning="".join(self.thoughts),
        )


def _reasoning(message: Any) -> str:
    """A message's or delta's hidden reasoning: ``reasoning_content`` (vLLM, DeepSeek) or ``reasoning``."""
    extra = getattr(message, "model_extra", None) or {}
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None)
        if value is None:
            value = extra.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _stop_reason(choice: Any) -> str | int | None:
    # vLLM's extra field; pydantic keeps unknown fields in model_extra.
    value = getattr(choice, "stop_reason", None)
    if value is None:
        value = (getattr(choice, "model_extra", None) or {}).get("stop_reason")
    return value if isinstance(value, (str, int)) else None


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    prompt = getattr(usage, "prompt_tokens", 0) or 0
    completion = getattr(usage, "completion_tokens", 0) or 0
    total = getattr(usage, "total_tokens", 0) or prompt + completion
    details = getattr(usage, "completion_tokens_details", None)
    reasoning = getattr(details, "reasoning_tokens", 0) or 0
    return Usage(prompt, completion, total, reasoning)


def _call_name(call: Any) -> str:
    function = getattr(call, "function", None) or getattr(call, "custom", None)
    return getattr(function, "name", "") or ""


def _call_arguments(call: Any) -> str:
    function = getattr(call, "function", None)
    if function is not None:
        return function.arguments or ""
    return getattr(getattr(call, "custom", None), "input", "") or ""
