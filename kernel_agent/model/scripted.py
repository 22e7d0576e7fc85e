"""``ScriptedChatModel``: a ``ChatModel`` that plays fixed replies, streamed in chunks.

Owns replaying a script (the bundled demo, tests of the agent loop) the way a
server would send it: in order, chunk by chunk, honouring ``stop`` strings.
No network and no SDK; usage is unknown (``None``). It never raises: once the
script is exhausted every call streams ``END_OF_SCRIPT``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from ..errors import ConfigError
from .chat import ModelReply, Piece, TextPiece
from .messages import ChatMessage

__all__ = ["END_OF_SCRIPT", "ScriptedChatModel"]

END_OF_SCRIPT = (
    "<Answer>\nThe scripted demo has no more replies: its script ended here. "
    "Configure a real model to continue the analysis.\n</Answer>"
)


class ScriptedChatModel:
    """Streams ``replies`` one per ``stream()`` call, in order, then ``END_OF_SCRIPT``.

    Each reply comes in ``TextPiece``s of ``chunk_size`` characters;
    ``delay`` seconds pass between chunks (0 by default) so a demo can look
    live. A ``stop`` option cuts a reply before its first stop string, as an
    OpenAI-compatible server would, and names it in ``stop_reason`` as vLLM does.
    """

    scripted = True

    def __init__(
        self, replies: Iterable[str], *, name: str = "scripted-demo", chunk_size: int = 16, delay: float = 0.0
    ) -> None:
        """Raises ``ConfigError`` for a ``chunk_size`` below 1 or a negative ``delay``."""
        if chunk_size < 1:
            raise ConfigError(f"chunk_size must be at least 1, not {chunk_size}")
        if delay < 0:
            raise ConfigError(f"delay must not be negative, not {delay}")
        self.name = name
        self.chunk_size = chunk_size
        self.delay = delay
        self._replies = tuple(replies)
        self._played = 0

    @property
    def remaining(self) -> int:
        """How many scripted replies have not been played yet."""
        return len(self._replies) - self._played

    async def stream(
        self, messages: Sequence[ChatMessage], options: dict[str, Any] | None = None
    ) -> AsyncIterator[Piece]:
        """The next scripted reply in ``TextPiece``s, then its ``ModelReply`` (``messages`` are not read; it
        never retries; its replies are text, so no tool-call pieces). The reply is taken when the stream is
        first iterated. Raises nothing."""
        if self._played < len(self._replies):
            text = self._replies[self._played]
            self._played += 1
        else:
            text = END_OF_SCRIPT
        text, stop_reason = _apply_stop(text, (options or {}).get("stop"))
        for start in range(0, len(text), self.chunk_size):
            yield TextPiece(text[start : start + self.chunk_size])
            await asyncio.sleep(self.delay)  # also lets a cancellation in between chunks
        yield ModelReply(text=text, finish_reason="stop", stop_reason=stop_reason, usage=None)

    async def aclose(self) -> None:
        """Nothing to release; safe to call any number of times."""

    def __repr__(self) -> str:
        return f"<ScriptedChatModel {self.name} [{self._played}/{len(self._replies)} replies played]>"


def _apply_stop(text: str, stop: str | Iterable[str] | None) -> tuple[str, str | None]:
    """Cut ``text`` before the earliest stop string; return it and that string (or None)."""
    if not stop:
        return text, None
    found = [(text.find(s), s) for s in ([stop] if isinstance(stop, str) else stop) if s and s in text]
    if not found:
        return text, None
    index, string = min(found)
    return text[:index], string
