"""One way to dispatch on an event: by its class. ``kind`` is an event's name on the wire only
(``to_dict``'s ``"event"``), and its JSON is the one adapter's (``shapes.event_dict``)."""

from __future__ import annotations

import ast
import dataclasses
import json
import typing
from pathlib import Path

import kernel_agent
from kernel_agent import events
from kernel_agent.records import Round, Usage
from kernel_agent.shapes import UsageShape

PACKAGE = Path(kernel_agent.__file__).parent
FRONT_ENDS = ("cli", "magic", "jupyter", "server", "mcp", "eval")


def _kind_reads(path: Path) -> list[str]:
    """Where ``path`` reads an event object's ``kind`` (``event.kind``), by line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "kind"
            and isinstance(node.value, ast.Name)
            and ("event" in node.value.id or node.value.id == "ev")
        ):
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_front_ends_dispatch_on_the_events_class_never_its_kind() -> None:
    modules = [path for layer in FRONT_ENDS for path in sorted((PACKAGE / layer).rglob("*.py"))]
    assert len(modules) > 20
    assert [where for path in modules for where in _kind_reads(path)] == []


def test_every_event_of_a_run_or_plan_has_its_own_kind() -> None:
    classes = {*typing.get_args(events.Event), *typing.get_args(events.PlanEvent)}
    kinds = [cls.kind for cls in classes]
    assert len(set(kinds)) == len(classes) and all(kinds)


def test_a_rounds_usage_in_an_event_is_the_notebooks_shape() -> None:
    """The events' JSON and the notebook's metadata write a record with one shape (``reasoning_tokens`` only
    when there are some)."""
    for usage in (Usage(1, 2, 3), Usage(1, 2, 3, 2)):
        wire = events.RoundFinished(Round(1, "r", usage=usage)).to_dict()
        assert wire["round"]["usage"] == UsageShape.of(usage).model_dump()
        assert json.loads(json.dumps(wire)) == wire
    finished = events.ExecutionFinished(1, dataclasses.replace(_result(), duration_s=1.23456))
    assert finished.to_dict()["result"]["duration_s"] == 1.235


def _result() -> typing.Any:
    from kernel_agent.result import ExecutionResult

    return ExecutionResult(status="ok", outputs=(), execution_count=1)
