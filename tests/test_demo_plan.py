"""``make demo-plan`` (``kernel-agent plan --demo``) with no model configured: the scripted plan runs on the
bundled sales data in a real kernel, every number its findings quote is printed by its own code, one node
is fixed after a mistake, and the notebook replays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from click.testing import CliRunner

from kernel_agent.agent.plan.state import PlanState, state_path
from kernel_agent.cli import cli
from kernel_agent.notebook.replay import replay

pytestmark = pytest.mark.kernel


def test_plan_demo_runs_the_scripted_plan_on_the_bundled_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "KERNEL_AGENT_")):
            monkeypatch.delenv(name)
    notebook = tmp_path / "demo-plan.ipynb"
    result = CliRunner().invoke(
        cli,
        ["plan", "--demo", "--workspace", str(tmp_path / "run"), "--out", str(notebook), "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.output.splitlines()]
    finished = {e["node_id"]: (e["status"], e["attempts"]) for e in events if e["event"] == "node_finished"}
    assert finished == {
        "clean": ("done", 1),
        "breakdown": ("done", 1),
        "trend": ("done", 1),
        "discounts": ("done", 2),
        "findings": ("done", 1),
    }

    state = PlanState.load(state_path(notebook))
    printed = "".join(r.output_text(5000) for r in state.results.values())
    findings = state.results["findings"].text
    for number in (
        "2,981 of 3,000",
        "2,895,658.01",
        "35.6",
        "58.5",
        "+22.9%",
        "+64%",
        "r = 0.12",
        "0.28 to 0.39",
        "mean 0.33",
        "10.80",
        "18.85",
    ):
        assert number in printed, number  # the code really computed what the findings quote
    assert "2,895,658.01" in findings and "r = 0.12" in findings and "+64%" in findings
    assert state.results["discounts"].failures == ("KeyError: 'discount_rate'",)
    report = notebook.with_name("demo-plan.report.md").read_text()
    assert "![Monthly revenue trend (1)](demo-plan_figures/trend-1.png)" in report
    # Scripted replies say so, in the report, the notebook and its HTML page alike.
    assert "**The model replies in this report were scripted:**" in report.splitlines()[2]
    plan_notebook = nbformat.read(notebook, as_version=4)
    assert "were scripted" in plan_notebook.cells[0].source and plan_notebook.metadata["kernel_agent"]["scripted"]
    assert "were scripted" in notebook.with_suffix(".html").read_text(encoding="utf-8")
    assert state.scripted is True
    check = replay(notebook)
    assert check.ok, check.to_text()


def test_plan_demo_refuses_a_task_or_data(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", "--demo", "my own task"])
    assert result.exit_code == 2 and "--demo plans the bundled task" in result.output


def test_plan_demo_says_scripted_first_and_shows_its_findings_and_html(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "KERNEL_AGENT_"))}
    result = subprocess.run(
        [sys.executable, "-m", "kernel_agent.cli", "plan", "--demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "No model configured: playing the scripted plan replies.", lines[:3]
    assert "scripted" in lines[1] and "played back" in result.stdout  # the panel, before the plan's tree
    assert result.stdout.index("scripted") < result.stdout.index("Plan (")
    findings = result.stdout[result.stdout.index("Findings") :]
    assert "West 35.6%" in findings and "r = 0.12" in findings  # the answer, not only paths
    assert "html: notebooks/demo-plan.html" in lines
    assert (tmp_path / "notebooks" / "demo-plan.html").is_file()
