"""OpenAI function calling: ``ToolsProtocol`` and its one tool, ``execute_python(code)`` (``execute_r`` for R).

A reply without a tool call is the answer. Every tool call of a reply is
answered (the first by ``feedback_messages`` or ``nudge_messages``, the others
as "not run"), so the history stays valid for the API. Pure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from ...model.chat import ModelReply
from ...model.messages import AssistantMessage, ChatMessage, TextPart, ToolCallMessage, ToolMessage
from ..languages import PYTHON, Language
from .base import Feedback, Protocol, ProtocolSettings, Step
from .base import join_problems as _join
from .codestream import CodeStream
from .prompts import PromptContext, not_run, opening_messages, tools_empty_nudge, tools_nudge, tools_system
from .tagparse import extract_code

__all__ = ["EXECUTE_PYTHON_TOOL", "ToolsProtocol", "execute_tool"]


def execute_tool(language: Language = PYTHON) -> dict[str, Any]:
    """The one tool, for a kernel in ``language``: ``execute_python(code)``, ``execute_r(code)``, ..."""
    return {
        "type": "function",
        "function": {
            "name": language.tool,
            "description": (
                f"Run {language.name} code in {language.kernel_words} and return its output: printed text, "
                "the value of the last expression, tracebacks, and placeholders for captured figures. "
                "Variables, imports and loaded data stay defined between calls."
            ),
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string", "description": f"The {language.name} code to run."}},
                "required": ["code"],
                "additionalProperties": False,
            },
        },
    }


EXECUTE_PYTHON_TOOL: dict[str, Any] = execute_tool()


@dataclass(frozen=True)
class ToolsProtocol(Protocol):
    """OpenAI function calling with ``execute_python`` (its language's tool); text without a call is the answer."""

    name: ClassVar[str] = "tools"
    vision: bool = False
    language: Language = PYTHON

    def request_options(self) -> dict[str, Any]:
        return {"tools": [execute_tool(self.language)], "tool_choice": "auto"}

    def initial_messages(self, ctx: PromptContext) -> list[ChatMessage]:
        return opening_messages(ctx, system=tools_system(self.language), vision=self.vision, language=self.language)

    def code_stream(self) -> CodeStream:
        return CodeStream(self.language.tool)

    def parse(self, reply: ModelReply) -> Step:
        text = reply.text or ""
        problems = ["reply cut off at the token limit"] if reply.finish_reason == "length" else []
        if not reply.tool_calls:
            if not text.strip():
                problems.append("empty reply")
                return Step(text, "", None, None, problem=_join(problems))
            return Step(text, "", None, text.strip(), problem=_join(problems))
        ids = _call_ids(reply)
        first = reply.tool_calls[0]
        code, trouble = _tool_code(first.name, first.arguments, self.language.tool)
        if trouble:
            problems.append(trouble)
        if len(ids) > 1:
            problems.append(f"{len(ids) - 1} more tool call(s) not run (one per turn)")
        return Step(text, text.strip(), code, None, ids[0], _join(problems), tuple(ids[1:]))

    def assistant_message(self, reply: ModelReply, step: Step) -> AssistantMessage:
        if not reply.tool_calls:
            return super().assistant_message(reply, step)
        calls: list[ToolCallMessage] = [
            {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call_id, call in zip(_call_ids(reply), reply.tool_calls, strict=True)
        ]
        return {"role": "assistant", "content": step.reply_text or None, "tool_calls": calls}

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[ChatMessage]:
        if step.tool_call_id is None:
            return [{"role": "user", "content": feedback.with_files}]
        messages: list[ChatMessage] = [
            {"role": "tool", "tool_call_id": step.tool_call_id, "content": feedback.with_files}
        ]
        messages += _skipped(step, self.language.tool)
        parts = self._image_parts(feedback)
        if parts:
            # Tool messages cannot carry images in the OpenAI API, so they follow as a user turn.
            intro: TextPart = {"type": "text", "text": f"The figures from the {self.language.tool} call above:"}
            messages.append({"role": "user", "content": [intro, *parts]})
        return messages

    def nudge_messages(self, step: Step) -> list[ChatMessage]:
        if step.tool_call_id is None:
            return [{"role": "user", "content": tools_empty_nudge(self.language.tool)}]
        text = tools_nudge(step.problem, self.language)
        return [
            {"role": "tool", "tool_call_id": step.tool_call_id, "content": text},
            *_skipped(step, self.language.tool),
        ]


def _call_ids(reply: ModelReply) -> list[str]:
    # Some servers omit ids; the history needs one to pair each call with its tool message.
    return [call.id or f"call_{i}" for i, call in enumerate(reply.tool_calls)]


def _skipped(step: Step, tool: str) -> list[ToolMessage]:
    return [
        {"role": "tool", "tool_call_id": call_id, "content": not_run(tool)} for call_id in step.skipped_tool_call_ids
    ]


def _tool_code(name: str, arguments: str, tool: str = PYTHON.tool) -> tuple[str | None, str | None]:
    """The code of an ``execute_python`` (``tool``) call, or None and what was wrong."""
    if name != tool:
        return None, f"unknown tool {name!r}"
    try:
        args = json.loads(arguments or "")
    except ValueError as exc:
        return None, f"malformed tool arguments: invalid JSON ({exc})"  # the parser's message and position
    if not isinstance(args, dict) or not isinstance(args.get("code"), str):
        return None, 'malformed tool arguments (expected {"code": "..."})'
    code = extract_code(args["code"])  # fenced or bare, as in a <Code> block
    return (code, None) if code else (None, "empty code")


def tools_protocol(settings: ProtocolSettings) -> ToolsProtocol:
    """The ``tools`` entry point of ``kernel_agent.protocols``."""
    return ToolsProtocol(vision=settings.vision, language=settings.language)
