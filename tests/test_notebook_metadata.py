"""The notebook's metadata is one schema (``notebook/metadata.py``): what export and plan mode write, load reads
and the docs publish. The published JSON Schema is the models'; every notebook we ship or wrote, a run's or a
plan's, matches it; each field is named as the record attribute it is written from; and load reads hostile
metadata as defaults."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kernel_agent.agent.plan.schema import NodeSpec, PlanSpec
from kernel_agent.notebook.kinds import notebook_kind
from kernel_agent.notebook.load import load_run
from kernel_agent.notebook.metadata import (
    CellMetadata,
    PlanNodeRecord,
    PlanRecord,
    ResultRecord,
    RoundRecord,
    RunMetadata,
    TurnRecord,
    json_schema,
    json_schema_text,
    run_metadata,
)
from kernel_agent.records import RecordedSource, Round, Run, RunInfo, Turn, Usage
from kernel_agent.result import Artifact, ExecutionResult
from kernel_agent.shapes import ArtifactShape, UsageShape

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "docs" / "reference" / "notebook-metadata.schema.json"
# Run notebooks export wrote (the golden ones are checked byte for byte against today's export).
WRITTEN = sorted(
    [
        *ROOT.glob("tests/golden/run.*.ipynb"),
        *ROOT.glob("notebooks/example-*.ipynb"),
        ROOT / "notebooks/magic-demo-run.ipynb",
    ]
)


def _kind(path: Path) -> str:
    return notebook_kind(json.loads(path.read_text(encoding="utf-8"))["metadata"])


# Plan notebooks plan mode wrote: the golden one (checked byte for byte in test_plan_metadata.py) and any shipped.
PLANS = sorted(
    path
    for path in {*ROOT.glob("tests/golden/*.ipynb"), *ROOT.glob("notebooks/**/*.ipynb"), *ROOT.glob("docs/**/*.ipynb")}
    if _kind(path) == "plan"
)
REGENERATE = (
    'python -c "from kernel_agent.notebook.metadata import json_schema_text; '
    "open('docs/reference/notebook-metadata.schema.json', 'w').write(json_schema_text())\""
)


def test_the_published_schema_is_the_models() -> None:
    assert PUBLISHED.read_text(encoding="utf-8") == json_schema_text(), f"regenerate it: {REGENERATE}"


def _validator(name: str | None = None) -> jsonschema.Draft202012Validator:
    schema = json_schema()
    if name is not None:  # one definition, with the others it refers to
        schema = {**schema["$defs"][name], "$defs": schema["$defs"]}
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", WRITTEN, ids=lambda path: path.name)
def test_every_notebook_we_wrote_matches_the_published_schema(path: Path) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert notebook["metadata"]["kernel_agent"]["view"] in ("full", "clean")
    assert list(_validator().iter_errors(notebook["metadata"])) == []
    cells = _validator("CellMetadata")
    for cell in notebook["cells"]:
        assert list(cells.iter_errors(cell["metadata"]["kernel_agent"])) == [], cell["id"]


@pytest.mark.parametrize("path", PLANS, ids=lambda path: path.name)
def test_every_plan_notebook_we_wrote_matches_the_published_schema(path: Path) -> None:
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert list(_validator("PlanNotebookMetadata").iter_errors(notebook["metadata"])) == []
    cells = _validator("PlanCellMetadata")
    assert {cell["metadata"]["kernel_agent"].get("role") for cell in notebook["cells"]} >= {"header", "setup", "task"}
    for cell in notebook["cells"]:
        assert list(cells.iter_errors(cell["metadata"]["kernel_agent"])) == [], cell["id"]


def test_the_golden_plan_notebook_is_found() -> None:
    assert ROOT / "tests/golden/plan.ipynb" in PLANS and not set(PLANS) & set(WRITTEN)


def test_the_schema_refuses_what_export_never_writes() -> None:
    assert not _validator().is_valid({"kernel_agent": {"usage": "lots"}})
    assert not _validator("CellMetadata").is_valid({"status": "exploded"})
    assert not _validator("PlanNotebookMetadata").is_valid({"kernel_agent": {"plan": {"nodes": [{"title": "no id"}]}}})
    assert not _validator("PlanNotebookMetadata").is_valid({"kernel_agent": {"counts": {"done": "all"}}})
    assert not _validator("PlanCellMetadata").is_valid({"status": "exploded"})
    assert not _validator("PlanCellMetadata").is_valid({"node": 3})


def test_the_plan_is_recorded_as_the_model_designs_it() -> None:
    """``PlanRecord`` and ``PlanNodeRecord`` have the fields of the plan's wire shape (``agent/plan/schema.py``)."""
    assert set(PlanRecord.model_fields) == set(PlanSpec.model_fields)
    assert set(PlanNodeRecord.model_fields) == set(NodeSpec.model_fields)


def _names(record: type[Any]) -> set[str]:
    """A record dataclass's fields and properties: what a shape may be written from by attribute."""
    properties = {name for name, value in vars(record).items() if isinstance(value, property)}
    return {field.name for field in dataclasses.fields(record)} | properties


@pytest.mark.parametrize(
    ("shape", "records", "apart"),
    [
        (RunMetadata, (RunInfo, Run), {"schema_", "version", "view"}),  # the writer's, not the run's
        (TurnRecord, (Turn,), set()),
        (RoundRecord, (Round,), {"round"}),  # written from Round.index
        (ResultRecord, (ExecutionResult,), set()),
        (UsageShape, (Usage,), set()),
        (ArtifactShape, (Artifact,), set()),
    ],
)
def test_every_field_is_written_from_the_records_attribute_of_its_name(
    shape: type[Any], records: tuple[type[Any], ...], apart: set[str]
) -> None:
    named = set().union(*(_names(record) for record in records))
    assert set(shape.model_fields) - apart <= named


def _notebook(tmp_path: Path, run_meta: dict[str, Any], cell_meta: dict[str, Any]) -> Path:
    cell = {
        "cell_type": "code",
        "id": "c",
        "execution_count": 1,
        "metadata": {"kernel_agent": {"role": "code", **cell_meta}},
        "outputs": [],
        "source": "x = 1",
    }
    document = {"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernel_agent": run_meta}, "cells": [cell]}
    path = tmp_path / "hand-edited.ipynb"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_mistyped_metadata_reads_as_its_defaults_and_never_raises(tmp_path: Path) -> None:
    """Values that crashed the field-by-field reader (a list where a status goes: unhashable) read as defaults."""
    path = _notebook(
        tmp_path,
        {"view": "full", "stop_reason": ["answer"], "turns": [{"task": "t", "first_round": True}, 7], "usage": []},
        {
            "round": 1,
            "status": ["ok"],
            "error": "KeyError",
            "rebuilt_cells": [1, True, "2"],
            "artifacts": [{"size": 1}],
        },
    )
    loaded = load_run(path)
    assert loaded.run.stop_reason is None and loaded.run.usage == Usage()
    assert [(turn.task, turn.first_round) for turn in loaded.run.turns] == []  # one turn: the current one
    (only,) = loaded.rounds
    assert only.result is not None and only.result.status == "ok" and only.result.rebuilt_cells == (1,)
    assert only.artifacts == ()


def test_unknown_keys_are_ignored_and_a_well_formed_turn_kept(tmp_path: Path) -> None:
    turns = [{"task": "first", "answer": 3, "extra": {"deep": [1]}}, {"task": "second"}]
    path = _notebook(tmp_path, {"view": "full", "turns": turns, "from_the_future": True}, {"round": 1, "new": 1})
    loaded = load_run(path)
    assert [(turn.task, turn.answer) for turn in loaded.run.turns] == [("first", None)]
    assert loaded.run.info.question == "second" and CellMetadata.read({"new": 1}) == CellMetadata.read({})


def test_live_sources_are_recorded_by_name_and_kind_and_read_back(tmp_path: Path) -> None:
    info = RunInfo(task="t", sources=(RecordedSource("shop", "postgresql"),))
    written = run_metadata(Run(info=info), "full", "")
    assert written["sources"] == [{"name": "shop", "kind": "postgresql"}]
    assert "sources" not in run_metadata(Run(info=RunInfo(task="t")), "full", "")  # older records stay as they were
    path = _notebook(
        tmp_path, {"view": "full", "sources": [{"name": "shop", "kind": "postgresql"}, 3, {"kind": "x"}]}, {}
    )
    assert load_run(path).run.info.sources == (RecordedSource("shop", "postgresql"),)  # the malformed ones dropped
