"""The typed events of a run, as ``AsyncAgent.stream()`` yields them.

One stream serves every front end: the CLI renders it live, ``--json`` prints
``event.to_dict()`` per line, the magic turns it into cell outputs. Pure values; their JSON is
``shapes.event_dict``'s (the adapter the notebook's metadata is written with).

Front ends dispatch on an event's class: ``match event: case RunStarted(): ...`` where a few kinds
matter, a table keyed by class where a renderer draws every kind (``cli/render.py``'s ``_LIVE``).
``kind`` is an event's name on the wire only: ``to_dict()``'s ``"event"``, the service's stored runs
and server-sent events, the web page. ``answer``, ``error`` and ``finished`` break the
``*_started``/``*_finished`` pattern of the others, and are kept: the service's API clients, the
page and every stored run's events read them by these names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from .records import Artifact, Round, Run
from .result import ExecutionResult

__all__ = [
    "AnswerReady",
    "CodeDelta",
    "CodeReady",
    "Event",
    "ExecutionFinished",
    "ExecutionOutput",
    "ExecutionStarted",
    "NodeFinished",
    "NodeStarted",
    "NodeStatus",
    "Notice",
    "PlanEvent",
    "PlanFinished",
    "PlanReady",
    "ReasoningDelta",
    "RoundFinished",
    "RoundStarted",
    "RunError",
    "RunFinished",
    "RunStarted",
    "TextDelta",
    "TextReset",
]


class _EventBase:
    kind: str = "event"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: ``{"event": kind, ...fields}``, a record in it as its wire shape (``shapes.py``)."""
        return _encoder()(self)


@cache
def _encoder() -> Callable[[Any], dict[str, Any]]:
    from .shapes import event_dict  # pydantic, at the first event a front end sends as JSON

    return event_dict


@dataclass(frozen=True)
class RunStarted(_EventBase):
    """A run (or a continued run's turn) begins: the model and protocol (and why that protocol), the workspace, where
    the notebook goes, the confinement in force, and whether the replies are scripted.

    ``question`` is what this turn asks (a resumed run's follow-up; on a first turn the task itself);
    ``task`` is the run's task since its start (every turn's questions). ``workspace`` and ``notebook_path``
    are absolute."""

    task: str
    model: str
    protocol: str
    workspace: str
    notebook_path: str | None
    scripted: bool = False
    confinement: str = ""
    protocol_reason: str = ""  # why this protocol: "asked for", "the default", "the model … is DeepAnalyze's"
    question: str = ""  # this turn's own question (``task`` holds every turn's of a continued run)
    kind = "run_started"


@dataclass(frozen=True)
class RoundStarted(_EventBase):
    """A round begins: the model is asked (round ``round`` of at most ``max_rounds``)."""

    round: int
    max_rounds: int
    kind = "round_started"


@dataclass(frozen=True)
class TextDelta(_EventBase):
    """A piece of the model's reply, as it streams."""

    round: int
    text: str
    kind = "text_delta"


@dataclass(frozen=True)
class ReasoningDelta(_EventBase):
    """A piece of a reasoning model's hidden thinking (``reasoning_content``), as it streams."""

    round: int
    text: str
    kind = "reasoning_delta"


@dataclass(frozen=True)
class TextReset(_EventBase):
    """The model request failed and is being retried: the round's streamed text so far is void."""

    round: int
    reason: str
    kind = "text_reset"


@dataclass(frozen=True)
class CodeDelta(_EventBase):
    """A piece of the round's code as the model writes it, where the protocol sends code apart from the
    text (``tools``: the tool call's ``code`` argument, decoded as it streams). ``CodeReady`` follows with
    the whole code as it runs; with the tag protocols the code streams inside ``TextDelta``."""

    round: int
    text: str
    kind = "code_delta"


@dataclass(frozen=True)
class CodeReady(_EventBase):
    """The round's code, parsed from the reply, with the reasoning that came before it; it runs next."""

    round: int
    code: str
    reasoning: str = ""
    kind = "code_ready"


@dataclass(frozen=True)
class ExecutionStarted(_EventBase):
    """The round's code starts in the kernel; ``timeout`` is its limit in seconds (None: none)."""

    round: int
    timeout: float | None
    kind = "execution_started"


@dataclass(frozen=True)
class ExecutionOutput(_EventBase):
    """What the round's code printed since the previous such event, while it runs (throttled and
    bounded: ``kernel.partial.OutputChunk``). ``text`` is raw stdout/stderr text (carriage returns
    unresolved); the whole output still comes with ``ExecutionFinished``."""

    round: int
    text: str
    elapsed_s: float
    skipped_chars: int = 0
    figures: int = 0
    kind = "execution_output"


@dataclass(frozen=True)
class ExecutionFinished(_EventBase):
    """The round's code ended: its ``ExecutionResult`` (status, outputs, error) and the files it wrote."""

    round: int
    result: ExecutionResult
    artifacts: tuple[Artifact, ...] = ()
    kind = "execution_finished"


@dataclass(frozen=True)
class RoundFinished(_EventBase):
    """A round ended: its whole record (``Round``), as the notebook keeps it."""

    round: Round
    kind = "round_finished"


@dataclass(frozen=True)
class AnswerReady(_EventBase):
    """The model answered; the run ends after this round."""

    round: int
    answer: str
    kind = "answer"


@dataclass(frozen=True)
class Notice(_EventBase):
    """Something worth telling the user that is not an error: a retry, a repaired reply."""

    message: str
    round: int | None = None
    kind = "notice"


@dataclass(frozen=True)
class RunError(_EventBase):
    """A machinery failure that ends or threatens the run (model unreachable, ...)."""

    message: str
    error_type: str
    round: int | None = None
    kind = "error"


@dataclass(frozen=True)
class RunFinished(_EventBase):
    """The run ended (answered or not): its record, with the stop reason and the notebook's path. Always last."""

    run: Run
    kind = "finished"


NodeStatus = Literal["done", "failed", "skipped", "interrupted"]
"""How a plan node ended; ``interrupted``: cancelled mid-way (Ctrl-C, a closed stream), run again on resume."""


@dataclass(frozen=True)
class PlanReady(_EventBase):
    """Plan mode: the DAG to run. ``nodes`` are ``{"id", "title", "kind", "depends_on", "status", "attempts"}``
    in execution order; ``status`` is a ``NodeStatus`` for nodes the state file recorded on resume
    (``done``/``failed``/``skipped`` are kept; ``interrupted`` ones run again), else ``pending``, and
    ``attempts`` how many they took (0 for pending nodes)."""

    directions: tuple[str, ...]
    nodes: tuple[dict[str, Any], ...]
    scripted: bool = False  # the model's replies are played back from a file (the demo), not written
    kind = "plan_ready"


@dataclass(frozen=True)
class NodeStarted(_EventBase):
    """Plan mode: a node begins (``attempt`` 1), or a fix attempt after a failure (2, 3, ...)."""

    node_id: str
    title: str
    attempt: int = 1
    kind = "node_started"


@dataclass(frozen=True)
class NodeFinished(_EventBase):
    """Plan mode: a node ended ``done``, ``failed``, ``skipped`` or ``interrupted`` (stopped mid-way: its rounds
    so far recorded, run again on resume); ``reason`` says why not done, or that a code task was stopped by
    its round bound, ``max_task_rounds``, before the model said it was done."""

    node_id: str
    status: NodeStatus
    attempts: int
    figures: int
    reason: str = ""
    kind = "node_finished"


@dataclass(frozen=True)
class PlanFinished(_EventBase):
    """Plan mode: every node has a final status; ``counts`` maps status to how many. ``html`` is the
    notebook rendered as a page (nbconvert); ``answer`` the plan's findings, its text tasks' conclusions
    ("" when the model gave none)."""

    counts: dict[str, int]
    notebook: str
    report: str
    html: str = ""
    answer: str = ""
    kind = "plan_finished"


PlanEvent = PlanReady | NodeStarted | NodeFinished | Notice | RunError | PlanFinished


Event = (
    RunStarted
    | RoundStarted
    | TextDelta
    | ReasoningDelta
    | TextReset
    | CodeDelta
    | CodeReady
    | ExecutionStarted
    | ExecutionOutput
    | ExecutionFinished
    | RoundFinished
    | AnswerReady
    | Notice
    | RunError
    | RunFinished
)
