"""The record of an agent run: ``Run``, ``Round``, ``Usage``, ``Artifact``, ``RunInfo``; ``now``, its times.

Pure values. The agent builds them round by round (``dataclasses.replace``);
the notebook exporter, the CLI and the magic only read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from .result import Artifact, ExecutionResult

__all__ = [
    "PYTHON3_KERNELSPEC",
    "STOP_WORDS",
    "Artifact",
    "Round",
    "Run",
    "RunInfo",
    "StopReason",
    "Turn",
    "Usage",
    "now",
]

# What a notebook's ``kernelspec`` says for a plain Python kernel: it opens and replays in any Jupyter.
PYTHON3_KERNELSPEC: dict[str, str] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
StopReason = Literal["answer", "max_rounds", "stuck", "llm_error", "cancelled", "disk_quota"]
# How every front end says why a run stopped (the CLI, the web page through /v1/info).
STOP_WORDS: dict[str, str] = {
    "answer": "answer reached",
    "max_rounds": "stopped at the maximum number of rounds",
    "stuck": "stopped: the model was going round in circles",
    "llm_error": "stopped: the model endpoint failed",
    "cancelled": "cancelled",
    "disk_quota": "stopped: the workspace went over its disk quota",
}


@dataclass(frozen=True)
class Usage:
    """Token counts as the server reported them (zeros when it did not).

    ``reasoning_tokens`` is the part of ``completion_tokens`` a reasoning
    model spent thinking (``completion_tokens_details.reasoning_tokens``).
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    reasoning_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        out = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.reasoning_tokens:
            out["reasoning_tokens"] = self.reasoning_tokens
        return out


@dataclass(frozen=True)
class Round:
    """One model reply and, when it held code, the execution of that code.

    ``reply`` is the raw model text (tags and all); ``reasoning`` is the
    readable markdown made from it; ``code`` is exactly what ran (None when
    the reply held no code); ``answer`` is set on the round that ended the run.
    ``reasoning_content`` is a reasoning model's hidden thinking for this
    reply: shown to people, never sent back to the model.
    """

    index: int
    reply: str
    reasoning: str = ""
    code: str | None = None
    result: ExecutionResult | None = None
    answer: str | None = None
    artifacts: tuple[Artifact, ...] = ()
    usage: Usage = Usage()
    model_s: float = 0.0
    exec_s: float = 0.0
    started_at: str = ""
    problem: str | None = None  # protocol trouble in the reply (no tags, unbalanced, empty)
    reasoning_content: str = ""

    @property
    def status(self) -> str:
        """``ok``/``error``/``timeout``/``died`` for executed rounds, else ``answer`` or ``no-code``."""
        if self.result is not None:
            return self.result.status
        return "answer" if self.answer is not None else "no-code"


@dataclass(frozen=True)
class RecordedSource:
    """A live data source as a run records it: its ``name`` (what ``sql(source=...)`` and a replay name) and
    ``kind`` (``postgresql``); never where it is or who connects."""

    name: str
    kind: str = ""


@dataclass(frozen=True)
class RunInfo:
    """Who and what produced a run: goes into the notebook's metadata.

    ``endpoint`` is the host of the model's base URL, never the key.
    ``setup_code`` is the first cell: what the kernel ran before round 1.
    ``confinement`` is the kernel's confinement in force, in words (``Limits.describe``), and how the
    kernel started (``LocalProvider.describe_confinement``: forked from a warmed template, or cold).
    """

    task: str
    model: str = ""
    protocol: str = ""
    endpoint: str = ""
    data_files: tuple[str, ...] = ()
    workspace: str = ""
    setup_code: str = ""
    scripted: bool = False
    started_at: str = ""
    confinement: str = ""
    question: str = ""  # this turn's own question when it is a follow-up (``task`` then holds them all)
    language_info: dict[str, object] = field(default_factory=dict, compare=False)
    kernelspec: dict[str, str] = field(default_factory=dict, compare=False)  # the notebook's: where it opens
    sources: tuple[RecordedSource, ...] = ()  # the live data sources, by name and kind

    @property
    def language(self) -> str:
        """The kernel's language, lower case (``python``, ``r``), as its ``language_info`` says."""
        return str(self.language_info.get("name") or self.kernelspec.get("language") or "python").lower()


@dataclass(frozen=True)
class Turn:
    """One question and what answered it: a run is an append-only list of turns.

    The first turn is the run's task; each ``resume`` appends one. Rounds
    ``first_round``..``last_round`` (inclusive) belong to it; ``model``,
    ``protocol`` and ``endpoint`` (a host, never a key) are what this turn used.
    """

    task: str
    first_round: int = 1
    last_round: int = 0
    answer: str | None = None
    stop_reason: StopReason | None = None
    error: str | None = None
    model: str = ""
    protocol: str = ""
    endpoint: str = ""
    started_at: str = ""
    finished_at: str = ""


@dataclass(frozen=True)
class Run:
    """A whole run: its rounds, how it ended, and where its notebook is.

    ``turns`` holds the earlier, finished turns of a resumed run (empty for a
    run of one question); the current turn is described by ``info`` and the
    run's own ``answer``/``stop_reason``: ``all_turns()`` gives them all.
    """

    info: RunInfo
    rounds: tuple[Round, ...] = ()
    answer: str | None = None
    stop_reason: StopReason | None = None
    error: str | None = None
    usage: Usage = Usage()
    notebook_path: Path | None = None
    finished_at: str = ""
    setup_result: ExecutionResult | None = None
    turns: tuple[Turn, ...] = ()

    @property
    def task(self) -> str:
        return self.info.task

    def current_turn(self) -> Turn:
        """The turn in progress (or last finished): its question, rounds, answer and provenance."""
        info = self.info
        first = self.turns[-1].last_round + 1 if self.turns else 1
        last = self.rounds[-1].index if self.rounds else first - 1
        return Turn(
            task=info.question or info.task if self.turns else info.task,
            first_round=first,
            last_round=last,
            answer=self.answer,
            stop_reason=self.stop_reason,
            error=self.error,
            model=info.model,
            protocol=info.protocol,
            endpoint=info.endpoint,
            started_at=info.started_at,
            finished_at=self.finished_at,
        )

    def all_turns(self) -> tuple[Turn, ...]:
        """Every turn in order, the current one last."""
        return (*self.turns, self.current_turn())

    def __repr__(self) -> str:
        return f"<Run [{self.stop_reason}] {len(self.rounds)} rounds answer={self.answer is not None}>"


def now() -> str:
    """The time now as the records write it: UTC, ISO 8601, to the second."""
    return datetime.now(UTC).isoformat(timespec="seconds")
