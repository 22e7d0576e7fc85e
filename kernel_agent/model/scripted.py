"""``ScriptedChatModel``: a ``ChatModel`` that plays fixed replies, streamed in chunks.

Owns replaying a script (the bundled demo, tests of the agent loop) the way a
server would send it: in order, chunk by chunk, honouring ``stop`` strings.
No network and no SDK; usage is unknown (``None``). It never raises: once the
script is exhausted every call returns ``END_OF_SCRIPT``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigError
from .chat import DeltaCallback, ModelReply, RetryCallback, ToolDeltaCallback

__all__ = ["END_OF_SCRIPT", "ScriptedChatModel"]

END_OF_SCRIPT = (
    "<Answer>\nThe scripted demo has no more replies: its script ended here. "
    "Configure a real model to continue the analysis.\n</Answer>"
)


class ScriptedChatModel:
    """Returns ``replies`` one per ``complete()`` call, in order, then ``END_OF_SCRIPT``.

    ``on_delta`` receives each reply in chunks of ``chunk_size`` characters;
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

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        options: dict[str, Any] | None = None,
        on_delta: DeltaCallback | None = None,
        on_retry: RetryCallback | None = None,
        on_reasoning: DeltaCallback | None = None,
        on_tool_delta: ToolDeltaCallback | None = None,
    ) -> ModelReply:
        """The next scripted reply (``messages`` are not read; it never retries; its replies are text, so
        ``on_tool_delta`` is never called). Raises nothing."""
        if self._played < len(self._replies):
            text = self._replies[self._played]
            self._played += 1
        else:
            text = END_OF_SCRIPT
        text, stop_reason = _apply_stop(text, (options or {}).get("stop"))
        for start in range(0, len(text), self.chunk_size):
            if on_delta is not None:
                on_delta(text[start : start + self.chunk_size])
            await asyncio.sleep(self.delay)  # also lets a cancellation in between chunks
        return ModelReply(text=text, finish_reason="stop", stop_reason=stop_reason, usage=None)

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
