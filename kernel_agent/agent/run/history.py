"""What the agent remembers across rounds: the stuck guard, the resume briefing, old feedback.

Pure functions of ``Round`` values and message lists: ``StuckGuard`` notices
a model going round in circles; ``resume_context`` tells a model what an
earlier run did; ``clip_old_feedback`` keeps a long conversation inside the
model's context by shortening execution results the model has moved past.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from ...model.messages import ChatMessage, ContentPart
from ...records import Round
from ...result import RebuildReport, clip_middle

__all__ = ["StuckGuard", "clip_old_feedback", "resume_context"]

_RESUME_CHARS = 24_000


class StuckGuard:
    """Stops a run when the same failing code, or the same reply, comes ``limit`` times in a row."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reason = ""
        self._counts: dict[tuple[str, str], int] = {}

    def add(self, round_: Round) -> bool:
        """Record a finished round; True when the run is stuck."""
        # A reply is its text and its code: a tool call's words ("Running it.") repeat while its code moves on.
        keys = [("the same reply", " ".join(round_.reply.split()) + "\0" + (round_.code or "").strip())]
        if round_.result is not None and round_.result.status != "ok" and round_.code:
            keys.insert(0, ("the same failing code", round_.code.strip()))  # the more telling reason, said first
        self._counts = {key: self._counts.get(key, 0) + 1 for key in keys}
        for (what, _), count in self._counts.items():
            if count >= self.limit:
                self.reason = f"stopped: {what} {count} times in a row"
                return True
        return False


def resume_context(
    rounds: Sequence[Round], task: str, *, report: RebuildReport | None = None, fence: str = "python"
) -> str:
    """The message that brings a model up to date before a follow-up question.

    ``report`` is what re-running the earlier cells restored (None: the kernel kept its state);
    ``fence`` is the code fence of the kernel's language.
    """
    parts = ["# Earlier in this session", "You already worked on this data in the same live kernel:"]
    for round_ in rounds:
        thought = f"Your reasoning: {clip_middle(round_.reasoning.strip(), 800)}\n" if round_.reasoning.strip() else ""
        if round_.code is None:
            if round_.answer:
                parts.append(f"## Your earlier answer\n{clip_middle(round_.answer, 3000)}")
            continue
        output = round_.result.to_llm_text(max_chars=1500) if round_.result else "[no result recorded]\n"
        parts.append(
            f"## Round {round_.index} ({round_.status})\n{thought}```{fence}\n{round_.code}\n```\nOutput:\n{output}"
        )
    restored = (
        "The kernel still holds the state of the rounds above."
        if report is None
        else f"The kernel was started afresh and its state rebuilt: {report.describe()}."
    )
    body = clip_middle("\n\n".join(parts), _RESUME_CHARS, tail_share=0.7)
    return f"{body}\n\n{restored}\n\n# New question\n{task}"


def clip_old_feedback(
    messages: list[ChatMessage], feedback: Sequence[Sequence[int]], *, keep: int, clip_chars: int
) -> list[ChatMessage]:
    """The messages to send. ``feedback`` lists, per executed round in order, the
    indices of its feedback messages; those of all but the latest ``keep`` rounds are
    clipped to about ``clip_chars`` (head and tail) and lose their images. Everything
    else is sent as it is; ``messages`` itself is not changed."""
    old = {index for group in feedback[: max(len(feedback) - keep, 0)] for index in group}
    if not old:
        return messages
    return [_clipped(m, clip_chars) if i in old else m for i, m in enumerate(messages)]


def _clipped(message: ChatMessage, limit: int) -> ChatMessage:
    content = message.get("content")
    if isinstance(content, str):
        return cast(ChatMessage, {**message, "content": clip_middle(content, limit, tail_share=0.5)})
    if isinstance(content, list):
        parts: list[ContentPart] = [
            {"type": "text", "text": clip_middle(part["text"], limit, tail_share=0.5)}
            if part["type"] == "text"
            else {"type": "text", "text": "[image from an earlier round omitted]"}
            for part in content
        ]
        return cast(ChatMessage, {**message, "content": parts})
    return message
