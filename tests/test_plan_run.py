"""Plan mode end to end in a real kernel with the scripted model: the DAG runs in one kernel,
a node is fixed after two failures, one fails for good and its dependant is skipped, the
notebook and report record it all, and the notebook replays."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from kernel_agent import Agent
from kernel_agent.agent.plan.runner import PlanOptions
from kernel_agent.agent.plan.state import PlanState, state_path
from kernel_agent.events import NodeFinished, NodeStarted, Notice, PlanFinished, PlanReady
from kernel_agent.model.scripted import ScriptedChatModel
from kernel_agent.notebook.replay import replay

pytestmark = pytest.mark.kernel

PLAN = {
    "directions": ["descriptive", "visualisation"],
    "nodes": [
        {"id": "load", "title": "Load the numbers", "purpose": "numbers for later tasks"},
        {"id": "stats", "title": "Mean", "depends_on": ["load"]},
        {"id": "broken", "title": "A task that cannot work"},
        {"id": "after_broken", "title": "Uses the broken task", "depends_on": ["broken"]},
        {
            "id": "plot",
            "title": "Line plot",
            "kind": "visualisation",
            "purpose": "see the trend",
            "depends_on": ["stats"],
        },
        {"id": "conclusion", "title": "Conclusion", "kind": "text", "depends_on": ["stats", "plot"]},
    ],
}


def fence(code: str) -> str:
    return f"Here you go:\n```python\n{code}\n```"


REPLIES = [
    "Sure! {this is not json",
    "```json\n" + json.dumps(PLAN) + "\n```",
    fence("# probe\nprint(40 + 2)"),
    fence("base = [3, 1, 4, 1, 5]\nprint('loaded', len(base))"),
    "Five numbers are loaded as `base`.",  # a reply without code: the task is done
    fence("raise ValueError('bad idea')"),
    fence("raise ValueError('still a bad idea')"),
    "I would rather not write code for this.",
    fence("print(undefined_name)"),
    fence("print(sum(base) / 0)"),
    fence("mean = sum(base) / len(base)\nprint('mean', mean)"),
    "The mean is 2.8.",
    fence(
        "import matplotlib.pyplot as plt\nplt.plot(base)\nplt.title(f'mean {mean}')\nplt.show()\nprint('mean', mean)"
    ),
    "The line wanders around its mean of 2.8.",
    "The mean of the numbers is 2.8; the plot shows no trend.",
]


def test_plan_runs_in_one_kernel_with_fixes_skips_report_and_replay(tmp_path: Path) -> None:
    notebook = tmp_path / "plan.ipynb"
    with Agent(chat_model=ScriptedChatModel(REPLIES)) as agent:
        events = list(
            agent.stream_plan(
                "Describe the numbers",
                workspace=tmp_path / "ws",
                notebook=notebook,
                options=PlanOptions(max_fix_attempts=2),
            )
        )
    notices = [e for e in events if isinstance(e, Notice)]
    assert len(notices) == 1 and "not valid JSON" in notices[0].message
    ready = next(e for e in events if isinstance(e, PlanReady))
    assert [n["id"] for n in ready.nodes] == ["load", "broken", "stats", "after_broken", "plot", "conclusion"]
    finished = {e.node_id: e for e in events if isinstance(e, NodeFinished)}
    assert {k: v.status for k, v in finished.items()} == {
        "load": "done",
        "broken": "failed",
        "stats": "done",
        "after_broken": "skipped",
        "plot": "done",
        "conclusion": "done",
    }
    assert finished["stats"].attempts == 3 and finished["broken"].attempts == 3
    assert "broken failed" in finished["after_broken"].reason
    assert finished["plot"].figures == 1
    assert [e.attempt for e in events if isinstance(e, NodeStarted) and e.node_id == "stats"] == [1, 2, 3]
    done = events[-1]
    assert isinstance(done, PlanFinished)
    assert done.counts == {"total": 6, "done": 4, "failed": 1, "skipped": 1, "pending": 0}

    state = PlanState.load(state_path(notebook))
    assert state.results["stats"].failures == (
        "NameError: name 'undefined_name' is not defined",
        "ZeroDivisionError: division by zero",
    )
    assert state.results["broken"].failures[-1] == "the reply had no code"
    probe, load = state.results["load"].cells
    assert probe.probe and probe.outputs[0]["text"] == "42\n" and not load.probe
    assert state.results["plot"].analysis.startswith("The line wanders")
    assert state.results["load"].analysis == "Five numbers are loaded as `base`."
    assert state.results["stats"].analysis == "The mean is 2.8." and state.results["stats"].reason == ""

    report = Path(done.report).read_text()
    assert report.index("The mean of the numbers is 2.8") < report.index("### Load the numbers")
    assert "![Line plot (1)](plan_figures/plot-1.png)" in report
    assert (tmp_path / "plan_figures" / "plot-1.png").read_bytes().startswith(b"\x89PNG")
    assert "*Analysis:* The line wanders" in report and "| 6 | 4 | 1 | 1 | 0 |" in report

    nb = nbformat.read(notebook, as_version=4)
    headers = [c["source"] for c in nb["cells"] if c["cell_type"] == "markdown" and c["source"].startswith("## ")]
    assert [h.splitlines()[0] for h in headers] == [
        "## Answer",  # the conclusion first
        "## Load the numbers",
        "## A task that cannot work",
        "## Mean",
        "## Uses the broken task",
        "## Line plot",
        "## Conclusion",
    ]
    code = [c["source"] for c in nb["cells"] if c["cell_type"] == "code"]
    assert "mean = sum(base) / len(base)\nprint('mean', mean)" in code and not any("raise" in c for c in code)
    page = Path(done.html).read_text()
    assert "Line plot" in page and "data:image/png;base64," in page
    report_check = replay(notebook)
    assert report_check.ok, report_check.to_text()
