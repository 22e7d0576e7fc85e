"""A plan run's notebook read back for review: ``load_plan``, ``PlanView``, ``PlanTask``.

A plan notebook (``agent/plan/output.py`` writes it) is not a run of rounds: it has a title cell,
the setup cell, then one section per task — a header cell, the task's text (a text task's
conclusion), its code cells with their outputs, its analysis — each cell naming its task in
``metadata["kernel_agent"]["node"]``. The notebook's metadata holds the task, the plan, the model and
protocol, the times, the tokens and the answer (the text tasks' conclusions). Notebooks written before
those were recorded read with them empty. Pure reading: never runs or changes anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..records import Usage
from .export import METADATA_KEY
from .load import read_notebook

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
    meta = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get("plan"), dict)


def load_plan(path: str | os.PathLike[str]) -> PlanView | None:
    """The plan recorded in the notebook at ``path``; None when it is not a plan notebook.

    Raises ``NotebookError`` when ``path`` is not a readable notebook.
    """
    path = Path(path)
    nb = read_notebook(path)
    if not is_plan(nb.metadata):
        return None
    meta = dict(nb.metadata[METADATA_KEY])
    kinds = _kinds(meta["plan"])
    tasks: dict[str, dict[str, Any]] = {}
    current: str | None = None
    for cell in nb.cells:
        cell_meta = cell.get("metadata", {}).get(METADATA_KEY)
        cell_meta = cell_meta if isinstance(cell_meta, dict) else {}
        node = cell_meta.get("node")
        if not isinstance(node, str):  # older notebooks wrote a text task's conclusion without its task's id
            if current is None or cell_meta.get("role") in ("header", "answer", "setup"):
                continue
            node = current
        current = node
        task = tasks.setdefault(node, {"cells": [], "text": [], "header": None, "meta": {}, "analysis": ""})
        role = cell_meta.get("role")
        if cell.get("cell_type") == "code":
            task["cells"].append((str(cell.source), tuple(dict(out) for out in cell.get("outputs", []))))
        elif task["header"] is None:  # the section's first markdown cell is its header
            task["header"], task["meta"] = str(cell.source), dict(cell_meta)
        elif role == "analysis" or str(cell.source).startswith("*Analysis:*"):
            task["analysis"] = str(cell.source).removeprefix("*Analysis:*").strip()
        else:
            task["text"].append(str(cell.source))
    found = tuple(
        _task(node, number, parts, kinds.get(node, "")) for number, (node, parts) in enumerate(tasks.items(), 1)
    )
    recorded = meta.get("counts")
    counts: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    answer = meta.get("answer")
    return PlanView(
        path=path,
        task=_str(meta.get("task")),
        tasks=found,
        model=_str(meta.get("model")),
        protocol=_str(meta.get("protocol")),
        data_files=tuple(str(name) for name in meta.get("data_files", []) if isinstance(name, str)),
        started_at=_str(meta.get("started_at")),
        finished_at=_str(meta.get("finished_at")),
        answer=answer if isinstance(answer, str) else None,
        usage=_usage(meta.get("usage")),
        scripted=meta.get("scripted") is True,
        counts={str(k): v for k, v in counts.items() if isinstance(v, int)},
    )


def _task(node: str, number: int, parts: dict[str, Any], kind: str) -> PlanTask:
    header = parts["header"] or ""
    first, _, rest = header.partition("\n")
    meta = parts["meta"]
    seconds = meta.get("seconds")
    recorded = meta.get("task")
    return PlanTask(
        id=node,
        number=recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else number,
        title=first.removeprefix("## ").strip() or node,
        kind=kind,
        status=_str(meta.get("status")),
        seconds=float(seconds) if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) else 0.0,
        usage=_usage(meta.get("usage")),
        details=rest.strip(),
        text="\n\n".join(part for part in parts["text"] if part.strip()),
        analysis=parts["analysis"],
        cells=tuple(parts["cells"]),
    )


def _kinds(plan: dict[str, Any]) -> dict[str, str]:
    """Each task's kind (code, visualisation, text), from the plan's nodes, nested ones too."""
    found: dict[str, str] = {}

    def walk(nodes: Any) -> None:
        for node in nodes if isinstance(nodes, list) else []:
            if isinstance(node, dict) and isinstance(node.get("id"), str):
                found[node["id"]] = _str(node.get("kind"))
                walk(node.get("children") or node.get("subtasks"))

    walk(plan.get("nodes") or plan.get("tasks"))
    return found


def _usage(value: Any) -> Usage:
    value = value if isinstance(value, dict) else {}
    keys = ("prompt_tokens", "completion_tokens", "total_tokens", "reasoning_tokens")
    return Usage(*(v if isinstance(v := value.get(key), int) and not isinstance(v, bool) else 0 for key in keys))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
