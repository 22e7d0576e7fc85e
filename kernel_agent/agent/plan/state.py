"""Per-node results of a plan run, persisted as each node finishes, so a killed run resumes.

Owns ``NodeResult``/``CellRecord`` values and the state file: one JSON document
(``<notebook stem>.plan.json`` beside the notebook) holding the task, the
validated plan, the budgets and every finished node's status, cells with their
real outputs, the failed attempts' cells (for the report, never re-run), text,
analysis and error. It is rewritten through the door's record writer (random
temporary name, fsync, rename; a planted link is replaced, never written through)
after every node, so a SIGKILL leaves the previous or the next state, never a torn
one. Reading it is bounded (size, nesting) and its data files are claims
(``notebook/claims.py``). It does not run anything.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...errors import NotebookError, WorkspaceFileError
from ...events import NodeStatus
from ...kernel.door import write_record
from ...notebook.claims import check_data_files
from ...notebook.load import read_json_record
from ...result import clip_middle

__all__ = ["CellRecord", "NodeResult", "NodeStatus", "PlanState", "state_path"]


@dataclass(frozen=True)
class CellRecord:
    """One executed cell of a node: its code and its real nbformat outputs. A ``probe`` gathered
    information for the model before the node's code (kept: it ran in the kernel, so replay needs it)."""

    code: str
    outputs: tuple[dict[str, Any], ...] = ()
    execution_count: int | None = None
    probe: bool = False


@dataclass(frozen=True)
class NodeResult:
    """How a node ended. ``cells`` are the kept (successful) cells; ``failures`` the tracebacks' last lines."""

    node_id: str
    status: NodeStatus
    attempts: int = 0
    cells: tuple[CellRecord, ...] = ()
    text: str = ""
    analysis: str = ""
    failures: tuple[str, ...] = ()
    reason: str = ""
    failed: tuple[CellRecord, ...] = ()  # the failed attempts' cells, for the report: never re-run
    seconds: float = 0.0  # the node's time, model and code (0: not recorded, a state from before)
    tokens: dict[str, int] = field(default_factory=dict)  # the model's usage for the node, as the server reported

    @property
    def figures(self) -> tuple[str, ...]:
        """The base64 PNGs the node's cells displayed, in order."""
        return tuple(
            out["data"]["image/png"]
            for cell in self.cells
            for out in cell.outputs
            if "image/png" in out.get("data", {})
        )

    def output_text(self, limit: int = 1500, *, probes: bool = False) -> str:
        """The node's text outputs joined, within about ``limit`` characters (context for later nodes).

        Head and tail are kept (the summary lines code prints last survive); the probes' output is left
        out unless ``probes``, and so is a figure's ``<Figure size ...>`` text."""
        parts = []
        for cell in self.cells:
            if cell.probe and not probes:
                continue
            for out in cell.outputs:
                data = out.get("data", {})
                if out.get("output_type") == "stream":
                    parts.append(_joined(out.get("text", "")))
                elif "text/plain" in data and "image/png" not in data:
                    parts.append(_joined(data["text/plain"]))
        text = "".join(p if p.endswith("\n") else p + "\n" for p in parts)
        return clip_middle(text, limit, tail_share=0.6)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeResult:
        def records(key: str) -> tuple[CellRecord, ...]:
            return tuple(
                CellRecord(c["code"], tuple(c["outputs"]), c.get("execution_count"), c.get("probe", False))
                for c in data.get(key, ())
            )

        return cls(
            data["node_id"],
            data["status"],
            data.get("attempts", 0),
            records("cells"),
            data.get("text", ""),
            data.get("analysis", ""),
            tuple(data.get("failures", ())),
            data.get("reason", ""),
            records("failed"),
            float(data.get("seconds") or 0.0),
            {str(k): int(v) for k, v in (data.get("tokens") or {}).items() if isinstance(v, int)},
        )


def _joined(text: Any) -> str:
    return "".join(text) if isinstance(text, list) else str(text)


def state_path(notebook: str | os.PathLike[str]) -> Path:
    """Where the plan state of ``notebook`` lives."""
    path = Path(notebook)
    return path.with_name(path.stem + ".plan.json")


@dataclass
class PlanState:
    """The mutable record of one plan run; ``save()`` after every change that must survive a crash."""

    path: Path
    task: str
    plan: dict[str, Any]
    budgets: dict[str, int]
    data_files: tuple[str, ...] = ()
    setup_code: str = ""
    setup_outputs: tuple[dict[str, Any], ...] = ()
    results: dict[str, NodeResult] = field(default_factory=dict)
    workspace: str = ""  # as the notebook records it (``recorded_workspace``): a claim, never an order
    scripted: bool = False  # the model's replies were played back from a file (the demo), not written
    model: str = ""  # the model's name and the protocol its tasks spoke, as ``show`` reports them
    protocol: str = ""
    started_at: str = ""  # ISO times, UTC
    finished_at: str = ""
    planning_tokens: dict[str, int] = field(default_factory=dict)  # the planning request's (and its repair's)

    def record(self, result: NodeResult) -> None:
        """Keep ``result`` and persist the whole state at once. Raises ``OSError`` when it cannot be written."""
        self.results[result.node_id] = result
        self.save()

    def save(self) -> None:
        """Write the state atomically. Raises ``OSError`` when it cannot be written, ``NotebookError`` when
        the door refuses its path."""
        document = {
            "kernel_agent_plan": 1,
            "task": self.task,
            "plan": self.plan,
            "budgets": self.budgets,
            "data_files": list(self.data_files),
            "setup_code": self.setup_code,
            "setup_outputs": list(self.setup_outputs),
            "results": {k: asdict(v) for k, v in self.results.items()},
            "workspace": self.workspace,
            "scripted": self.scripted,
            "model": self.model,
            "protocol": self.protocol,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "planning_tokens": self.planning_tokens,
        }
        try:
            write_record(self.path, json.dumps(document).encode("utf-8"), durable=True)
        except WorkspaceFileError as exc:
            raise NotebookError(f"cannot write the plan state {self.path}: {exc}", path=str(self.path)) from exc

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PlanState:
        """Read a state file (bounded: ``read_json_record``). Raises ``NotebookError`` when it is missing,
        not a regular file, too large or too deep, not a plan state, or claims a data file that is not a
        plain name beside it (``check_data_files``)."""
        path = Path(path)
        data = read_json_record(path, "plan state")
        if not isinstance(data, dict) or data.get("kernel_agent_plan") != 1:
            raise NotebookError(f"{path} is not a kernel-agent plan state", path=str(path))
        claimed = data.get("data_files") or []
        check_data_files(claimed if isinstance(claimed, list) else [claimed], path)
        try:
            results = {str(k): NodeResult.from_dict(v) for k, v in dict(data.get("results") or {}).items()}
            state = cls(
                path,
                str(data["task"]),
                dict(data["plan"]),
                dict(data["budgets"]),
                tuple(claimed),
                str(data.get("setup_code") or ""),
                tuple(dict(out) for out in data.get("setup_outputs") or ()),
                results,
                str(data.get("workspace") or ""),
                data.get("scripted") is True,
                str(data.get("model") or ""),
                str(data.get("protocol") or ""),
                str(data.get("started_at") or ""),
                str(data.get("finished_at") or ""),
                {str(k): v for k, v in dict(data.get("planning_tokens") or {}).items() if isinstance(v, int)},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise NotebookError(f"{path} is not a usable plan state: {exc!r}", path=str(path)) from exc
        return state
