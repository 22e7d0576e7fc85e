"""Which kind of notebook a run's is, and the words it is shown with: ``kind_of``, ``notebook_kind``.

kernel-agent writes four kinds: an agent ``run``; a run continued with follow-up questions
(``resumed``: ``kernel-agent resume``, or a service thread's later turns, which are the same record:
one turn per question); a ``plan`` run (``plan_view.py`` reads its tasks); an ``mcp`` session (code an
MCP client ran, with no model of ours: the client's name is recorded where a run keeps its model, and
the session's closing line where a run keeps its answer). Any other notebook is ``foreign``. Every
reviewer (``show``, the HTML report) asks here instead of testing metadata fields itself; this reads
them through the metadata's schema (``metadata.py``). Pure.
"""

from __future__ import annotations

from typing import Any, Literal

from ..records import Run
from .metadata import PlanMetadata, RunMetadata, read_block

__all__ = ["MCP_PROTOCOL", "Kind", "first_turn_provenance", "kind_of", "notebook_kind", "step_word", "turn_word"]

Kind = Literal["run", "resumed", "plan", "mcp", "foreign"]

MCP_PROTOCOL = "mcp"  # what an MCP session records as its protocol (its ``model`` is the client's name)


def kind_of(run: Run) -> Kind:
    """The kind of a run read back (``load_run``): ``mcp``, ``resumed`` (more than one turn) or ``run``."""
    if run.info.protocol == MCP_PROTOCOL:
        return "mcp"
    return "resumed" if run.turns else "run"


def notebook_kind(metadata: Any) -> Kind:
    """The kind of a notebook from its metadata (a notebook's ``metadata``, read as data through its schema:
    any shape). A run's turns are those ``load_run`` reads back (a malformed one is dropped)."""
    plan = read_block(metadata, PlanMetadata)
    if plan is None:  # no block of ours (or not an object): no shape reads one
        return "foreign"
    if plan.plan is not None:
        return "plan"
    run = read_block(metadata, RunMetadata) or RunMetadata.read({})  # the same block: never the default
    if run.protocol == MCP_PROTOCOL:
        return "mcp"
    return "resumed" if len(run.turns) > 1 else "run"


def step_word(kind: Kind) -> str:
    """What one step is called: an MCP session's are the client's code executions, a plan's its tasks."""
    return {"mcp": "Execution", "plan": "Task"}.get(kind, "Round")


def turn_word(number: int) -> str:
    """The heading of turn ``number`` (1-based) of a run: the task, then its follow-up questions
    (a resumed run's, a service thread's later turns)."""
    return "Task" if number == 1 else f"Follow-up question {number - 1}"


def first_turn_provenance(run: Run) -> tuple[str, str]:
    """The model and protocol of a run's first turn (a follow-up may use others; ``info`` holds the
    latest turn's), falling back to ``info``'s when the turn did not record them."""
    first = run.all_turns()[0]
    return first.model or run.info.model, first.protocol or run.info.protocol
