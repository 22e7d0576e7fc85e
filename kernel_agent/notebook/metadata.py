"""The metadata kernel-agent writes into a run's notebook, as one schema: export writes it, load reads it.

``NotebookMetadata`` is the notebook's ``metadata`` (``kernelspec``, ``language_info`` and ours under
``kernel_agent``: ``RunMetadata``, with a ``TurnRecord`` per question); ``CellMetadata`` is a cell's
``metadata["kernel_agent"]`` (its role, and on a round's last cell the round's record: ``RoundRecord``
and its code's ``ResultRecord``). A field named as the record's attribute (``RunInfo``, ``Run``,
``Turn``, ``Round``, ``ExecutionResult``) is written from it (``Shape.of``) and read back into it
(``record_fields``): adding one is one line here. A plan run's notebook (``agent/plan/output.py``) has
its own block, ``PlanMetadata`` (its task, the plan as designed: ``PlanRecord``, the tasks' counts and
tokens, the answer), and its cells ``PlanCellMetadata`` (the task each belongs to, and on a task's
header how it ended). Read back, the metadata is a claim (``claims.py``): every reader goes through
``read_block``/``read_cell`` (a block that is not a JSON object is none at all), unknown keys are
ignored and a mistyped value reads as its default (``shapes.Shape.read``). ``json_schema()`` is what
the docs publish (``docs/reference/notebook-metadata.schema.json``). Which cell holds what is
``export.py``'s and ``output.py``'s.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import AliasChoices, BeforeValidator, ConfigDict, Field, PlainSerializer

from .._version import __version__
from ..events import NodeStatus
from ..records import RecordedSource, Round, Run, RunInfo, StopReason, Turn
from ..result import ExecutionResult
from ..shapes import OMIT_EMPTY, ArtifactShape, ErrorShape, Kept, Shape, UsageShape

__all__ = [
    "METADATA_KEY",
    "SCHEMA",
    "CellMetadata",
    "KernelspecShape",
    "NotebookMetadata",
    "PlanCellMetadata",
    "PlanCounts",
    "PlanMetadata",
    "PlanNodeRecord",
    "PlanNotebookMetadata",
    "PlanRecord",
    "PlanUsage",
    "ResultRecord",
    "RoundRecord",
    "RunMetadata",
    "SourceRecord",
    "TaskUsage",
    "TurnRecord",
    "host",
    "json_schema",
    "json_schema_text",
    "read_block",
    "read_cell",
    "record_fields",
    "result_record",
    "round_record",
    "run_metadata",
    "workspace_path",
]

METADATA_KEY = "kernel_agent"
SCHEMA = 1  # version of the layout of our metadata, bumped on incompatible changes

RoundStatus = Literal["ok", "error", "timeout", "died", "cancelled", "answer", "no-code"]


def host(endpoint: str) -> str:
    """Only the host of an endpoint, even if a full URL (with a key in it) was passed."""
    if "://" not in endpoint:
        return endpoint
    parts = urlsplit(endpoint)
    return f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname or ""


# A model's endpoint is written as its host only: a notebook is shared, the endpoint's key is the operator's.
Host = Annotated[str, PlainSerializer(host)]
# A data file's name as recorded; a non-string claim is kept as its text, so that claims.py refuses it.
Names = Annotated[
    list[str], BeforeValidator(lambda value: [str(v) for v in value] if isinstance(value, list | tuple) else value)
]


class TurnRecord(Shape):
    """One question of the run (``records.Turn``): its rounds, answer and provenance."""

    task: str
    first_round: int = 0
    last_round: int = 0
    answer: str | None = None
    stop_reason: StopReason | None = None
    error: str | None = None
    model: str = ""
    protocol: str = ""
    endpoint: Host = ""
    started_at: str = ""
    finished_at: str = ""

    def record(self) -> Turn:
        return Turn(**{name: getattr(self, name) for name in type(self).model_fields})


class SourceRecord(Shape):
    """A live data source the run queried (``records.RecordedSource``): its name and kind only, never its
    URI; ``replay`` and ``resume`` reconnect by the name."""

    name: str
    kind: str = ""

    def record(self) -> RecordedSource:
        return RecordedSource(self.name, self.kind)


class RunMetadata(Shape):
    """``metadata["kernel_agent"]`` of a run's notebook: who ran what (``RunInfo``) and how it ended (``Run``)."""

    schema_: int = Field(0, alias="schema", description="the layout's version (SCHEMA), bumped on incompatible changes")
    version: str = Field("", description="the kernel-agent that wrote it")
    view: str = Field("", description="'full' or 'clean'; a notebook without it is not kernel-agent's")
    task: str = ""
    model: str = ""
    protocol: str = ""
    endpoint: Host = ""
    data_files: Names = []
    workspace: str = Field("", description="relative to the notebook's folder when the two share more than '/'")
    started_at: str = ""
    finished_at: str = ""
    stop_reason: StopReason | None = None
    error: str | None = None
    answer: str | None = None
    usage: UsageShape = UsageShape()
    scripted: bool = False
    rounds: Annotated[int, BeforeValidator(lambda value: len(value) if isinstance(value, tuple) else value)] = 0
    turns: Kept[TurnRecord] = []
    confinement: Annotated[str, OMIT_EMPTY] = Field(
        "",
        description="the kernel's confinement in force, in words (sandbox, system-call filter, network, limits); "
        "a local kernel's ends with how it started: 'start: forked from a warmed template' or 'start: cold' (with "
        "the reason when the template could not serve)",
    )
    sources: Annotated[Kept[SourceRecord], OMIT_EMPTY] = Field(
        [], description="the live data sources queried, by name and kind (never their URIs)"
    )


class KernelspecShape(Shape):
    """The kernel the notebook opens with (nbformat's ``kernelspec``)."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    display_name: str | None = None
    language: str | None = None

    def record(self) -> dict[str, str]:
        return {
            name: value for name in ("display_name", "language", "name") if (value := getattr(self, name)) is not None
        }


class NotebookMetadata(Shape):
    """A run's notebook's ``metadata``: nbformat's kernel fields and ours."""

    kernelspec: KernelspecShape = Field(default_factory=KernelspecShape)
    language_info: dict[str, Any] = {}
    kernel_agent: RunMetadata = Field(default_factory=lambda: RunMetadata.read({}))


class ResultRecord(Shape):
    """How a cell's code ended (``ExecutionResult`` without its outputs, which the cell holds)."""

    status: RoundStatus | None = None
    duration_s: float = 0.0
    error: ErrorShape | None = None
    state_lost: bool = False
    note: str = ""
    dropped_chars: int = 0
    dropped_images: int = 0
    rebuilt_cells: Kept[int] = []
    lost_names: Annotated[Kept[str], OMIT_EMPTY] = []


class RoundRecord(Shape):
    """A round's record (``records.Round`` but its code, reasoning and result), on the round's last cell."""

    round: int | None = Field(None, validation_alias=AliasChoices("round", "index"))
    status: RoundStatus | None = None
    model_s: float = 0.0
    exec_s: float = 0.0
    started_at: str = ""
    usage: UsageShape = UsageShape()
    artifacts: Kept[ArtifactShape] = []
    reply: str | None = None
    problem: str | None = None
    answer: str | None = None
    reasoning_content: Annotated[str, OMIT_EMPTY] = ""


class CellMetadata(ResultRecord, RoundRecord):
    """A cell's ``metadata["kernel_agent"]``: its part of the layout, and a round's record on its last cell."""

    role: str | None = Field(None, description="header, setup, thinking, reasoning, note, code, question or answer")
    turn: int | None = Field(None, description="the question a question or answer cell belongs to (from 1)")
    code: str | None = Field(None, description="the original code of a cell whose source differs (guarded)")
    unreplayed: Kept[str] = Field([], description="names this cell reads that only a skipped cell had set")


# -- a plan run's notebook ---------------------------------------------------------------------------


class PlanNodeRecord(Shape):
    """One task of the plan as the model designed it (``agent/plan/schema.NodeSpec``), its sub-tasks nested."""

    id: str
    title: str = ""
    kind: str = Field("", description="code, text or visualisation")
    purpose: str = ""
    depends_on: Kept[str] = []
    children: Kept[PlanNodeRecord] = Field([], validation_alias=AliasChoices("children", "subtasks"))


class PlanRecord(Shape):
    """The plan as designed (``agent/plan/schema.PlanSpec``): its directions and its tree of tasks."""

    directions: Kept[str] = []
    nodes: Kept[PlanNodeRecord] = Field([], validation_alias=AliasChoices("nodes", "tasks"))


class PlanCounts(Shape):
    """How many tasks there are and how each ended (a count not recorded reads as None, not 0)."""

    total: int | None = None
    done: int | None = None
    failed: int | None = None
    skipped: int | None = None
    pending: int | None = None


class PlanUsage(UsageShape):
    """The tokens of the planning request and every task summed: all four counts, zeros too."""

    reasoning_tokens: int = 0


class TaskUsage(UsageShape):
    """A task's tokens as the server reported them: a count of zero is left out."""

    prompt_tokens: Annotated[int, OMIT_EMPTY] = 0
    completion_tokens: Annotated[int, OMIT_EMPTY] = 0
    total_tokens: Annotated[int, OMIT_EMPTY] = 0


class PlanMetadata(Shape):
    """``metadata["kernel_agent"]`` of a plan run's notebook; ``plan`` is what makes it one."""

    task: str = ""
    data_files: Names = []
    workspace: str = Field("", description="as the plan state records it")
    plan: PlanRecord | None = Field(None, description="the plan as designed; a notebook with one is a plan run's")
    counts: PlanCounts | None = None
    scripted: bool = False
    model: str = ""
    protocol: str = ""
    started_at: str = ""
    finished_at: str = ""
    usage: PlanUsage = PlanUsage()
    answer: Annotated[str | None, OMIT_EMPTY] = Field(None, description="the text tasks' conclusions, in order")


class PlanNotebookMetadata(Shape):
    """A plan run's notebook's ``metadata``: the kernel it opens with and ours."""

    kernelspec: KernelspecShape = Field(default_factory=KernelspecShape)
    kernel_agent: PlanMetadata = Field(default_factory=lambda: PlanMetadata.read({}))


class PlanCellMetadata(Shape):
    """A plan notebook's cell's ``metadata["kernel_agent"]``: the task it belongs to and its part; a task's
    header (``role`` ``task``) also holds the task's number and how it ended."""

    role: str | None = Field(None, description="header, answer, setup, task or analysis")
    node: str | None = Field(None, description="the id of the task the cell belongs to")
    task: int | None = Field(None, description="the task's number in execution order (from 1)")
    status: NodeStatus | None = None
    seconds: float = 0.0
    usage: TaskUsage = TaskUsage()


_S = TypeVar("_S", bound=Shape)


def read_block(metadata: object, shape: type[_S]) -> _S | None:
    """Our block (``metadata["kernel_agent"]``) of a notebook's or a cell's ``metadata``, read as ``shape``
    leniently; None when there is none or it is not a JSON object (a notebook that is not ours)."""
    ours = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    return shape.read(ours) if isinstance(ours, dict) else None


def read_cell(cell: object, shape: type[_S]) -> _S:
    """A cell's block read as ``shape`` (all defaults for a cell without one, or one that is not an object)."""
    about = read_block(cell.get("metadata") if isinstance(cell, dict) else None, shape)
    return about if about is not None else shape.read({})


def run_metadata(run: Run, view: str, workspace: str) -> dict[str, Any]:
    """``metadata["kernel_agent"]`` of ``run``'s notebook in ``view``, the workspace as recorded."""
    values: dict[str, Any] = {**_attributes(run.info), **_attributes(run)}
    values |= {"schema": SCHEMA, "version": __version__, "view": view, "workspace": workspace}
    values["turns"] = [TurnRecord.of(turn) for turn in run.all_turns()]
    return RunMetadata.model_validate(values, from_attributes=True, strict=False).model_dump(by_alias=True)


def round_record(rnd: Round) -> dict[str, Any]:
    """The record of ``rnd`` its last cell carries: the round's and its result's."""
    return {**result_record(rnd.result), **RoundRecord.of(rnd).model_dump()}


def result_record(result: ExecutionResult | None) -> dict[str, Any]:
    """How ``result`` ended, as a cell records it (code that never ran: no time spent)."""
    if result is None:
        return ResultRecord().model_dump(include={"duration_s"})
    return ResultRecord.of(result).model_dump()


def record_fields(shape: Shape, record: type[Any], given: frozenset[str]) -> dict[str, Any]:
    """The fields of ``shape`` that the dataclass ``record`` has too, as it holds them (a nested shape as
    its record, a list as a tuple), but those in ``given``: what reading a record back takes from its metadata."""
    names = {field.name for field in dataclasses.fields(record)} - given
    return {name: _as_record(getattr(shape, name)) for name in type(shape).model_fields if name in names}


def _as_record(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_as_record(item) for item in value)
    record = getattr(value, "record", None)
    return record() if isinstance(value, Shape) and callable(record) else value


def _attributes(record: Run | RunInfo) -> dict[str, Any]:
    return {name: getattr(record, name) for name in RunMetadata.model_fields if hasattr(record, name)}


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a run notebook's metadata, as the docs publish it: its cells' under
    ``$defs.CellMetadata``; a plan notebook's under ``$defs.PlanNotebookMetadata``, its cells' under
    ``$defs.PlanCellMetadata``."""
    schema: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    schema |= NotebookMetadata.model_json_schema(by_alias=True)
    for shape in (CellMetadata, PlanNotebookMetadata, PlanCellMetadata):
        definition = shape.model_json_schema(by_alias=True)
        schema["$defs"] |= definition.pop("$defs", {})
        schema["$defs"][shape.__name__] = definition
    return schema


def json_schema_text() -> str:
    """``json_schema()`` as the published file holds it (``docs/reference/notebook-metadata.schema.json``)."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def workspace_path(recorded: str, notebook_dir: str) -> str:
    """A recorded workspace as a path: relative ones are relative to the notebook's folder."""
    if recorded and not os.path.isabs(recorded):
        return os.path.normpath(os.path.join(os.path.abspath(notebook_dir), recorded))
    return recorded
