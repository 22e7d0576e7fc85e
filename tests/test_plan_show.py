"""``show`` and ``replay --check`` on a plan notebook (a scripted model over the real openai SDK, a real kernel),
and ``show`` keeping an answer's line breaks (pure)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from openai_server import OpenAIServer, Reply
from rich.console import Console

from kernel_agent.cli import cli
from kernel_agent.cli.show import answer_markdown
from kernel_agent.notebook.plan_view import load_plan

PLAN = {
    "directions": ["descriptive"],
    "nodes": [
        {"id": "load", "title": "Load the numbers"},
        {"id": "stats", "title": "Mean and spread", "depends_on": ["load"]},
        {"id": "answer", "title": "The answer", "kind": "text", "depends_on": ["stats"]},
    ],
}
ANSWER = "@mean_x[2.8000]\n@std_x[1.7889]"


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


def plain(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_an_answers_line_breaks_are_kept() -> None:
    console = Console(width=80, record=True)
    console.print(answer_markdown("@mean_age[0.4610]\n@mean_sex[0.5052]\n\n```\na\nb\n```"))
    lines = [line.strip() for line in console.export_text().splitlines() if line.strip()]
    assert lines[:2] == ["@mean_age[0.4610]", "@mean_sex[0.5052]"]
    assert "a" in lines and "b" in lines  # a fence is kept as it is


def test_an_answer_wrapped_at_the_models_width_rewraps_at_the_readers() -> None:
    """Issue 49: an answer the model wrapped at ~100 columns printed ragged at 80 (each of its breaks kept)."""
    wrapped = (
        "Revenue grew 22.9% from 2023 to 2024, led by the West region, whose Electronics sales alone\n"
        "rose by a third; discounts lift units sold with an elasticity of -1.63.\n"
        "Findings:\n- the West leads\n- discounts pay"
    )
    console = Console(width=80, record=True)
    console.print(answer_markdown(wrapped))
    lines = [line.rstrip() for line in console.export_text().splitlines() if line.strip()]
    assert lines[0].startswith("Revenue grew") and len(lines[0]) > 70  # filled to the width, not cut at "alone"
    assert "alone rose by a third" in plain(" ".join(lines))  # the wrap became a space
    assert any(line.strip() == "Findings:" for line in lines)  # a break after a sentence's end is kept
    assert sum(line.lstrip().startswith("•") for line in lines) == 2


@pytest.mark.kernel
def test_show_and_replay_understand_a_plan_notebook(openai_server: OpenAIServer, tmp_path: Path) -> None:
    openai_server.add(
        Reply("```json\n" + json.dumps(PLAN) + "\n```", usage=(100, 20)),
        Reply(fence("x = [3, 1, 4, 1, 5]\nprint('loaded', len(x))"), usage=(200, 30)),
        Reply("Five numbers are loaded.", usage=(50, 5)),
        Reply(fence("import statistics\nprint('mean', sum(x) / len(x), 'std', round(statistics.stdev(x), 4))"),
              usage=(300, 40)),
        Reply("The mean is 2.8.", usage=(60, 6)),
        Reply(ANSWER, usage=(400, 50)),
    )  # fmt: skip
    notebook = tmp_path / "plan.ipynb"
    ran = CliRunner().invoke(
        cli,
        ["plan", "Describe x", "--model", "plan-model", "--base-url", openai_server.base_url,
         "--workspace", str(tmp_path / "ws"), "--out", str(notebook), "--quiet"],
        catch_exceptions=False,
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output

    assert "tools" in openai_server.requests[1] and openai_server.requests[1]["tool_choice"] == "auto"
    assert "tools" not in openai_server.requests[5] and "tool_choice" not in openai_server.requests[5]  # prose task
    plan = load_plan(notebook)
    assert plan is not None and plan.model == "plan-model" and plan.protocol == "tools"
    assert [(t.number, t.id, t.status) for t in plan.tasks] == [
        (1, "load", "done"), (2, "stats", "done"), (3, "answer", "done"),
    ]  # fmt: skip
    assert plan.answer == ANSWER and plan.started_at and plan.finished_at
    assert all(t.seconds > 0 for t in plan.tasks)
    assert [t.usage.total_tokens for t in plan.tasks] == [285, 406, 450]  # each task's own replies

    html = notebook.with_suffix(".html").read_text(encoding="utf-8")  # the report: the answer first, then each task
    assert html.index(">Answer<") < html.index("Load the numbers") < html.index("Mean and spread")
    assert re.search(r"status: <strong>done</strong> · \d+\.\d s", html)
    assert re.search(r"@mean_x\[2\.8000\]<br\s*/?>\s*@std_x", html)  # its line breaks kept

    shown = CliRunner().invoke(cli, ["show", str(notebook)], terminal_width=120)
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert "model plan-model · protocol tools" in out and "unknown" not in out
    assert "Task 1/3: load · Load the numbers" in out and "Task 3/3: answer · The answer" in out
    assert "Round " not in out and "No answer" not in out and "not reported" not in out
    assert "mean 2.8 std 1.7889" in out
    answer_lines = [line.strip("│ ") for line in out.split("Answer", 1)[1].splitlines()]
    assert "@mean_x[2.8000]" in answer_lines and "@std_x[1.7889]" in answer_lines  # on lines of their own
    assert "3/3 task(s) completed" in out
    assert "1,261 tokens" in plain(out)  # the planning request's and every task's

    checked = CliRunner().invoke(cli, ["replay", str(notebook), "--check"], terminal_width=120)
    assert checked.exit_code == 0, checked.output
    rows = [line.split() for line in checked.output.splitlines() if line.strip().startswith("cell")]
    assert [row[2:4] for row in rows] == [["setup", "match"], ["task", "load"], ["task", "stats"]]
    assert all(row[4] == "match" for row in rows[1:])


def test_a_plan_notebook_from_before_times_were_recorded_still_shows_by_task(tmp_path: Path) -> None:
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

    def of(node: str) -> dict[str, dict[str, str]]:
        return {"kernel_agent": {"node": node}}

    nb = new_notebook(
        cells=[
            new_markdown_cell("# Plan: Describe x"),
            new_code_cell("import pandas as pd", metadata={"kernel_agent": {"role": "setup"}}),
            new_markdown_cell(
                "## Load\n\nNode `load` (code) · depends on: none · status: **done**", metadata=of("load")
            ),
            new_code_cell("x = [1]\nprint(len(x))", metadata=of("load"), outputs=[new_output("stream", text="1\n")]),
            new_markdown_cell("## Say\n\nNode `say` (text) · depends on: load · status: **done**", metadata=of("say")),
            new_markdown_cell("One number.", metadata={}),
        ]
    )
    nb.metadata["kernel_agent"] = {
        "task": "Describe x",
        "plan": {"nodes": [{"id": "load"}, {"id": "say", "kind": "text"}]},
    }
    path = tmp_path / "old.ipynb"
    nbformat.write(nb, path)
    plan = load_plan(path)
    assert plan is not None and [(t.number, t.id, t.title) for t in plan.tasks] == [
        (1, "load", "Load"),
        (2, "say", "Say"),
    ]
    assert plan.tasks[0].cells == (
        ("x = [1]\nprint(len(x))", ({"output_type": "stream", "name": "stdout", "text": "1\n"},)),
    )
    assert plan.tasks[1].text == "One number."  # written without its task's id then: it follows the task's header
    shown = CliRunner().invoke(cli, ["show", str(path)], terminal_width=120)
    assert shown.exit_code == 0, shown.output
    assert "model not recorded · protocol not recorded" in shown.output and "Task 2/2: say · Say" in shown.output
    assert "time not recorded" in shown.output and "Round" not in shown.output
