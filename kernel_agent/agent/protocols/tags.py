"""DeepAnalyze's tags in a chat: ``TagProtocol`` (the parser both tag protocols share) and ``TagsProtocol``.

``TagsProtocol`` teaches the tags to any chat model with a system prompt and
sends no ``stop``: text after the first ``</Code>`` is dropped, and output
goes back as a user message in an ``<Execute>`` block. A bare ```` ```python ````
fence outside any tag is accepted as the code. Pure; parsing is linear.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...model.chat import ModelReply
from ...model.messages import ChatMessage, ContentPart
from ..languages import PYTHON, Language
from .base import Feedback, Protocol, ProtocolSettings, Step
from .base import join_problems as _join
from .prompts import PromptContext, execute_block, opening_messages, tags_nudge, tags_system
from .tagparse import CLOSING_FENCE, Block, close_code, closed, extract_code, parse_blocks, render_prose

__all__ = ["CODE_STOP_TOKEN_ID", "TagProtocol", "TagsProtocol"]

# DeepAnalyze's token id that ends a <Code> block (vLLM reports it as the stop reason).
CODE_STOP_TOKEN_ID = 151676


@dataclass(frozen=True)
class TagProtocol(Protocol):
    """Base of the two tag protocols: one reply is ``<Analyze>`` prose, then one ``<Code>`` or an ``<Answer>``."""

    vision: bool = False
    language: Language = PYTHON
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
        if "<Code>" in dropped:
            problems.append(
                "a second <Code> block was not run (one <Code> block runs per reply: send the next "
                "one after reading this output)"
            )
        elif dropped.strip():
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

    def _answer(self, text: str, blocks: list[Block], block: Block, reply: ModelReply, problems: list[str]) -> Step:
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
        # Lenient: a ```python (```r, ...) block outside any tag is the code, as if it sat in <Code>.
        fence = self.language.fence_line
        for index, loose in enumerate(blocks):  # noqa: B007 - index is read after the loop: the blocks before the code
            opening = fence.search(loose.body) if loose.tag is None else None
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

    def nudge_messages(self, step: Step) -> list[ChatMessage]:
        return [{"role": "user", "content": tags_nudge(step.problem)}]


@dataclass(frozen=True)
class TagsProtocol(TagProtocol):
    """DeepAnalyze's tags for any chat model, taught by a system prompt; no ``stop`` option."""

    name: ClassVar[str] = "tags"

    def initial_messages(self, ctx: PromptContext) -> list[ChatMessage]:
        return opening_messages(ctx, system=tags_system(self.language), vision=self.vision, language=self.language)

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[ChatMessage]:
        block = execute_block(feedback.with_files)
        parts = self._image_parts(feedback)
        content: str | list[ContentPart] = [{"type": "text", "text": block}, *parts] if parts else block
        return [{"role": "user", "content": content}]


def tags_protocol(settings: ProtocolSettings) -> TagsProtocol:
    """The ``tags`` entry point of ``kernel_agent.protocols``."""
    return TagsProtocol(vision=settings.vision, language=settings.language)
