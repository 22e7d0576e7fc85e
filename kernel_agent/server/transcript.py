"""A run's events as DeepAnalyze's tagged transcript, piece by piece: ``TagWriter``.

DeepAnalyze's API answers with one text: each step's ``<Analyze>`` and
``<Code>``, the code's output in ``<Execute>``, then ``<Answer>``. With the
``deepanalyze`` and ``tags`` protocols the model's own streamed text already
has that form, so it passes through as it comes (a ``</Code>`` the stop
consumed is put back; an answer given without its tag gets one); with
``tools`` each round is written in that form when its code or answer is known. Execution output always comes as one
whole block.
A reply the agent rejected (no code and no answer) is followed by a ``[reply rejected: ...]`` line,
and one only partly used (a second ``<Code>`` block) by ``[about this reply: ...]`` before its output, so a
client never reads two replies glued together as one, or code that never ran as code that did.
Pure: event dicts in, text out.
"""

from __future__ import annotations

from typing import Any

from ..agent.protocols.prompts import execute_block

__all__ = ["TagWriter"]


class TagWriter:
    """Feed it a run's event dicts in order; each call returns the transcript text they add."""

    def __init__(self, protocol: str) -> None:
        self.raw = protocol in ("deepanalyze", "tags")  # the model writes the tags itself
        self.round_text = ""
        self.problem = ""  # what the agent said about this round's reply

    def feed(self, event: dict[str, Any]) -> str:
        """The transcript text ``event`` adds ("" for most). Raises nothing."""
        kind = event.get("event")
        if kind == "round_started":
            self.round_text, self.problem = "", ""
        elif kind == "notice" and event.get("round") is not None:
            self.problem = str(event.get("message", "")).split(": ", 1)[-1]
        elif kind == "text_delta":
            self.round_text += event["text"]
            return event["text"] if self.raw else ""
        elif kind == "code_ready":
            return self._code(event)
        elif kind == "execution_finished":
            return "\n" + execute_block(event["result"].get("text") or event["result"].get("stdout") or "") + "\n"
        elif kind == "answer":
            if self.raw:
                return "" if "<Answer>" in self.round_text else f"\n<Answer>\n{event['answer'].strip()}\n</Answer>\n"
            answer = event["answer"].strip()
            analysis = "" if self.round_text.strip() == answer else self._analysis()
            return analysis + f"<Answer>\n{answer}\n</Answer>\n"
        elif kind == "round_finished" and event["round"]["status"] == "no-code":
            why = event["round"].get("problem") or self.problem or "no code and no answer"
            return ("" if self.raw else self._analysis()) + f"\n[reply rejected: {why}]\n"
        elif kind == "error":
            return f"\n[error: {event['message']}]\n"
        return ""

    def _code(self, event: dict[str, Any]) -> str:
        if self.raw:
            tail = self.round_text[self.round_text.rfind("<Code>") :]
            closing = "" if "</Code>" in tail else "</Code>"
            return closing + (f"\n[about this reply: {self.problem}]\n" if self.problem else "")
        return self._analysis(event.get("reasoning", "")) + f"<Code>\n```python\n{event['code'].strip()}\n```\n</Code>"

    def _analysis(self, fallback: str = "") -> str:
        text = (self.round_text or fallback).strip()
        return f"<Analyze>\n{text}\n</Analyze>\n" if text else ""
