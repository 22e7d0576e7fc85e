"""How a run reads in a JupyterLab chat: ``ChatReply`` turns the event stream into one markdown message.

Pure: events in, the message body out; no chat, no I/O (``persona.py`` sends it). The body is
redrawn whole on each change, so the streamed reply can be replaced by its reasoning once the round's
code is known. Per round: a status line, the reasoning (a reasoning model's hidden thinking folded
in ``<details>``), what the code did; then the answer in markdown. The code and its outputs are the
notebook's to show: the chat names the cells; the run's last few figures (PNG, as data URIs, each size-capped)
follow the answer. Never shows the endpoint or the key (no event carries them).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import events
from ..agent.protocols.tagparse import parse_blocks, render_prose
from ..events import Event
from ..result import ExecutionResult
from ..safe.html import markdown_source

__all__ = ["ChatReply"]

_OUTPUT_SHOWN = 600  # characters of a round's printed output quoted in the chat
_FIGURES_SHOWN = 4  # the run's last figures shown with its answer
_FIGURE_CHARS = 400_000  # a larger figure (base64 characters, ~300 KB of PNG) is left to the notebook
_FIGURES_CHARS = 800_000  # all the figures of one message together (the chat file keeps every message)
_ANSWER_HEADING = re.compile(r"\A\s*#{1,6}\s*(final\s+)?answer\s*:?\s*#*\s*\n", re.IGNORECASE)


@dataclass
class _Round:
    index: int
    text: str = ""
    thinking: str = ""
    reasoning: str | None = None  # set once the round's reply is parsed
    status: str = "*asking the model…*"
    output: str = ""


@dataclass
class ChatReply:
    """The chat message of one run, built from its events (``feed``), read as ``body``."""

    notebook: str = ""  # the notebook the cells go into, as the user knows it
    kernel: str = "sandbox"  # where the code runs: "sandbox" (the agent's own kernel) or "notebook" (its own)
    preface: str = ""
    rounds: list[_Round] = field(default_factory=list)
    answer: str | None = None
    notes: list[str] = field(default_factory=list)
    ending: str = ""
    figures: list[tuple[int, str]] = field(default_factory=list)  # (round, base64 PNG), the last few kept
    figures_left: int = 0  # figures not shown here (too many, too large): the notebook has them

    def feed(self, event: Event) -> None:
        """Take one event of the run. Unknown kinds are ignored (a newer event vocabulary)."""
        handler = _FED.get(type(event))
        if handler is not None:
            handler(self, event)

    def stopped(self) -> None:
        """The user stopped the run from the chat."""
        if self.rounds and self.rounds[-1].status.startswith("*"):
            self.rounds[-1].status = "✗ stopped"
        self.ending = "**Stopped.** The round that was running is kept in the notebook, commented out."

    def failed(self, message: str) -> None:
        self.ending = f"**The run failed:** {_escape(message)}"

    @property
    def body(self) -> str:
        parts = [self.preface] if self.preface else []
        for rnd in self.rounds:
            parts.append(_round_text(rnd))
        parts.extend(f"> **note:** {_escape(note)}" for note in self.notes)
        if self.answer is not None:
            parts.append(f"### Answer\n\n{markdown_source(_ANSWER_HEADING.sub('', self.answer, count=1))}")
        if self.answer is not None or self.ending:
            parts.extend(self._figures())
        if self.ending:
            parts.append(self.ending)
        return "\n\n".join(parts) or "…"

    # ----------------------------------------------------------------- events
    def _on_run_started(self, event: events.RunStarted) -> None:
        where = f" in `{self.notebook}`" if self.notebook else ""
        scripted = " (scripted replies)" if event.scripted else ""
        if self.kernel == "notebook":
            self.preface = (
                f"**The code runs unconfined in your notebook's own kernel**{scripted}: it sees your "
                f"variables and can change them and your files. Each round becomes cells{where}."
            )
        else:
            self.preface = f"*Working in my own sandboxed kernel{scripted}; each round becomes cells{where}.*"

    def _on_round_started(self, event: events.RoundStarted) -> None:
        self.rounds.append(_Round(event.round))

    def _on_text_delta(self, event: events.TextDelta) -> None:
        self._round(event.round).text += event.text

    def _on_reasoning_delta(self, event: events.ReasoningDelta) -> None:
        self._round(event.round).thinking += event.text

    def _on_text_reset(self, event: events.TextReset) -> None:
        rnd = self._round(event.round)
        rnd.text, rnd.thinking = "", ""
        rnd.status = f"*the model request failed, retrying: {_escape(event.reason)}*"

    def _on_code_ready(self, event: events.CodeReady) -> None:
        self._round(event.round).reasoning = event.reasoning

    def _on_execution_started(self, event: events.ExecutionStarted) -> None:
        self._round(event.round).status = "*running…*"

    def _on_execution_output(self, event: events.ExecutionOutput) -> None:
        rnd = self._round(event.round)
        rnd.output = (rnd.output + event.text)[-_OUTPUT_SHOWN:]

    def _on_execution_finished(self, event: events.ExecutionFinished) -> None:
        rnd = self._round(event.round)
        rnd.status = _status(event.result)
        rnd.output = _printed(event.result)[-_OUTPUT_SHOWN:]
        for png in _pngs(event.result):
            if len(png) > _FIGURE_CHARS:
                self.figures_left += 1
            else:
                self.figures.append((rnd.index, png))
        while len(self.figures) > _FIGURES_SHOWN or sum(len(png) for _, png in self.figures) > _FIGURES_CHARS:
            self.figures_left += 1
            del self.figures[0]

    def _on_round_finished(self, event: events.RoundFinished) -> None:
        record = event.round
        rnd = self._round(record.index)
        rnd.reasoning = record.reasoning
        if record.code is None:
            rnd.status = "answer" if record.answer is not None else "no code"

    def _on_answer(self, event: events.AnswerReady) -> None:
        self.answer = event.answer

    def _on_notice(self, event: events.Notice) -> None:
        self.notes.append(event.message)

    def _on_error(self, event: events.RunError) -> None:
        self.notes.append(f"error: {event.message}")

    def _on_finished(self, event: events.RunFinished) -> None:
        run = event.run
        if run.answer is None and not self.ending:
            self.ending = f"**No answer:** the run stopped ({run.stop_reason})."

    def _figures(self) -> list[str]:
        """The run's figures as markdown images (data URIs: nothing is fetched), shown once the run has ended
        or answered, so the streaming redraws stay small; those left out are counted."""
        shown = [f"![Figure of round {index}](data:image/png;base64,{png})" for index, png in self.figures]
        if self.figures_left:
            more = "figure is" if self.figures_left == 1 else "figures are"
            shown.append(f"*{self.figures_left} more {more} in the notebook.*")
        return shown

    def _round(self, index: int) -> _Round:
        if not self.rounds or self.rounds[-1].index != index:
            self.rounds.append(_Round(index))
        return self.rounds[-1]


_FED: dict[type[Event], Callable[[ChatReply, Any], None]] = {  # what each event adds to the reply, by its class
    events.RunStarted: ChatReply._on_run_started,
    events.RoundStarted: ChatReply._on_round_started,
    events.TextDelta: ChatReply._on_text_delta,
    events.ReasoningDelta: ChatReply._on_reasoning_delta,
    events.TextReset: ChatReply._on_text_reset,
    events.CodeReady: ChatReply._on_code_ready,
    events.ExecutionStarted: ChatReply._on_execution_started,
    events.ExecutionOutput: ChatReply._on_execution_output,
    events.ExecutionFinished: ChatReply._on_execution_finished,
    events.RoundFinished: ChatReply._on_round_finished,
    events.AnswerReady: ChatReply._on_answer,
    events.Notice: ChatReply._on_notice,
    events.RunError: ChatReply._on_error,
    events.RunFinished: ChatReply._on_finished,
}


def _round_text(rnd: _Round) -> str:
    lines = [f"**Round {rnd.index}** · {rnd.status}" if rnd.status != "answer" else f"**Round {rnd.index}**"]
    thinking = rnd.thinking.strip()
    if thinking:
        lines.append(
            f"<details><summary>Model reasoning ({len(thinking):,} characters)</summary>\n\n"
            f"{_escape(thinking)}\n\n</details>"
        )
    # while it streams, the reply is read as its code will be: tagged prose as headings, no raw tag, no code
    text = rnd.reasoning if rnd.reasoning is not None else render_prose(parse_blocks(rnd.text))
    if text.strip() and rnd.status != "answer":
        lines.append(markdown_source(text.strip()))  # the model's markdown: its raw HTML and images inert
    if rnd.output.strip():
        lines.append("```text\n" + rnd.output.strip().replace("```", "'''") + "\n```")
    return "\n\n".join(lines)


def _status(result: ExecutionResult) -> str:
    timing = f"{result.duration_s:.1f} s"
    if result.ok:
        return f"✓ ok · {timing}"
    detail = f"✗ {result.status} · {timing}"
    if result.error is not None:
        detail += f" · `{_escape(result.error.ename)}: {_escape(result.error.evalue)}`"
    return detail


def _printed(result: ExecutionResult) -> str:
    """The round's printed text (figures and tables are in the notebook's cell)."""
    texts = []
    for output in result.outputs:
        if output.get("output_type") == "stream":
            value = output.get("text", "")
            texts.append("".join(value) if isinstance(value, list) else str(value))
    return "".join(texts)


def _pngs(result: ExecutionResult) -> list[str]:
    """The round's PNG figures, base64 as the kernel sent them (whitespace dropped)."""
    pngs = []
    for output in result.outputs:
        value = output.get("data", {}).get("image/png") if output.get("output_type") in _RICH else None
        if isinstance(value, list):
            value = "".join(value)
        if isinstance(value, str) and _BASE64.fullmatch(packed := "".join(value.split())):
            pngs.append(packed)  # the kernel's text: base64 only, so nothing else reaches the markdown
    return pngs


_RICH = frozenset({"display_data", "execute_result"})
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _escape(text: str) -> str:
    return html.escape(text, quote=False)
