"""What every protocol shares: ``Protocol`` (the base), ``Step`` (what one reply means), ``Feedback``.

Pure values and the base class's contract; the three protocols are
``deepanalyze.py``, ``tags.py`` (with ``TagProtocol``, the two tag protocols'
parser) and ``tools.py``. ``join_problems`` words a reply's problems as one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ...model.chat import ModelReply
from ...model.messages import AssistantMessage, ChatMessage, ContentPart
from ...records import Run
from ...result import RebuildReport
from ..languages import PYTHON, Language
from ..run.history import resume_context
from .codestream import CodeStream
from .images import image_parts
from .prompts import PromptContext

__all__ = ["Feedback", "Protocol", "Step", "join_problems"]


@dataclass(frozen=True)
class Feedback:
    """One execution's result as the model sees it: text and base64 PNGs (vision only).

    ``files`` is a line naming the files the code wrote, ``note`` one saying
    what of the reply was not used; ``with_files`` is the text with both. The
    ``deepanalyze`` protocol sends the raw output alone, as DeepAnalyze does.
    """

    text: str
    images: tuple[str, ...] = ()
    files: str = ""
    note: str = ""

    @property
    def with_files(self) -> str:
        return self.text + self.files + self.note


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


@dataclass(frozen=True)
class ProtocolSettings:
    """What a run asks of its protocol. A ``kernel_agent.protocols`` entry point is a callable that takes
    these and returns a ``Protocol``; it ignores what it has no use for, and raises ``ConfigError`` for
    what it cannot do. ``max_new_tokens`` None: the protocol's own default."""

    vision: bool = False
    data_format: str = "files"
    vllm_extras: bool = True
    max_new_tokens: int | None = None
    language: Language = PYTHON


class Protocol:
    """Base of the three protocols (not ``typing.Protocol``). Instances are frozen values."""

    name: ClassVar[str]
    vision: bool = False
    language: Language = PYTHON  # the kernel's: the words, fences and tool name the model is shown

    def request_options(self) -> dict[str, Any]:
        """Extra request options (``stop``, ``tools``) this protocol needs."""
        return {}

    def initial_messages(self, ctx: PromptContext) -> list[ChatMessage]:
        """The system prompt (if the protocol has one) and the first user message."""
        raise NotImplementedError

    def resume_messages(
        self, ctx: PromptContext, run: Run, question: str, report: RebuildReport | None = None
    ) -> list[ChatMessage]:
        """The conversation that continues ``run`` with ``question``: by default the opening messages of
        ``ctx`` (the run's task) and one user message telling what was done (code, output, reasoning,
        answers) then the question. ``report`` is what a rebuilt kernel restored (None: it kept its state)."""
        briefing = resume_context(run.rounds, question, report=report, fence=self.language.fence)
        return [*self.initial_messages(ctx), {"role": "user", "content": briefing}]

    def code_stream(self) -> CodeStream:
        """A fresh decoder of the code in a reply's tool-call pieces as they stream; the base's decodes
        none (the tag protocols' code streams inside their text)."""
        return CodeStream(None)

    def parse(self, reply: ModelReply) -> Step:
        """Turn a reply into a ``Step``. Never raises: trouble goes into ``Step.problem``."""
        raise NotImplementedError

    def assistant_message(self, reply: ModelReply, step: Step) -> AssistantMessage:
        """The history entry for ``reply`` (``step.reply_text``; tools add ``tool_calls``)."""
        # Some servers reject an assistant message with empty content.
        return {"role": "assistant", "content": step.reply_text or "(empty reply)"}

    def feedback_messages(self, step: Step, feedback: Feedback) -> list[ChatMessage]:
        """The messages that give the model the output of ``step.code``."""
        raise NotImplementedError

    def nudge_messages(self, step: Step) -> list[ChatMessage]:
        """The messages that answer a reply with neither code nor answer, restating the format."""
        raise NotImplementedError

    def _image_parts(self, feedback: Feedback) -> list[ContentPart]:
        return image_parts(feedback.images) if self.vision else []


def join_problems(problems: list[str]) -> str | None:
    return "; ".join(problems) or None
