"""Output while a request runs: ``OutputChunk``, ``OutputCallback`` and ``PartialOutput`` (the throttle).

Owns what a caller of ``execute(..., on_output=...)`` sees before the result
arrives: the stream text and the figures that came since the previous chunk,
bounded, at most one chunk per interval, so a chatty cell cannot flood the
caller. It never changes the result (``OutputCollector`` builds that) and
it knows no sockets: the engine feeds it the request's iopub messages and
the time. A callback that raises is logged and execution goes on.
``OutputTail`` is the small accumulator front ends use to show "the last
few KB so far".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .outputs import resolve_carriage_returns

__all__ = ["CHUNK_INTERVAL_S", "CHUNK_MAX_CHARS", "OutputCallback", "OutputChunk", "OutputTail", "PartialOutput"]

log = logging.getLogger(__name__)

CHUNK_INTERVAL_S = 0.5  # at most one chunk per this many seconds (the first output goes at once)
CHUNK_MAX_CHARS = 16_384  # text per chunk; more since the previous chunk keeps its tail


@dataclass(frozen=True)
class OutputChunk:
    """What one running execution printed since its previous chunk.

    ``text`` is the stdout and stderr text in arrival order (raw: carriage
    returns unresolved), its tail when more came than a chunk holds;
    ``skipped_chars`` counts what arrived but is not in ``text``. ``figures``
    counts images shown since the previous chunk. ``elapsed_s`` is the time
    since the request was sent.
    """

    text: str
    elapsed_s: float
    skipped_chars: int = 0
    figures: int = 0


OutputCallback = Callable[[OutputChunk], None]
"""Called on the session's event loop with each chunk; it must not block (queue or store the chunk)."""


class PartialOutput:
    """Gathers one request's output between chunks and hands chunks to ``callback``, throttled.

    ``feed`` takes iopub messages already known to belong to the request;
    ``tick`` sends what is pending once the interval has passed (the engine calls
    it while it waits, so output is not held back by a silent kernel); ``flush``
    sends the rest when the request ends.
    """

    def __init__(
        self,
        callback: OutputCallback,
        started: float,
        *,
        interval_s: float = CHUNK_INTERVAL_S,
        max_chars: int = CHUNK_MAX_CHARS,
    ) -> None:
        self.callback = callback
        self.started = started
        self.interval_s = interval_s
        self.max_chars = max_chars
        self._text: list[str] = []
        self._chars = 0  # arrived since the last chunk
        self._held = 0  # of those, still in ``_text``
        self._figures = 0
        self._last_sent: float | None = None
        self._failures = 0

    def feed(self, msg: dict[str, Any], now: float) -> None:
        """Take one of the request's iopub messages (others' are the caller's to filter)."""
        kind = msg.get("msg_type")
        content = msg.get("content", {})
        if kind == "stream":
            self._add_text(content.get("text", ""))
        elif kind in ("display_data", "execute_result") and any(
            mime.startswith("image/") for mime in content.get("data", {})
        ):
            self._figures += 1
        self.tick(now)

    def tick(self, now: float) -> None:
        """Send what is pending if the interval since the last chunk has passed."""
        if self._pending and (self._last_sent is None or now - self._last_sent >= self.interval_s):
            self._send(now)

    def flush(self, now: float) -> None:
        """Send whatever is pending, interval or not (the request has ended)."""
        if self._pending:
            self._send(now)

    @property
    def _pending(self) -> bool:
        return bool(self._chars or self._figures)

    def _add_text(self, text: str) -> None:
        self._text.append(text)
        self._chars += len(text)
        self._held += len(text)
        if self._held > 2 * self.max_chars:  # keep memory bounded between chunks: only the tail is sent
            self._text = ["".join(self._text)[-self.max_chars :]]
            self._held = self.max_chars

    def _send(self, now: float) -> None:
        text = "".join(self._text)[-self.max_chars :]
        chunk = OutputChunk(text, round(now - self.started, 3), self._chars - len(text), self._figures)
        self._text, self._chars, self._held, self._figures = [], 0, 0, 0
        self._last_sent = now
        try:
            self.callback(chunk)
        except Exception:
            # The caller's display failing must not cost the execution; say so once, then quietly.
            self._failures += 1
            level = logging.WARNING if self._failures == 1 else logging.DEBUG
            log.log(level, "the on_output callback raised; execution goes on", exc_info=True)


class OutputTail:
    """The last ``max_chars`` of an execution's output so far, as a terminal shows it, and its figures.

    Feed it chunks (it is an ``OutputCallback``); ``text`` resolves carriage
    returns (progress bars) and says when the start was cut.
    """

    def __init__(self, max_chars: int = 2000) -> None:
        self.max_chars = max_chars
        self.figures = 0
        self.chunks = 0
        self._raw = ""
        self._cut = False

    def __call__(self, chunk: OutputChunk) -> None:
        self.chunks += 1
        self.figures += chunk.figures
        self._cut = self._cut or chunk.skipped_chars > 0
        raw = self._raw + chunk.text
        # Raw text is kept 4x the shown size: progress-bar lines shrink when carriage returns resolve.
        keep = 4 * self.max_chars
        if len(raw) > keep:
            self._cut = True
            raw = raw[-keep:]
        self._raw = raw

    @property
    def text(self) -> str:
        """The tail, with a leading ``…`` when earlier output is not shown."""
        shown = resolve_carriage_returns(self._raw)
        cut = self._cut or len(shown) > self.max_chars
        shown = shown[-self.max_chars :]
        return ("…" + shown) if cut and shown else shown
