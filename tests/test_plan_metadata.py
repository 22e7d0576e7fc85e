"""A plan notebook's metadata (``notebook/metadata.py``'s ``PlanMetadata`` and ``PlanCellMetadata``): what
``agent/plan/output.py`` writes, byte for byte against a golden notebook, and what every reader (``show``'s
``load_plan``, ``notebook_kind``, the report's order, the page title, replay's cell checks, the service's
bundle) makes of a hostile block: the field's default, never a crash. Pure: no kernel, no model.

Regenerate the golden notebook (only when a change to the layout is meant)::

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_plan_metadata.py -k golden
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import nbformat

from kernel_agent.agent.plan.graph import build_dag
from kernel_agent.agent.plan.output import build_plan_notebook
from kernel_agent.agent.plan.schema import PlanSpec
from kernel_agent.agent.plan.state import CellRecord, NodeResult, PlanState

GOLDEN = Path(__file__).parent / "golden" / "plan.ipynb"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
PLAN: dict[str, Any] = PlanSpec.model_validate(
    {
        "directions": ["descriptive", "by region"],
        "nodes": [
            {"id": "load", "title": "Load the sales", "purpose": "read the CSV"},
            {
                "id": "regions",
                "title": "Revenue by region",
                "depends_on": ["load"],
                "children": [{"id": "chart", "title": "A chart of it", "kind": "visualisation"}],
            },
            {"id": "broken", "title": "A failing task", "depends_on": ["load"]},
            {"id": "later", "title": "Never reached", "depends_on": ["broken"]},
            {"id": "answer", "title": "The answer", "kind": "text", "depends_on": ["regions"]},
            {"id": "pending", "title": "Not run yet", "depends_on": ["answer"]},
        ],
    }
).model_dump(mode="json")


def plan_state(path: Path) -> PlanState:
    """A finished plan of every kind of result: done with tokens, a probe and a figure, failed, skipped,
    interrupted, a text task's conclusion, an analysis; one task never reached."""
    stream = {"output_type": "stream", "name": "stdout", "text": "rows 12\n"}
    figure = {"output_type": "display_data", "data": {"image/png": PNG, "text/plain": "<Figure>"}, "metadata": {}}
    error = {"output_type": "error", "ename": "KeyError", "evalue": "'x'", "traceback": ["KeyError: 'x'"]}
    tokens = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    results = {
        "load": NodeResult(
            "load",
            "done",
            1,
            (CellRecord("df.columns", (stream,), 1, probe=True), CellRecord("print('rows', 12)", (stream,), 2)),
            analysis="Twelve rows.",
            seconds=1.25,
            tokens=tokens,
        ),
        "chart": NodeResult("chart", "done", 1, (CellRecord("plot()", (figure,), 3),), seconds=2.0),
        "regions": NodeResult(
            "regions", "done", 2, (CellRecord("by = 1", (), 4),), failures=("KeyError: 'x'",), seconds=0.5
        ),
        "broken": NodeResult(
            "broken",
            "failed",
            3,
            failures=("KeyError: 'x'",) * 3,
            failed=(CellRecord("df['x']", (error,), 5),),
            reason="three attempts failed",
            tokens={**tokens, "reasoning_tokens": 7},
        ),
        "later": NodeResult("later", "skipped", reason="its dependency broken failed"),
        "answer": NodeResult("answer", "done", 1, text="West leads.\nEast follows.", seconds=0.75, tokens=tokens),
        "pending": NodeResult("pending", "interrupted"),
    }
    return PlanState(
        path,
        "Which region sells most?",
        PLAN,
        {"max_depth": 3, "node_budget": 20},
        ("sales.csv",),
        "import pandas as pd",
        (stream,),
        results,
        workspace="ws",
        scripted=True,
        model="plan-model",
        protocol="tools",
        started_at="2026-01-02T03:04:05+00:00",
        finished_at="2026-01-02T03:05:06+00:00",
        planning_tokens={"prompt_tokens": 50, "completion_tokens": 9, "total_tokens": 59},
    )


def plan_notebook(tmp_path: Path) -> nbformat.NotebookNode:
    state = plan_state(tmp_path / "plan.plan.json")
    return build_plan_notebook(state, build_dag(PlanSpec.model_validate(state.plan)), state.workspace)


def normalised(nb: nbformat.NotebookNode) -> str:
    """The notebook as nbformat writes it, its random cell ids numbered."""
    nb = copy.deepcopy(nb)
    for number, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{number}"
    return str(nbformat.writes(nb)) + "\n"


def test_golden_plan_notebook(tmp_path: Path) -> None:
    text = normalised(plan_notebook(tmp_path))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert text == GOLDEN.read_text(encoding="utf-8")
    nbformat.validate(nbformat.reads(text, as_version=4))
    assert json.loads(text)["metadata"]["kernel_agent"]["plan"] == PLAN
