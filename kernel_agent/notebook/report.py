"""The order a run's notebook is read in as a report (``show --html``, the service's report): ``report_order``.

Owns what the page shows first, not how it looks (``html.py`` renders; its template folds the setup cell): the
answer right after the task, with the line breaks the model meant kept (``hard_breaks``), then a heading per
round above that round's cells. Pure: a notebook in, a reordered copy out; the notebook on disk keeps the
export's layout (``export.py``), which ``load``, ``resume`` and ``replay`` read. A notebook that is not ours, or
a plan's (its answer already leads and its tasks have headings), comes back as it was.
"""

from __future__ import annotations

import re
from typing import Any

from .._nbformat import NotebookNode, nbformat
from .metadata import METADATA_KEY, CellMetadata, RunMetadata, read_block, read_cell

__all__ = ["hard_breaks", "report_order"]


def report_order(nb: NotebookNode) -> NotebookNode:
    """A copy of ``nb`` laid out as a report: header, the run's answer, the setup, then each round under
    a ``Round N`` heading (follow-up questions and their answers where they were asked)."""
    copy: NotebookNode = nbformat.from_dict(nb)
    cells = [(cell, read_cell(cell, CellMetadata)) for cell in copy.get("cells", [])]  # each read once
    roles = [about.role for _, about in cells]
    if read_block(copy.get("metadata"), RunMetadata) is None or "task" in roles:
        return copy
    answers = [index for index, role in enumerate(roles) if role == "answer"]
    for index in answers:
        cells[index][0]["source"] = _answer_breaks(str(cells[index][0].get("source", "")))
    if answers:
        final = cells.pop(answers[-1])
        cells.insert(1 if roles and roles[0] == "header" else 0, final)
    copy["cells"] = _with_round_headings(cells)
    return copy


_ENDS_A_LINE = re.compile(r"[.!?:;\]。！？]\s*$")  # a sentence's end, a label's ``@name[value]``
_STARTS_A_LINE = re.compile(r"^\s*(@|[-*+]\s|\d+[.)]\s|\||#|>)")  # a label, a list item, a table row, ...


def hard_breaks(text: str) -> str:
    """An answer as Markdown whose line breaks read as the model meant them: a break after a sentence's end
    or a ``@name[value]``, or before a list item, a table row, a heading or a quote, is kept (two trailing
    spaces); one that only wrapped a sentence at the model's width is left soft, so the text re-wraps at the
    reader's (no ragged lines at 80 columns). Code fences are untouched. Pure."""
    lines, fenced = text.splitlines(), False
    out = []
    for index, line in enumerate(lines):
        fence = line.lstrip().startswith(("```", "~~~"))
        fenced = fenced != fence
        following = lines[index + 1] if index + 1 < len(lines) else ""
        meant = _ENDS_A_LINE.search(line) or _STARTS_A_LINE.match(following) or not following.strip()
        out.append(line if fenced or fence or not line.strip() or not meant else line.rstrip() + "  ")
    return "\n".join(out)


def _answer_breaks(source: str) -> str:
    heading, _, body = source.partition("\n\n")
    return f"{heading}\n\n{hard_breaks(body)}" if body else source


def _with_round_headings(cells: list[tuple[Any, CellMetadata]]) -> list[Any]:
    out: list[Any] = []
    shown: set[int] = set()
    for cell, about in cells:
        number = about.round
        if number is not None and number >= 1 and number not in shown and about.role != "answer":
            shown.add(number)
            out.append(nbformat.from_dict(_heading(number)))
        out.append(cell)
    return out


def _heading(number: int) -> dict[str, Any]:
    about = CellMetadata.model_validate({"role": "round-heading", "round": number}).model_dump(exclude_unset=True)
    return {
        "cell_type": "markdown",
        "id": f"round-heading-{number}",
        "metadata": {METADATA_KEY: about},
        "source": f"### Round {number}",
    }
