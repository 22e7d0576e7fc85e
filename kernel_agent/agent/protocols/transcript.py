"""The tag transcript people read: ``transcript``.

DeepAnalyze shows its user the whole exchange as one text: each reply with
its ``<Code>`` closed, then the code's output wrapped in
``<Execute>...</Execute>``, ending with the ``<Answer>``. The model itself
never gets the wrapper (its ``execute`` messages carry the raw output, see
``DeepAnalyzeProtocol``); this module rebuilds the human form from a ``Run``.
Pure: a run in, text out.
"""

from __future__ import annotations

from ...model.chat import ModelReply
from ...records import Run
from .deepanalyze import DeepAnalyzeProtocol
from .prompts import execute_block

__all__ = ["transcript"]


def transcript(run: Run, *, max_chars: int = 6000) -> str:
    """The run as DeepAnalyze's tagged transcript; each output bounded to about ``max_chars``. Raises nothing."""
    protocol = DeepAnalyzeProtocol()
    parts = []
    for rnd in run.rounds:
        # The stored reply is what the server sent; a <Code> its stop consumed is closed again.
        parts.append(protocol.parse(ModelReply(rnd.reply, stop_reason="</Code>")).reply_text.strip())
        if rnd.result is not None:
            parts.append(execute_block(rnd.result.to_llm_text(max_chars=max_chars)))
    return "\n".join(parts) + "\n"
