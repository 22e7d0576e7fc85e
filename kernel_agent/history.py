"""What the agent remembers across rounds: the stuck guard and the resume briefing.

Pure functions of ``Round`` values: ``StuckGuard`` notices a model going
round in circles; ``resume_context`` tells a model what an earlier run did.
"""

from __future__ import annotations

from collections.abc import Sequence

from .result import clip_middle
from .run import Round

__all__ = ["StuckGuard", "resume_context"]

_RESUME_CHARS = 24_000


class StuckGuard:
    """Stops a run when the same failing code, or the same reply, comes ``limit`` times in a row."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reason = ""
        self._counts: dict[tuple[str, str], int] = {}

    def add(self, round_: Round) -> bool:
        """Record a finished round; True when the run is stuck."""
        keys = {("the same reply", " ".join(round_.reply.split()))}
        if round_.result is not None and round_.result.status != "ok" and round_.code:
            keys.add(("the same failing code", round_.code.strip()))
        self._counts = {key: self._counts.get(key, 0) + 1 for key in keys}
        for (what, _), count in self._counts.items():
            if count >= self.limit:
                self.reason = f"stopped: {what} {count} times in a row"
                return True
        return False


def resume_context(rounds: Sequence[Round], task: str, *, failed: int = 0) -> str:
    """The message that brings a model up to date before a follow-up question."""
    parts = ["# Earlier in this session", "You already worked on this data in the same live kernel:"]
    for round_ in rounds:
        if round_.code is None:
            if round_.answer:
                parts.append(f"## Your earlier answer\n{clip_middle(round_.answer, 3000)}")
            continue
        output = round_.result.to_llm_text(max_chars=1500) if round_.result else "[no result recorded]\n"
        parts.append(f"## Round {round_.index} ({round_.status})\n```python\n{round_.code}\n```\nOutput:\n{output}")
    restored = "The kernel state was restored by re-running the setup cell and every successful cell"
    restored += f"; {failed} of them failed on re-run, so some variables may be missing." if failed else "."
    body = clip_middle("\n\n".join(parts), _RESUME_CHARS, tail_share=0.7)
    return f"{body}\n\n{restored}\n\n# New question\n{task}"
