"""``NotebookText``: a notebook's text exactly as nbformat writes it, reusing the cells it wrote before;
only cells it has not written are validated."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
from test_notebook import make_run

from kernel_agent.errors import NotebookError
from kernel_agent.notebook.export import View, build_notebook, notebook_text
from kernel_agent.notebook.text import NotebookText

GOLDEN = Path(__file__).parent / "golden"


def _hand_made() -> nbformat.NotebookNode:
    """Shapes nbformat's writer treats specially: multi-line sources and streams, a multi-line mimebundle,
    JSON data (never split), attachments, non-ASCII text, a transient field."""
    code = new_code_cell(
        "x = 'é'\nprint(x)\n",
        execution_count=3,
        outputs=[
            new_output("stream", name="stdout", text="é\nline two\n"),
            new_output(
                "execute_result",
                execution_count=3,
                data={"text/plain": "a\nb", "application/json": {"k": ["v\nw"]}, "text/html": "<b>\n</b>"},
            ),
        ],
    )
    code.metadata["trusted"] = True  # transient: nbformat leaves it out of the file
    markdown = new_markdown_cell("# 标题\n\n![x](attachment:x.png)")
    markdown["attachments"] = {"x.png": {"image/png": "iVBORw0KGgo=\n"}}
    nb = new_notebook(
        cells=[markdown, code, new_code_cell("")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )
    nb.metadata["signature"] = "transient too"
    value: nbformat.NotebookNode = nb
    return value


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.glob("*.ipynb")))
def test_a_golden_notebook_reads_as_nbformat_writes_it(name: str) -> None:
    nb = nbformat.read(GOLDEN / name, as_version=4)
    text = NotebookText()
    assert text(nb) == nbformat.v4.writes_json(nb)
    assert text(nb) == nbformat.v4.writes_json(nb)  # again, every cell reused


def test_special_shapes_and_an_empty_notebook_read_as_nbformat_writes_them() -> None:
    text = NotebookText()
    nb = _hand_made()
    assert text(nb) == nbformat.v4.writes_json(nb)
    assert "trusted" not in text(nb) and "signature" not in text(nb)
    empty = new_notebook()
    assert text(empty) == nbformat.v4.writes_json(empty)


def test_a_growing_run_is_written_as_nbformat_writes_it_at_every_save() -> None:
    finished = make_run()
    full, clean = NotebookText(), NotebookText()
    for count in range(len(finished.rounds) + 1):
        growing = replace(finished, rounds=finished.rounds[:count], answer=None, stop_reason=None, finished_at="")
        views: tuple[tuple[View, Callable[[nbformat.NotebookNode], str]], ...] = (("full", full), ("clean", clean))
        for view, text in views:
            nb = build_notebook(growing, view=view)
            assert text(nb) == nbformat.v4.writes_json(nb), (view, count)
    nb = build_notebook(finished)
    assert full(nb) == nbformat.v4.writes_json(nb)


def test_a_changed_cell_is_written_anew() -> None:
    text = NotebookText()
    nb = _hand_made()
    text(nb)
    nb.cells[1].outputs[0].text = "changed\n"
    assert '"changed\\n"' in text(nb)
    assert text(nb) == nbformat.v4.writes_json(nb)


def test_only_cells_not_written_before_are_validated() -> None:
    seen: list[list[str]] = []

    def validate(nb: nbformat.NotebookNode) -> None:
        seen.append([cell.source for cell in nb.cells])
        nbformat.validate(nb)

    text = NotebookText()
    nb = new_notebook(cells=[new_markdown_cell("a"), new_code_cell("b")])
    text(nb, validate)
    nb.cells.append(new_code_cell("c"))
    text(nb, validate)
    nb.nbformat_minor = 4  # another schema: everything is checked again
    for cell in nb.cells:
        del cell["id"]
    text(nb, validate)
    assert seen == [["a", "b"], ["c"], ["a", "b", "c"]]


def test_an_invalid_new_cell_is_refused_and_not_remembered(tmp_path: Path) -> None:
    text = NotebookText()
    nb = new_notebook(cells=[new_code_cell("ok")])
    notebook_text(nb, tmp_path / "x.ipynb", text)
    bad = new_code_cell("bad")
    bad.outputs = [{"output_type": "stream", "name": "stdout"}]  # no text: not a valid stream output
    nb.cells.append(bad)
    for _ in range(2):  # refused again: a refused cell is never taken as written
        with pytest.raises(NotebookError, match="invalid notebook"):
            notebook_text(nb, tmp_path / "x.ipynb", text)
    nb.cells.pop()
    assert notebook_text(nb, tmp_path / "x.ipynb", text) == nbformat.v4.writes_json(copy.deepcopy(nb)) + "\n"
