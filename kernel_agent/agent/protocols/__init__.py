"""The three conversation protocols: task -> messages, reply -> ``Step``, result -> messages.

Pure: no network, no kernel, no file I/O (Pillow only re-encodes PNG bytes in memory)::

    deepanalyze  DeepAnalyze-8B's own tags and wire format, as its API server sends
                 them: no system prompt, "# Instruction ... # Data" + "File N:" blocks,
                 stop=["</Code>"] plus vLLM's add_generation_prompt/stop_token_ids/
                 max_new_tokens; output goes back raw as {"role": "execute", "content": ...}
                 (the <Execute> wrapper is only for people: ``transcript.py``)
    tags         the same tags taught to any chat model by a system prompt, no ``stop``
                 (text after the first </Code> is dropped); output goes back as a user message
    tools        OpenAI function calling with one tool, ``execute_python(code)``;
                 a reply without a tool call is the answer

A run with any of them::

    protocol = get_protocol("tags")
    messages = protocol.initial_messages(PromptContext(task="...", data_summary="..."))
    while True:
        reply = await model.complete(messages, options=protocol.request_options())
        step = protocol.parse(reply)                      # never raises
        messages.append(protocol.assistant_message(reply, step))
        if step.answer is not None:
            break
        if step.code is None:                             # step.problem says why
            messages += protocol.nudge_messages(step)
            continue
        result = await session.execute(step.code)
        messages += protocol.feedback_messages(step, Feedback(result.to_llm_text(), tuple(result.images)))

For ``tools`` every tool call of a reply is answered (the first by
``feedback_messages`` or ``nudge_messages``, the others as "not run"), so the
history stays valid for the API. Parsing is linear in the reply's length.

Owns the protocols: the message shapes they send, what a reply means
(``Step``) and the ``execute_python`` tool. Does not own the wording the model
reads (``prompts.py``, which also defines ``PromptContext``), scanning tagged
text (``tagparse.py``) or shrinking figures (``images.py``); the names callers
need from those are re-exported here.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from ...errors import ConfigError
from ...model.chat import ModelReply
from .images import MAX_IMAGE_SIDE, MAX_IMAGES, downscale_png, image_parts
from .prompts import (
    DATA_FORMATS,
    NOT_RUN,
    TAGS_SYSTEM,
    TOOLS_EMPTY_NUDGE,
    TOOLS_SYSTEM,
    DataFormat,
    FileInfo,
    PromptContext,
    deepanalyze_task,
    execute_block,
    opening_messages,
    tags_nudge,
    tools_nudge,
)
from .tagparse import (
    CLOSING_FENCE,
    PYTHON_FENCE,
    Block,
    close_code,
    closed,
    extract_code,
    parse_blocks,
    render_prose,
)

__all__ = [
    "CODE_STOP_TOKEN_ID",
    "DATA_FORMATS",
    "DEEPANALYZE_MAX_NEW_TOKENS",
    "DEEPANALYZE_STOP_TOKEN_IDS",
    "EXECUTE_PYTHON_TOOL",
    "MAX_IMAGES",
    "MAX_IMAGE_SIDE",
    "PROTOCOL_NAMES",
    "DataFormat",
    "DeepAnalyzeProtocol",
    "Feedback",
    "FileInfo",
    "PromptContext",
    "Protocol",
    "Step",
    "TagsProtocol",
    "ToolsProtocol",
    "downscale_png",
    "get_protocol",
]

PROTOCOL_NAMES = ("deepanalyze", "tags", "tools")

# DeepAnalyze's API/config.py: vLLM stops on these token ids (the first ends a <Code> block, the
# second is Qwen's <|im_end|>), and asks for up to MAX_NEW_TOKENS.
DEEPANALYZE_STOP_TOKEN_IDS = (151676, 151645)
CODE_STOP_TOKEN_ID = DEEPANALYZE_STOP_TOKEN_IDS[0]
DEEPANALYZE_MAX_NEW_TOKENS = 32768

EXECUTE_PYTHON_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "execute_python",
        "description": (
            "Run Python code in a persistent Jupyter (IPython) kernel and return its output: printed text, "
            "the value of the last expression, tracebacks, and placeholders for captured figures. "
            "Variables, imports and loaded data stay defined between calls."
        ),
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python code to run."}},
            "required": ["code"],
            "additionalProperties": False,
        },
    },
}


@dataclass(frozen=True)
class Feedback:
    """One execution's result as the model sees it: text and base64 PNGs (vision only).

    ``files`` is a line naming the files the code wrote; ``with_files`` is the
    text with it. The ``deepanalyze`` protocol sends the raw output alone, as
    DeepAnalyze does.
    """

    text: str
    images: tuple[str, ...] = ()
    files: str = ""

    @property
    def with_files(self) -> str:
        return self.text + self.files


@dataclass(frozen=True)
class Step:
    """What to do with one reply.

    ``reply_text`` is the normalised reply that goes into the history (``</Code>``
    restored, hallucinated output dropped). ``reasoning`` is readable markdown
    without raw tags. At most one of ``code`` and ``answer`` is set; with
    neither, ``problem`` says why and ``nudge_messages`` answers it. ``problem``
    also names repairs made to a usable reply. For tools, ``tool_call_id`` is
    the call that runs and ``skipped_tool_call_ids`` the ones that do not.
    """

    reply_text: str
    reasoning: str
    code: str | None
    answer: str | None
    tool_call_id: str | None = None
    problem: str | None = None
    skipped_tool_call_ids: tuple[str, ...] = ()


class Protocol:
    """Base of the three protocols (not ``typing.Protocol``). Instances are frozen values."""

    name: ClassVar[str]
    vision: bool = False

    def request_options(self) -> dict[str, Any]:
        """Extra ``complete()`` options (``stop``, ``tools``) this protocol needs."""
        return {}

    def initial_messages(self, ctx: PromptContext) -> list[dict[str, Any]]:
        """The system prompt (if the protocol has one) and the first user message."""
        raise NotImplementedError

    def parse(self, reply: ModelReply) -> Step:
        """Turn a reply into a ``Step``. Never raises: trouble goes into ``Step.problem``."""
        raise NotImplementedError

    def assistant_message(self, reply: ModelReply, step: Step) -> dict[str, Any]:
        """The history entry for ``reply`` (``step.reply_text``; tools add ``tool_calls``)."""
        # Some servers reject an assistant message with empty content.
        return {"role": "assistant", "content": step.reply_text or "(empty reply)"}

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[dict[str, Any]]:
        """The messages that give the model the output of ``step.code``."""
        raise NotImplementedError

    def nudge_messages(self, step: Step) -> list[dict[str, Any]]:
        """The messages that answer a reply with neither code nor answer, restating the format."""
        raise NotImplementedError

    def _image_parts(self, feedback: Feedback) -> list[dict[str, Any]]:
        return image_parts(feedback.images) if self.vision else []


def get_protocol(
    name: str, *, vision: bool = False, data_format: DataFormat = "files", vllm_extras: bool = True,
    max_new_tokens: int = DEEPANALYZE_MAX_NEW_TOKENS,
) -> Protocol:
    """The protocol called ``name`` (one of ``PROTOCOL_NAMES``).

    ``data_format``, ``vllm_extras`` and ``max_new_tokens`` configure
    ``deepanalyze`` (see ``DeepAnalyzeProtocol``); the others ignore them.
    Raises ``ConfigError`` for an unknown name or data format, or for
    ``vision`` with ``deepanalyze`` (DeepAnalyze-8B reads no images).
    """
    key = name.strip().lower()
    if key == "deepanalyze":
        if vision:
            raise ConfigError("the deepanalyze protocol cannot send images; use 'tags' or 'tools' for vision")
        if data_format not in DATA_FORMATS:
            raise ConfigError(f"unknown data format {data_format!r}; choose one of: {', '.join(DATA_FORMATS)}")
        return DeepAnalyzeProtocol(data_format=data_format, vllm_extras=vllm_extras, max_new_tokens=max_new_tokens)
    if key == "tags":
        return TagsProtocol(vision=vision)
    if key == "tools":
        return ToolsProtocol(vision=vision)
    raise ConfigError(f"unknown protocol {name!r}; choose one of: {', '.join(PROTOCOL_NAMES)}")


def _join(problems: list[str]) -> str | None:
    return "; ".join(problems) or None


# -- tag protocols ----------------------------------------------------------


@dataclass(frozen=True)
class _TagProtocol(Protocol):
    vision: bool = False
    requests_stop: ClassVar[bool] = False

    def parse(self, reply: ModelReply) -> Step:
        text = reply.text or ""
        if not text.strip():
            return Step(reply_text=text, reasoning="", code=None, answer=None, problem="empty reply")
        blocks = parse_blocks(text)
        problems = ["reply cut off at the token limit"] if reply.finish_reason == "length" else []
        index = next((i for i, b in enumerate(blocks) if b.tag in ("Code", "Answer")), None)
        if index is None:
            return self._untagged(text, blocks, problems)
        first = blocks[index]
        if first.tag == "Answer":
            return self._answer(text, blocks, first, reply, problems)
        kept, dropped = text[: first.end], text[first.end :]
        if dropped.strip():
            problems.append("text after </Code> dropped")
        if not first.closed:
            by_stop = reply.stop_reason in ("</Code>", CODE_STOP_TOKEN_ID) or (
                self.requests_stop and reply.finish_reason == "stop" and reply.stop_reason is None
            )
            kept = close_code(kept, first.body, by_stop=by_stop)
            if not by_stop:
                problems.append("unclosed <Code> repaired")
        code = extract_code(first.body)
        if not code:
            problems.append("empty <Code> block")
        return Step(kept, render_prose(blocks[:index]), code or None, None, problem=_join(problems))

    def _answer(
        self, text: str, blocks: list[Block], block: Block, reply: ModelReply, problems: list[str]
    ) -> Step:
        if not block.closed:
            text = closed(text, "</Answer>")
            if reply.stop_reason != "</Answer>":
                problems.append("unclosed <Answer> repaired")
        answer = block.body.strip()
        if not answer:
            problems.append("empty <Answer> block")
        reasoning = render_prose([b for b in blocks if b is not block])
        return Step(text, reasoning, None, answer or None, problem=_join(problems))

    def _untagged(self, text: str, blocks: list[Block], problems: list[str]) -> Step:
        # Lenient: a ```python block outside any tag is the code, as if it sat in <Code>.
        for index, loose in enumerate(blocks):
            opening = PYTHON_FENCE.search(loose.body) if loose.tag is None else None
            if opening is not None:
                break
        else:
            problems.append("no <Code> or <Answer> tag")
            return Step(text, render_prose(blocks), None, None, problem=_join(problems))
        offset = loose.end - len(loose.body)
        start = offset + opening.start()
        closing = CLOSING_FENCE.search(text, offset + opening.end())
        stop = closing.end() if closing is not None else len(text)
        fenced = text[start:stop] if closing is not None else text[start:].rstrip() + "\n```"
        problems.append("code outside <Code>")
        if text[stop:].strip():
            problems.append("text after the code dropped")
        reply_text = f"{text[:start]}<Code>\n{fenced.strip(chr(10))}\n</Code>"
        prose = render_prose(blocks[:index] + [Block(None, text[offset:start], start)])
        code = extract_code(fenced)
        return Step(reply_text, prose, code or None, None, problem=_join(problems))

    def nudge_messages(self, step: Step) -> list[dict[str, Any]]:
        return [{"role": "user", "content": tags_nudge(step.problem)}]


@dataclass(frozen=True)
class DeepAnalyzeProtocol(_TagProtocol):
    """DeepAnalyze-8B's native loop, on the wire exactly as DeepAnalyze's API server sends it.

    No system prompt; one user message ``# Instruction`` + ``# Data`` with a
    ``File N:`` JSON block per file (``data_format="rich"`` adds our summary
    under each block); ``stop=["</Code>"]`` and, with ``vllm_extras``, vLLM's
    ``add_generation_prompt: false``, ``stop_token_ids`` and
    ``max_new_tokens``; execution output goes back raw in an ``execute``
    message, without the ``<Execute>`` wrapper people see.
    """

    name: ClassVar[str] = "deepanalyze"
    requests_stop: ClassVar[bool] = True
    data_format: DataFormat = "files"
    vllm_extras: bool = True
    max_new_tokens: int = DEEPANALYZE_MAX_NEW_TOKENS

    def request_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"stop": ["</Code>"]}
        if self.vllm_extras:
            options["extra_body"] = {
                "add_generation_prompt": False,
                "stop_token_ids": list(DEEPANALYZE_STOP_TOKEN_IDS),
                "max_new_tokens": self.max_new_tokens,
            }
        return options

    def initial_messages(self, ctx: PromptContext) -> list[dict[str, Any]]:
        return [{"role": "user", "content": deepanalyze_task(ctx, self.data_format)}]

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[dict[str, Any]]:
        return [{"role": "execute", "content": feedback.text}]


@dataclass(frozen=True)
class TagsProtocol(_TagProtocol):
    """DeepAnalyze's tags for any chat model, taught by a system prompt; no ``stop`` option."""

    name: ClassVar[str] = "tags"

    def initial_messages(self, ctx: PromptContext) -> list[dict[str, Any]]:
        return opening_messages(ctx, system=TAGS_SYSTEM, vision=self.vision)

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[dict[str, Any]]:
        block = execute_block(feedback.with_files)
        parts = self._image_parts(feedback)
        content: str | list[dict[str, Any]] = [{"type": "text", "text": block}, *parts] if parts else block
        return [{"role": "user", "content": content}]


# -- tools --------------------------------------------------------------------


@dataclass(frozen=True)
class ToolsProtocol(Protocol):
    """OpenAI function calling with ``execute_python``; text without a call is the answer."""

    name: ClassVar[str] = "tools"
    vision: bool = False

    def request_options(self) -> dict[str, Any]:
        return {"tools": [copy.deepcopy(EXECUTE_PYTHON_TOOL)], "tool_choice": "auto"}

    def initial_messages(self, ctx: PromptContext) -> list[dict[str, Any]]:
        return opening_messages(ctx, system=TOOLS_SYSTEM, vision=self.vision)

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
        code, trouble = _tool_code(first.name, first.arguments)
        if trouble:
            problems.append(trouble)
        if len(ids) > 1:
            problems.append(f"{len(ids) - 1} more tool call(s) not run (one per turn)")
        return Step(text, text.strip(), code, None, ids[0], _join(problems), tuple(ids[1:]))

    def assistant_message(self, reply: ModelReply, step: Step) -> dict[str, Any]:
        if not reply.tool_calls:
            return super().assistant_message(reply, step)
        calls = [
            {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            for call_id, call in zip(_call_ids(reply), reply.tool_calls)
        ]
        return {"role": "assistant", "content": step.reply_text or None, "tool_calls": calls}

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[dict[str, Any]]:
        if step.tool_call_id is None:
            return [{"role": "user", "content": feedback.with_files}]
        messages = [{"role": "tool", "tool_call_id": step.tool_call_id, "content": feedback.with_files}]
        messages += _skipped(step)
        parts = self._image_parts(feedback)
        if parts:
            # Tool messages cannot carry images in the OpenAI API, so they follow as a user turn.
            intro = {"type": "text", "text": "The figures from the execute_python call above:"}
            messages.append({"role": "user", "content": [intro, *parts]})
        return messages

    def nudge_messages(self, step: Step) -> list[dict[str, Any]]:
        if step.tool_call_id is None:
            return [{"role": "user", "content": TOOLS_EMPTY_NUDGE}]
        text = tools_nudge(step.problem)
        return [{"role": "tool", "tool_call_id": step.tool_call_id, "content": text}, *_skipped(step)]


def _call_ids(reply: ModelReply) -> list[str]:
    # Some servers omit ids; the history needs one to pair each call with its tool message.
    return [call.id or f"call_{i}" for i, call in enumerate(reply.tool_calls)]


def _skipped(step: Step) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": call_id, "content": NOT_RUN} for call_id in step.skipped_tool_call_ids
    ]


def _tool_code(name: str, arguments: str) -> tuple[str | None, str | None]:
    """The code of an ``execute_python`` call, or None and what was wrong."""
    if name != "execute_python":
        return None, f"unknown tool {name!r}"
    try:
        args = json.loads(arguments or "")
    except ValueError as exc:
        return None, f"malformed tool arguments ({getattr(exc, 'msg', exc)})"
    if not isinstance(args, dict) or not isinstance(args.get("code"), str):
        return None, 'malformed tool arguments (expected {"code": "..."})'
    code = extract_code(args["code"])  # fenced or bare, as in a <Code> block
    return (code, None) if code else (None, "empty code")
