"""A plan notebook's metadata (``notebook/metadata.py``'s ``PlanMetadata`` and ``PlanCellMetadata``): what
``agent/plan/output.py`` writes, byte for byte against a golden notebook, and what every reader (``show``'s
``load_plan``, ``notebook_kind``, the report's order, the page title, replay's cell checks, the service's
bundle) makes of a hostile block: the field's default, never a crash. Pure: no kernel, no model.

Regenerate the golden notebook (only when a change to the layout is meant)::

    UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_plan_metadata.py -k golden
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import os
from pathlib import Path
from typing import Any

import nbformat
from click.testing import CliRunner

from kernel_agent.agent.plan.graph import build_dag
from kernel_agent.agent.plan.output import build_plan_notebook
from kernel_agent.agent.plan.schema import PlanSpec
from kernel_agent.agent.plan.state import CellRecord, NodeResult, PlanState
from kernel_agent.cli import cli
from kernel_agent.notebook.html import render_html
from kernel_agent.notebook.kinds import notebook_kind
from kernel_agent.notebook.plan_view import is_plan, load_plan
from kernel_agent.notebook.replay import _check_cells
from kernel_agent.notebook.report import report_order
from kernel_agent.records import Usage
from kernel_agent.server.bundle import write_bundle
from kernel_agent.server.records import ThreadRecord
from kernel_agent.server.store import Store

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


# -- hostile metadata: each reader shows the field's default ------------------------------------------


def nested(levels: int) -> object:
    """A value about ``levels`` levels deep (read_notebook refuses a notebook past 100)."""
    value: object = "deep"
    for _ in range(levels // 2):
        value = {"x": [value]}
    return value


HOSTILE_PLAN_BLOCK: dict[str, object] = {  # what a hand edit or a hostile colleague may leave, field by field
    "task": ["Which region sells most?"],
    "data_files": 5,
    "workspace": {"path": "/etc"},
    "counts": [4, 1, 1],
    "scripted": "yes",
    "model": nested(90),
    "protocol": 3.5,
    "started_at": None,
    "finished_at": 17,
    "usage": "lots",
    "answer": {"text": "x" * 100_000},
    "schema": "from the future",
}


def hostile_task_header(about: dict[str, Any]) -> dict[str, Any]:
    return {**about, "task": True, "status": ["done"], "seconds": "1.25", "usage": [150], "unknown": nested(90)}


def written(tmp_path: Path, name: str, nb: nbformat.NotebookNode) -> Path:
    path = tmp_path / name
    nbformat.write(nb, path)
    return path


def test_a_hostile_plan_block_reads_as_its_defaults_everywhere(tmp_path: Path) -> None:
    """Every field of the notebook's block mistyped: ``load_plan`` shows each field's default and the same
    tasks; ``show``, the kind, the HTML page and the bundle's data files neither crash nor show the junk.
    (``data_files: 5`` crashed ``load_plan``, and so ``show``, with a TypeError before the schema read it.)"""
    good = plan_notebook(tmp_path)
    hostile = copy.deepcopy(good)
    hostile.metadata["kernel_agent"].update(HOSTILE_PLAN_BLOCK)
    hostile.metadata["kernel_agent"]["plan"]["junk"] = nested(90)
    expected = load_plan(written(tmp_path, "good.ipynb", good))
    path = written(tmp_path, "hostile.ipynb", hostile)
    view = load_plan(path)
    assert expected is not None and view is not None
    assert view == dataclasses.replace(
        expected,
        path=path,
        task="",
        model="",
        protocol="",
        data_files=(),
        started_at="",
        finished_at="",
        answer=None,
        usage=Usage(),
        scripted=False,
        counts={},
    )
    assert notebook_kind(hostile.metadata) == "plan" and is_plan(hostile.metadata)
    shown = CliRunner().invoke(cli, ["show", str(path)], terminal_width=120)
    assert shown.exit_code == 0, shown.output
    assert "Task 1/7: load" in shown.output and "xxxxxxxx" not in shown.output and "deep" not in shown.output
    page = render_html(path)
    assert "<title>kernel-agent run</title>" in page and "xxxxxxxx" not in page
    assert bundled_data_files(tmp_path, hostile) == []


def test_hostile_plan_cells_read_as_their_defaults(tmp_path: Path) -> None:
    """A task header's mistyped fields read as defaults; a cell whose ``node`` is not a string belongs to the
    task above it, as an old notebook's untagged cells do; replay's check names no task for it."""
    good = plan_notebook(tmp_path)
    hostile = copy.deepcopy(good)
    headers = [cell for cell in hostile.cells if cell.metadata["kernel_agent"].get("role") == "task"]
    for header in headers:
        header.metadata["kernel_agent"] = hostile_task_header(header.metadata["kernel_agent"])
    (chart_code,) = [cell for cell in hostile.cells if cell.get("source") == "plot()"]
    chart_code.metadata["kernel_agent"]["node"] = 7
    expected = load_plan(written(tmp_path, "good.ipynb", good))
    path = written(tmp_path, "hostile.ipynb", hostile)
    view = load_plan(path)
    assert expected is not None and view is not None
    defaults = tuple(dataclasses.replace(task, status="", seconds=0.0, usage=Usage()) for task in expected.tasks)
    assert view.tasks == defaults  # and each number the task's place, as recorded
    assert [task.number for task in view.tasks] == list(range(1, 8))
    assert report_order(hostile) == hostile  # a plan's notebook keeps its order
    checks = {check.index: check.task for check in _check_cells(hostile, hostile, None, False, [], [])}
    assert checks[hostile.cells.index(chart_code)] is None
    assert [task for task in checks.values() if task] == ["load", "load", "regions"]
    shown = CliRunner().invoke(cli, ["show", str(path)], terminal_width=120)
    assert shown.exit_code == 0, shown.output
    assert "Task 7/7: pending" in shown.output and "150 tokens" not in shown.output


def test_a_plan_that_is_not_an_object_is_a_run_notebook(tmp_path: Path) -> None:
    """``plan`` must be an object to make a plan notebook: a list there leaves a run's notebook (as before)."""
    nb = plan_notebook(tmp_path)
    plans: tuple[object, ...] = ([{"id": "load"}], "plan", 7, None)
    for plan in plans:
        nb.metadata["kernel_agent"]["plan"] = plan
        assert notebook_kind(nb.metadata) == "run" and not is_plan(nb.metadata)
        assert load_plan(written(tmp_path, "listed.ipynb", nb)) is None
    blocks: tuple[object, ...] = ([], "x", None, 3.5)
    for block in blocks:
        assert notebook_kind({"kernel_agent": block}) == "foreign" and not is_plan({"kernel_agent": block})


def bundled_data_files(tmp_path: Path, nb: object) -> list[str]:
    return bundled_from_text(tmp_path, json.dumps(nb))


def bundled_from_text(tmp_path: Path, text: str) -> list[str]:
    """What a thread's bundle takes from a notebook: the data files it names (none: a junk claim or block)."""
    store = Store(tmp_path / "service")
    thread = ThreadRecord(id="thread-1", owner="o", task="t", created_at="now", updated_at="now")
    store.workspace(thread.id).mkdir(parents=True)
    (store.workspace(thread.id) / "5").write_text("five\n")
    store.notebook(thread.id).write_text(text, encoding="utf-8")
    made = write_bundle(store, thread, io.BytesIO())
    return [entry.split("/", 1)[1] for entry in made.entries if not entry.endswith(("ipynb", "README.txt"))]


def test_the_bundle_takes_no_data_file_from_a_junk_block(tmp_path: Path) -> None:
    """A thread notebook whose metadata is not an object crashed the bundle with an AttributeError (a 500);
    one nested past the JSON parser's depth with a RecursionError."""
    assert bundled_data_files(tmp_path / "a", {"metadata": []}) == []
    assert bundled_data_files(tmp_path / "b", {"metadata": None}) == []
    assert bundled_from_text(tmp_path / "c", '{"metadata": {"kernel_agent": ' + "[" * 5_000 + "]" * 5_000 + "}}") == []
    assert bundled_data_files(tmp_path / "d", {"metadata": {"kernel_agent": {"data_files": ["5", "../5"]}}}) == ["5"]
