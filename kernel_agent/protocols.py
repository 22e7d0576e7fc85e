"""The three conversation protocols: task -> messages, reply -> ``Step``, result -> messages.

Pure: no network, no kernel, no file I/O (Pillow only re-encodes PNG bytes in memory)::

    deepanalyze  DeepAnalyze-8B's own tags, stop=["</Code>"], no system prompt;
                 output goes back as {"role": "execute", "content": "<Execute>...</Execute>"}
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
"""

from __future__ import annotations

import base64
import binascii
import copy
import io
import json
import re
import textwrap
from dataclasses import dataclass
from typing import Any, ClassVar

from .chat import ModelReply
from .errors import ConfigError

__all__ = [
    "EXECUTE_PYTHON_TOOL",
    "PROTOCOL_NAMES",
    "DeepAnalyzeProtocol",
    "Feedback",
    "PromptContext",
    "Protocol",
    "Step",
    "TagsProtocol",
    "ToolsProtocol",
    "downscale_png",
    "get_protocol",
]

PROTOCOL_NAMES = ("deepanalyze", "tags", "tools")
MAX_IMAGE_SIDE = 768
MAX_IMAGES = 4  # per execution; more would crowd the context for little gain

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
class PromptContext:
    """What the model is told about its environment.

    ``data_summary`` is markdown about the data files; ``packages`` are
    ``"name version"`` strings; ``preloaded`` says what the setup cell defined.
    """

    task: str
    data_summary: str = ""
    packages: tuple[str, ...] = ()
    preloaded: str = ""


@dataclass(frozen=True)
class Feedback:
    """One execution's result as the model sees it: text and base64 PNGs (vision only)."""

    text: str
    images: tuple[str, ...] = ()


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


def get_protocol(name: str, *, vision: bool = False) -> Protocol:
    """The protocol called ``name`` (one of ``PROTOCOL_NAMES``).

    Raises ``ConfigError`` for an unknown name, or for ``vision`` with
    ``deepanalyze`` (DeepAnalyze-8B reads no images).
    """
    key = name.strip().lower()
    if key == "deepanalyze":
        if vision:
            raise ConfigError("the deepanalyze protocol cannot send images; use 'tags' or 'tools' for vision")
        return DeepAnalyzeProtocol()
    if key == "tags":
        return TagsProtocol(vision=vision)
    if key == "tools":
        return ToolsProtocol(vision=vision)
    raise ConfigError(f"unknown protocol {name!r}; choose one of: {', '.join(PROTOCOL_NAMES)}")


# -- tag protocols ----------------------------------------------------------

_TAG = re.compile(r"<(/?)(Analyze|Understand|Code|Execute|Answer|File|think)>")
_PROSE_TAGS = frozenset({"Analyze", "Understand", "File"})  # may be closed by the next opening tag
_TITLES = {"Analyze": "Analyze", "Understand": "Understand", "File": "Files", "think": "Thinking"}
_FENCE_LINE = re.compile(r"^[ \t]*```[^\n]*$", re.M)
_PYTHON_FENCE = re.compile(r"^[ \t]*```[ \t]*(?:python3?|py|ipython)[ \t]*$", re.M | re.I)
_CLOSING_FENCE = re.compile(r"^[ \t]*```[ \t]*$", re.M)
_INLINE_FENCE = re.compile(r"```(?:python3?|py)?(.*?)```", re.S)


@dataclass(frozen=True)
class _Block:
    tag: str | None  # None: text outside any tag
    body: str
    end: int  # offset just past the block (past its closing tag when closed)
    closed: bool = True


def _scan(text: str, *, implicit: bool) -> list[_Block]:
    """Split ``text`` into tagged blocks and loose text, without nesting.

    Inside a block only its own closing tag counts, so code may mention tags.
    With ``implicit``, an opening tag also ends an open prose block
    (``<Analyze>`` never closed before ``<Code>``).
    """
    blocks: list[_Block] = []
    pos = 0
    open_tag: str | None = None
    body_at = 0
    for match in _TAG.finditer(text):
        closing, tag = match.group(1) == "/", match.group(2)
        if open_tag is not None:
            if closing and tag == open_tag:
                blocks.append(_Block(open_tag, text[body_at : match.start()], match.end()))
                open_tag, pos = None, match.end()
                continue
            if closing or not (implicit and open_tag in _PROSE_TAGS):
                continue
            blocks.append(_Block(open_tag, text[body_at : match.start()], match.start()))
            pos = match.start()
        elif closing:
            continue  # a stray closing tag stays in the loose text
        if match.start() > pos:
            blocks.append(_Block(None, text[pos : match.start()], match.start()))
        open_tag, body_at = tag, match.end()
    if open_tag is not None:
        blocks.append(_Block(open_tag, text[body_at:], len(text), closed=False))
    elif pos < len(text):
        blocks.append(_Block(None, text[pos:], len(text)))
    return blocks


def _blocks(text: str) -> list[_Block]:
    blocks = _scan(text, implicit=False)
    if blocks and not blocks[-1].closed and blocks[-1].tag in _PROSE_TAGS:
        blocks = _scan(text, implicit=True)
    return blocks


def _render(blocks: list[_Block]) -> str:
    """Readable markdown for the prose blocks: ``**Analyze**`` headings, no raw tags."""
    parts = []
    for block in blocks:
        if block.tag is None:
            body = _TAG.sub("", block.body).strip()
        elif block.tag in _TITLES:
            # A tag mentioned in prose would vanish as HTML in a markdown cell: show it as code.
            body = _TAG.sub(r"`\g<0>`", block.body).strip()
            body = f"**{_TITLES[block.tag]}**\n\n{body}" if body else ""
        else:
            continue
        if body:
            parts.append(body)
    return "\n\n".join(parts)


def _extract_code(body: str) -> str:
    """The code in a ``<Code>`` body: every fenced block joined, else the bare text."""
    fences = list(_FENCE_LINE.finditer(body))
    if not fences:
        return textwrap.dedent(body).strip("\n").rstrip()
    pieces = []
    for i in range(0, len(fences), 2):
        start = fences[i].end() + 1
        stop = fences[i + 1].start() if i + 1 < len(fences) else len(body)
        pieces.append(textwrap.dedent(body[start:stop]).strip("\n").rstrip())
    code = "\n\n".join(piece for piece in pieces if piece)
    if not code:  # ```python print(1)``` on one line
        inline = _INLINE_FENCE.search(body)
        code = inline.group(1).strip() if inline else ""
    return code


def _close_code(kept: str, body: str, *, by_stop: bool) -> str:
    if by_stop:
        return kept + "</Code>"  # exactly what vLLM left out, as DeepAnalyze does
    suffix = "" if kept.endswith("\n") else "\n"
    if len(_FENCE_LINE.findall(body)) % 2:
        suffix += "```\n"
    return kept + suffix + "</Code>"


def _join(problems: list[str]) -> str | None:
    return "; ".join(problems) or None


@dataclass(frozen=True)
class _TagProtocol(Protocol):
    vision: bool = False
    requests_stop: ClassVar[bool] = False

    def parse(self, reply: ModelReply) -> Step:
        text = reply.text or ""
        if not text.strip():
            return Step(reply_text=text, reasoning="", code=None, answer=None, problem="empty reply")
        blocks = _blocks(text)
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
            by_stop = reply.stop_reason == "</Code>" or (
                self.requests_stop and reply.finish_reason == "stop" and reply.stop_reason is None
            )
            kept = _close_code(kept, first.body, by_stop=by_stop)
            if not by_stop:
                problems.append("unclosed <Code> repaired")
        code = _extract_code(first.body)
        if not code:
            problems.append("empty <Code> block")
        return Step(kept, _render(blocks[:index]), code or None, None, problem=_join(problems))

    def _answer(
        self, text: str, blocks: list[_Block], block: _Block, reply: ModelReply, problems: list[str]
    ) -> Step:
        if not block.closed:
            text = text + ("" if text.endswith("\n") else "\n") + "</Answer>"
            if reply.stop_reason != "</Answer>":
                problems.append("unclosed <Answer> repaired")
        answer = block.body.strip()
        if not answer:
            problems.append("empty <Answer> block")
        reasoning = _render([b for b in blocks if b is not block])
        return Step(text, reasoning, None, answer or None, problem=_join(problems))

    def _untagged(self, text: str, blocks: list[_Block], problems: list[str]) -> Step:
        # Lenient: a ```python block outside any tag is the code, as if it sat in <Code>.
        for index, loose in enumerate(blocks):
            opening = _PYTHON_FENCE.search(loose.body) if loose.tag is None else None
            if opening is not None:
                break
        else:
            problems.append("no <Code> or <Answer> tag")
            return Step(text, _render(blocks), None, None, problem=_join(problems))
        offset = loose.end - len(loose.body)
        start = offset + opening.start()
        closing = _CLOSING_FENCE.search(text, offset + opening.end())
        stop = closing.end() if closing is not None else len(text)
        fenced = text[start:stop] if closing is not None else text[start:].rstrip() + "\n```"
        problems.append("code outside <Code>")
        if text[stop:].strip():
            problems.append("text after the code dropped")
        reply_text = f"{text[:start]}<Code>\n{fenced.strip(chr(10))}\n</Code>"
        prose = _render(blocks[:index] + [_Block(None, text[offset:start], start)])
        code = _extract_code(fenced)
        return Step(reply_text, prose, code or None, None, problem=_join(problems))

    def _nudge_text(self, step: Step) -> str:
        return (
            f"Your last reply could not be used ({step.problem or 'no code and no answer'}). "
            "Reply with your next step: <Analyze>...</Analyze> and then exactly one <Code>...</Code> block "
            "to run, or <Answer>...</Answer> with the final answer."
        )


def _execute_block(text: str) -> str:
    return f"<Execute>\n{text.strip(chr(10)) or '[no output]'}\n</Execute>"


def _environment_lines(ctx: PromptContext, *, vision: bool) -> list[str]:
    lines = [
        "Your code runs in a persistent Jupyter (IPython) kernel: variables, imports and loaded data stay "
        "defined between rounds, so build on earlier results instead of reloading.",
        "The data files are in the current working directory.",
    ]
    if ctx.preloaded:
        lines.append(f"Already set up: {ctx.preloaded}")
    if ctx.packages:
        lines.append(f"Installed packages: {', '.join(ctx.packages)}.")
    lines.append(
        "Figures drawn with matplotlib (plt) are captured automatically when the code finishes; "
        + ("you will see them as images." if vision else "you only see a placeholder such as "
           "[image 1: png 640x480], so print the numbers you need.")
    )
    return lines


def _task_message(ctx: PromptContext, heading: str, environment: list[str] | None = None) -> dict[str, Any]:
    sections = [f"# {heading}\n{ctx.task.strip()}"]
    if environment:
        sections.append("# Environment\n" + "\n".join(f"- {line}" for line in environment))
    if ctx.data_summary.strip():
        sections.append(f"# Data\n{ctx.data_summary.strip()}")
    return {"role": "user", "content": "\n\n".join(sections)}


@dataclass(frozen=True)
class DeepAnalyzeProtocol(_TagProtocol):
    """DeepAnalyze-8B's native loop: no system prompt, stop on ``</Code>``, ``execute`` role."""

    name: ClassVar[str] = "deepanalyze"
    requests_stop: ClassVar[bool] = True

    def request_options(self) -> dict[str, Any]:
        return {"stop": ["</Code>"]}

    def initial_messages(self, ctx: PromptContext) -> list[dict[str, Any]]:
        # DeepAnalyze's own prompt shape: "# Instruction ... # Data ...", everything in one user turn.
        return [_task_message(ctx, "Instruction", _environment_lines(ctx, vision=False))]

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[dict[str, Any]]:
        return [{"role": "execute", "content": _execute_block(feedback.text)}]

    def nudge_messages(self, step: Step) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self._nudge_text(step)}]


_TAGS_SYSTEM = """\
You are a data analyst. You solve the task in rounds, running Python in a live Jupyter kernel.

Write each reply in this shape:
<Analyze>
What you know so far and what you will do next.
</Analyze>
<Code>
```python
# the code to run now
```
</Code>

Then stop. The code runs and its output comes back to you as <Execute>...</Execute>; never write \
<Execute> yourself. Use one <Code> block per reply. After reading the output, start your next reply with \
<Understand>...</Understand> if there is something to note.

When you can answer the task, reply with <Answer>...</Answer> instead of code: the final answer in \
markdown, with the key numbers.

Environment:
"""


@dataclass(frozen=True)
class TagsProtocol(_TagProtocol):
    """DeepAnalyze's tags for any chat model, taught by a system prompt; no ``stop`` option."""

    name: ClassVar[str] = "tags"

    def initial_messages(self, ctx: PromptContext) -> list[dict[str, Any]]:
        environment = "\n".join(f"- {line}" for line in _environment_lines(ctx, vision=self.vision))
        return [{"role": "system", "content": _TAGS_SYSTEM + environment}, _task_message(ctx, "Task")]

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[dict[str, Any]]:
        block = _execute_block(feedback.text)
        parts = _image_parts(feedback.images) if self.vision else []
        content: str | list[dict[str, Any]] = [{"type": "text", "text": block}, *parts] if parts else block
        return [{"role": "user", "content": content}]

    def nudge_messages(self, step: Step) -> list[dict[str, Any]]:
        return [{"role": "user", "content": self._nudge_text(step)}]


# -- tools --------------------------------------------------------------------

_TOOLS_SYSTEM = """\
You are a data analyst. You solve the task in rounds by calling the execute_python tool, which runs \
Python in a live Jupyter kernel and returns its output. Make one call per turn and read the output \
before the next. Say briefly what you are about to do before each call.

When you can answer the task, reply without calling the tool: the final answer in markdown, with the \
key numbers.

Environment:
"""

_NOT_RUN = "Not run: only one execute_python call runs per turn. Call it again if you still need it."


@dataclass(frozen=True)
class ToolsProtocol(Protocol):
    """OpenAI function calling with ``execute_python``; text without a call is the answer."""

    name: ClassVar[str] = "tools"
    vision: bool = False

    def request_options(self) -> dict[str, Any]:
        return {"tools": [copy.deepcopy(EXECUTE_PYTHON_TOOL)], "tool_choice": "auto"}

    def initial_messages(self, ctx: PromptContext) -> list[dict[str, Any]]:
        environment = "\n".join(f"- {line}" for line in _environment_lines(ctx, vision=self.vision))
        return [{"role": "system", "content": _TOOLS_SYSTEM + environment}, _task_message(ctx, "Task")]

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
            return [{"role": "user", "content": feedback.text}]
        messages = [{"role": "tool", "tool_call_id": step.tool_call_id, "content": feedback.text}]
        messages += _skipped(step)
        parts = _image_parts(feedback.images) if self.vision else []
        if parts:
            # Tool messages cannot carry images in the OpenAI API, so they follow as a user turn.
            intro = {"type": "text", "text": "The figures from the execute_python call above:"}
            messages.append({"role": "user", "content": [intro, *parts]})
        return messages

    def nudge_messages(self, step: Step) -> list[dict[str, Any]]:
        if step.tool_call_id is None:
            text = "Your last reply was empty. Call execute_python to run code, or reply with the final answer."
            return [{"role": "user", "content": text}]
        text = (
            f"Not run: {step.problem or 'no code'}. Call execute_python with JSON arguments "
            '{"code": "<python code>"}.'
        )
        return [{"role": "tool", "tool_call_id": step.tool_call_id, "content": text}, *_skipped(step)]


def _call_ids(reply: ModelReply) -> list[str]:
    # Some servers omit ids; the history needs one to pair each call with its tool message.
    return [call.id or f"call_{i}" for i, call in enumerate(reply.tool_calls)]


def _skipped(step: Step) -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": call_id, "content": _NOT_RUN} for call_id in step.skipped_tool_call_ids
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
    code = args["code"]
    code = _extract_code(code) if _FENCE_LINE.search(code) else textwrap.dedent(code).strip("\n").rstrip()
    return (code, None) if code else (None, "empty code")


# -- images -------------------------------------------------------------------


def downscale_png(data: bytes, max_side: int = MAX_IMAGE_SIDE) -> bytes:
    """PNG bytes at most ``max_side`` px on the long side (unchanged when already small).

    Raises ``ValueError`` when ``data`` is not a readable image.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            if max(image.size) <= max_side and image.format == "PNG":
                return data
            image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            out = io.BytesIO()
            image.save(out, format="PNG", optimize=True)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise ValueError(f"not a readable image: {exc}") from exc
    return out.getvalue()


def _image_parts(images: tuple[str, ...]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for number, b64 in enumerate(images[:MAX_IMAGES], start=1):
        try:
            small = downscale_png(base64.b64decode(b64, validate=False))
        except (ValueError, binascii.Error):
            parts.append({"type": "text", "text": f"[image {number} could not be decoded]"})
            continue
        url = "data:image/png;base64," + base64.b64encode(small).decode("ascii")
        parts.append({"type": "image_url", "image_url": {"url": url}})
    if len(images) > MAX_IMAGES:
        parts.append({"type": "text", "text": f"[{len(images) - MAX_IMAGES} more images not shown]"})
    return parts
