"""The tag transcript people read: ``transcript``.

DeepAnalyze shows its user the whole exchange as one text: each reply with
its ``<Code>`` closed, then the code's output wrapped in
``<Execute>...</Execute>``, ending with the ``<Answer>``. The model itself
never gets the wrapper (its ``execute`` messages carry the raw output, see
``DeepAnalyzeProtocol``); this module rebuilds the human form from a ``Run``.
Pure: a run in, text out.
"""

from __future__ import annotations

from ...records import Run
from .deepanalyze import round_transcript

__all__ = ["transcript"]


def transcript(run: Run, *, max_chars: int = 6000) -> str:
    """The run as DeepAnalyze's tagged transcript; each output bounded to about ``max_chars``. Raises nothing."""
    # The stored reply is what the server sent; a <Code> its stop consumed is closed again.
    return "\n".join(round_transcript(rnd, max_chars) for rnd in run.rounds) + "\n"
