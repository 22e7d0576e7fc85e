"""The HTML report and the notebook as a reader meets them: the answer first, round headings, the setup folded.

Pure: a ``Run`` built by hand, exported and rendered with nbconvert (no kernel).
"""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from kernel_agent.cli import cli
from kernel_agent.notebook.export import answer_body, build_notebook, export_run
from kernel_agent.notebook.html import render_node
from kernel_agent.notebook.report import hard_breaks, report_order
from kernel_agent.records import Round, Run, RunInfo
from kernel_agent.result import ExecutionResult

SETUP = "import pandas as pd\n" + "".join(f"setting_{n} = {n}\n" for n in range(30))
ANSWER = "## Answer\n\n@mean_age[0.4610]\n@mean_sex[0.5052]\n\n```python\nx = 1\ny = 2\n```"


def run() -> Run:
    ok = ExecutionResult(status="ok", outputs=({"output_type": "stream", "name": "stdout", "text": "41\n"},))
    rounds = (
        Round(1, "Look.", reasoning="Look at the data first.", code="print(41)", result=ok),
        Round(2, "Again.", reasoning="Check it again.", code="print(41)", result=ok),
        Round(3, ANSWER, answer=ANSWER),
    )
    info = RunInfo(task="What are the means?", model="m", protocol="tools", setup_code=SETUP)
    return Run(info=info, rounds=rounds, answer=ANSWER, stop_reason="answer", setup_result=ok)


def test_the_notebook_says_answer_once_and_jupyterlab_folds_its_setup_cell() -> None:
    nb = build_notebook(run())

    setup = next(cell for cell in nb.cells if cell.metadata["kernel_agent"]["role"] == "setup")
    assert setup.metadata["jupyter"] == {"source_hidden": True}
    answer = nb.cells[-1].source
    assert answer.startswith("## Answer\n\n@mean_age") and answer.count("Answer") == 1
    assert answer_body("**Final answer:**\nforty-one") == "forty-one"
    assert answer_body("Answer is forty-one") == "Answer is forty-one"  # prose, not a heading


def test_the_report_puts_the_answer_first_then_a_heading_per_round() -> None:
    nb = build_notebook(run())

    ordered = report_order(nb)

    roles = [cell.metadata["kernel_agent"].get("role") for cell in ordered.cells]
    assert roles[:3] == ["header", "answer", "setup"]
    headings = [cell.source for cell in ordered.cells if cell.metadata["kernel_agent"].get("role") == "round-heading"]
    assert headings == ["### Round 1", "### Round 2"]  # round 3 is the answer, already first
    assert "@mean_age[0.4610]  \n@mean_sex[0.5052]" in ordered.cells[1].source  # a hard line break
    assert "x = 1\ny = 2" in ordered.cells[1].source  # code fences keep their lines as they are
    assert [cell.source for cell in nb.cells] != [cell.source for cell in ordered.cells]  # the notebook untouched
    assert nb.cells[-1].metadata["kernel_agent"]["role"] == "answer"


def test_the_html_report_shows_the_answer_with_its_breaks_before_the_rounds_and_folds_the_setup() -> None:
    page = render_node(build_notebook(run()), "run.ipynb")

    answer = page.index("@mean_age[0.4610]")
    order = [page.index(text) for text in ("Round 1", "Look at the data first.", "Round 2", "Check it again.")]
    assert answer < order[0] and order == sorted(order)
    assert re.search(r"@mean_age\[0\.4610\]<br\s*/?>\s*@mean_sex", page)
    details = re.search(r"<details[^>]*>\s*<summary>Setup cell[^<]*</summary>(.*?)</details>", page, re.DOTALL)
    assert details is not None and "setting_29" in details.group(1)
    assert page.count("setting_29") == 1  # the setup is shown once, inside the fold
    assert "<script" not in page.lower()  # still the cleaned page


def test_hard_breaks_leaves_blank_lines_and_fences_alone() -> None:
    assert hard_breaks("a.\nb\n\n~~~\nc\n~~~") == "a.  \nb  \n\n~~~\nc\n~~~"


def test_hard_breaks_keeps_the_breaks_the_model_meant_and_joins_its_wrapping() -> None:
    assert hard_breaks("grew by a\nthird") == "grew by a\nthird  "  # a wrap inside a sentence stays soft
    assert hard_breaks("@a[1]\n@b[2]") == "@a[1]  \n@b[2]  "  # one label a line
    assert hard_breaks("Findings\n- one\n| x |") == "Findings  \n- one  \n| x |  "  # before a list or a table


def test_show_prints_the_answer_with_its_line_breaks_before_the_rounds(tmp_path: Path) -> None:
    notebook = export_run(run(), tmp_path / "run.ipynb")

    shown = CliRunner().invoke(cli, ["show", str(notebook)], catch_exceptions=False, terminal_width=100).output

    assert shown.index("@mean_age[0.4610]") < shown.index("Round 1") < shown.index("Round 2")
    age, sex = (
        next(n for n, line in enumerate(shown.splitlines()) if key in line) for key in ("@mean_age", "@mean_sex")
    )
    assert sex == age + 1  # on lines of their own, as written
