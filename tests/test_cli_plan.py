"""``kernel-agent plan``'s rendering when stdout is not a terminal: the tree once, then a line per node event
as it happens (a live display would print nothing until the end), with the attempts a resume kept."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kernel_agent.cli.plan import drive_plan
from kernel_agent.events import NodeFinished, NodeStarted, PlanFinished, PlanReady


def test_a_piped_plan_prints_each_node_as_it_goes(capsys: pytest.CaptureFixture[str]) -> None:
    nodes = (
        {"id": "load", "title": "Load", "kind": "code", "depends_on": [], "status": "done", "attempts": 3},
        {
            "id": "plot",
            "title": "Plot",
            "kind": "visualisation",
            "depends_on": ["load"],
            "status": "pending",
            "attempts": 0,
        },
    )
    seen: list[str] = []

    def events() -> Iterator[Any]:
        yield PlanReady(("descriptive",), nodes)
        yield NodeStarted("plot", "Plot", 1)
        seen.append(capsys.readouterr().out)  # what a pipe has received before the plan ends
        yield NodeFinished("plot", "done", 1, 1, "")
        counts = {"total": 2, "done": 2, "failed": 0, "skipped": 0, "pending": 0}
        yield PlanFinished(counts, "p.ipynb", "p.md", "p.html")

    assert drive_plan(events(), as_json=False, quiet=False) == 0
    assert "load: Load" in seen[0] and "3 attempt(s)" in seen[0]  # kept across --resume
    assert seen[0].rstrip().endswith("running  plot")
    rest = capsys.readouterr().out
    assert "done     plot · 1 figure(s)" in rest and "2/2 completed" in rest
