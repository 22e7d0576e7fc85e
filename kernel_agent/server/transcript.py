"""A run's events as DeepAnalyze's tagged transcript, piece by piece: ``TagWriter``.

DeepAnalyze's API answers with one text: each step's ``<Analyze>`` and
``<Code>``, the code's output in ``<Execute>``, then ``<Answer>``. With the
``deepanalyze`` and ``tags`` protocols the model's own streamed text already
has that form, so it passes through as it comes (a ``</Code>`` the stop
consumed is put back; an answer given without its tag gets one). With
``tools`` the reply's text streams into an ``<Analyze>`` block and the tool
call's code (``code_delta``) into a ``<Code>`` block as they come; a reply
that turns out to be the answer (no tool call: known only at its end) then
comes whole in ``<Answer>``. Execution output always comes as one whole block.
A reply that broke off and starts over (``text_reset``) is marked so.
A reply the agent rejected (no code and no answer) is followed by a ``[reply rejected: ...]`` line,
and one only partly used (a second ``<Code>`` block) by ``[about this reply: ...]`` before its output, so a
client never reads two replies glued together as one, or code that never ran as code that did.
Pure: event dicts in, text out.
"""

from __future__ import annotations

from typing import Any, Literal

from ..agent.protocols.prompts import execute_block

__all__ = ["TagWriter"]


class TagWriter:
    """Feed it a run's event dicts in order; each call returns the transcript text they add."""

    def __init__(self, protocol: str) -> None:
        self.raw = protocol in ("deepanalyze", "tags")  # the model writes the tags itself
        self.round_text = ""
        self.problem = ""  # what the agent said about this round's reply
        self.open: Literal["", "analyze", "code"] = ""  # the block written open so far (``tools``)
        self.code_end = "\n"  # the last character of the code streamed into the open <Code> block

    def feed(self, event: dict[str, Any]) -> str:
        """The transcript text ``event`` adds ("" for most). Raises nothing."""
        kind = event.get("event")
        if kind == "round_started":
            self.round_text, self.problem = "", ""
        elif kind == "notice" and event.get("round") is not None:
            self.problem = str(event.get("message", "")).split(": ", 1)[-1]
        elif kind == "text_delta":
            return self._text(event["text"])
        elif kind == "code_delta":
            return "" if self.raw else self._code_piece(event["text"])
        elif kind == "text_reset":
            written = self.round_text.strip() or self.open
            self.round_text = ""
            return self._close() + "\n[the model's reply broke off; it starts over]\n" if written else ""
        elif kind == "code_ready":
            return self._code(event)
        elif kind == "execution_finished":
            return "\n" + execute_block(event["result"].get("text") or event["result"].get("stdout") or "") + "\n"
        elif kind == "answer":
            return self._answer(event["answer"].strip())
        elif kind == "round_finished" and event["round"]["status"] == "no-code":
            why = event["round"].get("problem") or self.problem or "no code and no answer"
            before = self._close() if self.open else "" if self.raw else self._analysis()
            return before + f"\n[reply rejected: {why}]\n"
        elif kind == "error":
            return self._close() + f"\n[error: {event['message']}]\n"
        return ""

    def _text(self, text: str) -> str:
        """A piece of the model's text: as it comes for the tag protocols; in an ``<Analyze>`` block opened
        at its first visible character for ``tools`` (servers send the text before the call; text after the
        code started is left out)."""
        self.round_text += text
        if self.raw:
            return text
        if self.open == "analyze":
            return text
        if self.open or not self.round_text.strip():
            return ""
        self.open = "analyze"
        return "<Analyze>\n" + self.round_text.lstrip()

    def _code_piece(self, text: str) -> str:
        """A piece of the tool call's code: the analysis closed and ``<Code>`` opened at its first."""
        out = ""
        if self.open != "code":
            out = self._close() + "<Code>\n```python\n"
            self.open = "code"
        self.code_end = text[-1:] or self.code_end
        return out + text

    def _close(self) -> str:
        """The end of the block written open, if any."""
        opened, self.open = self.open, ""
        if opened == "analyze":
            return "\n</Analyze>\n"
        if opened == "code":
            return ("" if self.code_end == "\n" else "\n") + "```\n</Code>"
        return ""

    def _code(self, event: dict[str, Any]) -> str:
        if self.raw:
            tail = self.round_text[self.round_text.rfind("<Code>") :]
            closing = "" if "</Code>" in tail else "</Code>"
            return closing + (f"\n[about this reply: {self.problem}]\n" if self.problem else "")
        if self.open == "code":
            return self._close()
        before = self._close() if self.open else self._analysis(event.get("reasoning", ""))
        return before + f"<Code>\n```python\n{event['code'].strip()}\n```\n</Code>"

    def _answer(self, answer: str) -> str:
        """The answer's block. With ``tools`` the answer's text may have streamed already as analysis (that a
        reply is the answer is known only at its end): it then comes again, whole, in ``<Answer>``."""
        if self.raw:
            return "" if "<Answer>" in self.round_text else f"\n<Answer>\n{answer}\n</Answer>\n"
        if self.open:
            return self._close() + f"<Answer>\n{answer}\n</Answer>\n"
        analysis = "" if self.round_text.strip() == answer else self._analysis()
        return analysis + f"<Answer>\n{answer}\n</Answer>\n"

    def _analysis(self, fallback: str = "") -> str:
        text = (self.round_text or fallback).strip()
        return f"<Analyze>\n{text}\n</Analyze>\n" if text else ""
