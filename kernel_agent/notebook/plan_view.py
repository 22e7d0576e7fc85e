"""A plan run's notebook read back for review: ``load_plan``, ``PlanView``, ``PlanTask``.

A plan notebook (``agent/plan/output.py`` writes it) is not a run of rounds: it has a title cell,
the setup cell, then one section per task — a header cell, the task's text (a text task's
conclusion), its code cells with their outputs, its analysis — each cell naming its task in
``metadata["kernel_agent"]["node"]``. The notebook's metadata holds the task, the plan, the model and
protocol, the times, the tokens and the answer (the text tasks' conclusions); both are read through
their schema (``metadata.PlanMetadata``, ``PlanCellMetadata``): a mistyped value reads as its default.
Notebooks written before those were recorded read with them empty. Pure reading: never runs or changes
anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..records import Usage
from .load import read_notebook
from .metadata import PlanCellMetadata, PlanMetadata, PlanNodeRecord, read_block, read_cell

__all__ = ["PlanTask", "PlanView", "is_plan", "load_plan"]


@dataclass(frozen=True)
class PlanTask:
    """One task of the plan as recorded: ``cells`` are (code, outputs) in order."""

    id: str
    number: int
    title: str
    kind: str = ""
    status: str = ""
    seconds: float = 0.0
    usage: Usage = Usage()
    details: str = ""  # the header's lines below the title (dependencies, purpose, failed attempts)
    text: str = ""
    analysis: str = ""
    cells: tuple[tuple[str, tuple[dict[str, Any], ...]], ...] = ()


@dataclass(frozen=True)
class PlanView:
    """What ``show`` needs of a plan notebook."""

    path: Path
    task: str
    tasks: tuple[PlanTask, ...]
    model: str = ""
    protocol: str = ""
    data_files: tuple[str, ...] = ()
    started_at: str = ""
    finished_at: str = ""
    answer: str | None = None
    usage: Usage = Usage()
    scripted: bool = False
    counts: dict[str, int] = field(default_factory=dict)


def is_plan(metadata: Any) -> bool:
    """Whether a notebook's metadata is a plan run's (its ``kernel_agent`` block holds the plan)."""
    about = read_block(metadata, PlanMetadata)
    return about is not None and about.plan is not None


def load_plan(path: str | os.PathLike[str]) -> PlanView | None:
    """The plan recorded in the notebook at ``path``; None when it is not a plan notebook.

    Raises ``NotebookError`` when ``path`` is not a readable notebook.
    """
    path = Path(path)
    nb = read_notebook(path)
    meta = read_block(nb.metadata, PlanMetadata)
    if meta is None or meta.plan is None:
        return None
    kinds = _kinds(meta.plan.nodes)
    tasks: dict[str, dict[str, Any]] = {}
    current: str | None = None
    for cell in nb.cells:
        about = read_cell(cell, PlanCellMetadata)
        node = about.node
        if node is None:  # older notebooks wrote a text task's conclusion without its task's id
            if current is None or about.role in ("header", "answer", "setup"):
                continue
            node = current
        current = node
        task = tasks.setdefault(node, {"cells": [], "text": [], "header": None, "meta": _NO_HEADER, "analysis": ""})
        if cell.get("cell_type") == "code":
            task["cells"].append((str(cell.source), tuple(dict(out) for out in cell.get("outputs", []))))
        elif task["header"] is None:  # the section's first markdown cell is its header
            task["header"], task["meta"] = str(cell.source), about
        elif about.role == "analysis" or str(cell.source).startswith("*Analysis:*"):
            task["analysis"] = str(cell.source).removeprefix("*Analysis:*").strip()
        else:
            task["text"].append(str(cell.source))
    found = tuple(
        _task(node, number, parts, kinds.get(node, "")) for number, (node, parts) in enumerate(tasks.items(), 1)
    )
    return PlanView(
        path=path,
        task=meta.task,
        tasks=found,
        model=meta.model,
        protocol=meta.protocol,
        data_files=tuple(meta.data_files),
        started_at=meta.started_at,
        finished_at=meta.finished_at,
        answer=meta.answer,
        usage=meta.usage.record(),
        scripted=meta.scripted,
        counts=meta.counts.model_dump(exclude_none=True) if meta.counts is not None else {},
    )


_NO_HEADER = PlanCellMetadata.read({})


def _task(node: str, number: int, parts: dict[str, Any], kind: str) -> PlanTask:
    header = parts["header"] or ""
    first, _, rest = header.partition("\n")
    about: PlanCellMetadata = parts["meta"]
    return PlanTask(
        id=node,
        number=about.task if about.task is not None else number,
        title=first.removeprefix("## ").strip() or node,
        kind=kind,
        status=about.status or "",
        seconds=about.seconds,
        usage=about.usage.record(),
        details=rest.strip(),
        text="\n\n".join(part for part in parts["text"] if part.strip()),
        analysis=parts["analysis"],
        cells=tuple(parts["cells"]),
    )


def _kinds(nodes: list[PlanNodeRecord]) -> dict[str, str]:
    """Each task's kind (code, visualisation, text), from the plan's nodes, nested ones too."""
    found: dict[str, str] = {}
    for node in nodes:
        found[node.id] = node.kind
        found |= _kinds(node.children)
    return found
