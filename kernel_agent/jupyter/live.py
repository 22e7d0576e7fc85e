"""The open notebook's shared document on the server: ``LiveNotebook`` writes a run's cells into it.

Owns the agent's cells in one notebook as JupyterLab shows it: the notebook's YNotebook in
jupyter-server-ydoc's room (the document every browser tab on it edits), never the file, which
the room saves. While a round's code runs, ``running`` shows its reasoning and code at once and
``output`` streams what it prints into that code cell; ``finished`` puts its outputs (figures too) and
execution count in as soon as the code is done; then
``sync`` makes the agent's cells equal the run's exported full view, read back
from the notebook the run writes after each round (``notebook/export.py`` lays them out: the
header, the setup cell, per round the reasoning and the code with its outputs, timed-out or
crashed code commented out and tagged, the answer last). Cells are matched by their stable ids
(``round-3-code``): a cell of ours is rewritten only when the run's version of it changed since we
wrote it, so the user's edits to earlier cells stay, and then in place, field by field (the page keeps
its cell widget: a replaced cell costs the browser a new editor); new cells go after our previous one; cells the
user added stay where they are. Does not run anything or talk to the chat (``persona.py``).
Rich outputs go in as ``safe.html.safe_bundle`` leaves them (no script, no external image, SVG as an
image), markdown as ``safe.html.markdown_source`` leaves it (raw HTML as text, images as links): the
user's notebook shows the run's content, it does not obey it (JupyterLab's own policy for cells it did
not run still loads external images).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4.rwbase import rejoin_lines
from pycrdt import Map, Text

from .._loop import in_thread
from ..errors import NotebookError
from ..notebook.export import KERNELSPEC, METADATA_KEY
from ..notebook.load import read_json_record
from ..notebook.metadata import CellMetadata, read_cell
from ..safe.html import markdown_source, safe_bundle

__all__ = ["STARTING_ID", "LiveNotebook", "exported_cells", "new_notebook"]

STARTING_ID = "kernel-agent-starting"  # the cell a notebook we create starts with, until the run's first cells


def new_notebook() -> nbformat.NotebookNode:
    """The notebook ``open`` creates for a run: never empty (a page that opens an empty notebook gives it a
    blank code cell of its own, saved with the run's cells), its one cell a note that the first ``sync``
    replaces with the run's own."""
    starting = nbformat.v4.new_markdown_cell(
        "*kernel-agent is starting the run; its cells appear here.*",
        id=STARTING_ID,
        metadata={METADATA_KEY: {"role": "starting"}},
    )
    notebook: nbformat.NotebookNode = nbformat.v4.new_notebook(
        cells=[starting], metadata={"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}}
    )
    return notebook


log = logging.getLogger(__name__)


def exported_cells(path: Path) -> list[dict[str, Any]]:
    """The cells of the run's full notebook at ``path`` (a host record, outside any workspace), as plain dicts.
    Raises ``NotebookError`` when it cannot be read."""
    document = read_json_record(path, "run's notebook")  # through the door, bounded
    try:  # written and validated by us: no second validation (nbformat.read), multi-line strings joined as it does
        nb = rejoin_lines(nbformat.from_dict(document))
        cells = nb["cells"]
    except (ValueError, KeyError, TypeError) as exc:
        raise NotebookError(f"cannot read the run's notebook: {exc}", path=str(path)) from exc
    return [_plain(_shown_cell(cell)) for cell in cells]


def _shown_cell(cell: dict[str, Any]) -> dict[str, Any]:
    role = read_cell(cell, CellMetadata).role
    if cell.get("cell_type") == "markdown" and role != "thinking":  # the export escapes the thinking itself
        return {**cell, "source": markdown_source(str(cell.get("source", "")))}
    if cell.get("cell_type") == "code":
        return {**cell, "outputs": shown_outputs(cell.get("outputs", []))}
    return cell


def shown_outputs(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``outputs`` with every rich output's bundle made safe to show (``safe.html.safe_bundle``)."""
    shown = []
    for output in outputs:
        if output.get("output_type") in ("display_data", "execute_result"):
            bundle = safe_bundle(output.get("data") or {}, output.get("metadata"))
            output = {**output, "data": bundle.data, "metadata": bundle.metadata}
        shown.append(output)
    return shown


class LiveNotebook:
    """The agent's cells in the notebook at ``path`` (relative to the server's root), through ``ydoc`` (the
    server's ``YDocExtension``). ``open`` first; then ``sync`` after each round."""

    def __init__(self, ydoc: Any, contents: Any, path: str) -> None:
        self.ydoc = ydoc
        self.contents = contents
        self.path = path
        self.document: Any = None
        self._created = False
        self._written: dict[str, dict[str, Any]] = {}
        self._tail: str | None = None  # the id of the last cell of the run's view (its answer, or "in progress")

    def __repr__(self) -> str:
        return f"<LiveNotebook {self.path} cells={len(self._written)}>"

    async def open(self) -> None:
        """Create the notebook when it does not exist, then join its shared document.
        Raises ``NotebookError`` when the server has no shared document for it."""
        if not await _maybe_async(self.contents.file_exists(self.path)):
            nb = new_notebook()
            await _maybe_async(self.contents.save({"type": "notebook", "format": "json", "content": nb}, self.path))
            self._created = True
        self.document = await self.ydoc.get_document(
            path=self.path, content_type="notebook", file_format="json", copy=False, create=True
        )
        if self.document is None:
            raise NotebookError("the server has no shared document for the notebook", path=self.path)

    async def sync_from(self, record: Path) -> int:
        """``sync`` with the cells of the run's notebook at ``record``; the number of cells written."""
        return self.sync(await in_thread(exported_cells, record))

    def sync(self, cells: list[dict[str, Any]]) -> int:
        """Make the agent's cells in the document equal ``cells`` (see the module); the number written."""
        document = self.document
        written = 0
        anchor: int | None = None
        with document.ydoc.transaction():  # one change for the pages: the notebook is never seen empty
            if self._created and not self._written:  # ours come first: the note goes, and a blank cell
                for index in reversed(range(document.cell_number)):  # a page gave the notebook, if any
                    ycell = document.ycells[index]
                    blank = document.cell_number == 1 and not str(ycell["source"])
                    if str(ycell.get("id")) == STARTING_ID or blank:
                        del document.ycells[index]
            ids = [str(ycell.get("id")) for ycell in document.ycells]
            for cell in cells:
                cell_id = cell["id"]
                if cell_id in ids:
                    index = ids.index(cell_id)
                    if self._written.get(cell_id) != cell:
                        _update(document, index, cell)
                        written += 1
                else:
                    index = len(ids) if anchor is None else anchor + 1
                    document.ycells.insert(index, document.create_ycell(cell))
                    ids.insert(index, cell_id)
                    written += 1
                self._written[cell_id] = cell
                anchor = index
        self._tail = cells[-1]["id"] if cells else None
        return written

    def running(self, index: int, reasoning: str, code: str) -> None:
        """Show round ``index``'s reasoning and code while the code runs, where the run's view will have
        them (before its answer cell); ``sync`` replaces them with the finished round's cells."""
        meta = {"round": index, "running": True}
        cells: list[dict[str, Any]] = (
            [
                {
                    "id": f"round-{index}-reasoning",
                    "cell_type": "markdown",
                    "source": markdown_source(reasoning),
                    "metadata": {METADATA_KEY: {"role": "reasoning", **meta}},
                }
            ]
            if reasoning.strip()
            else []
        )
        cells.append(
            {
                "id": f"round-{index}-code",
                "cell_type": "code",
                "source": code,
                "outputs": [],
                "execution_count": None,
                "metadata": {METADATA_KEY: {"role": "code", **meta}},
            }
        )
        document = self.document
        ids = [str(ycell.get("id")) for ycell in document.ycells]
        at = ids.index(self._tail) if self._tail in ids else len(ids)
        with document.ydoc.transaction():
            for offset, cell in enumerate(cells):
                if cell["id"] in ids:  # a round that ran before (a retried reply): the run's view decides
                    continue
                document.ycells.insert(at + offset, document.create_ycell(cell))
                self._written[cell["id"]] = cell

    def finished(self, index: int, outputs: list[dict[str, Any]], execution_count: int | None) -> None:
        """Round ``index``'s code finished: its outputs (figures too) and count in its cell at once, before the
        run's notebook is written; ``sync`` then puts the run's version of the cell in place."""
        document = self.document
        for position, ycell in enumerate(document.ycells):
            if ycell.get("id") == f"round-{index}-code":
                cell = {
                    **self._written.get(f"round-{index}-code", {}),
                    "outputs": _plain(shown_outputs(outputs)),
                    "execution_count": execution_count,
                }
                if "source" in cell:
                    _update(document, position, cell)
                    self._written[cell["id"]] = cell
                return

    def output(self, index: int, text: str) -> None:
        """Append ``text`` (what round ``index``'s running code printed) to its code cell's output."""
        for ycell in self.document.ycells:
            if ycell.get("id") == f"round-{index}-code":
                outputs = ycell["outputs"]
                if len(outputs) == 0:
                    outputs.append(Map({"output_type": "stream", "name": "stdout", "text": Text(text)}))
                else:
                    shown = outputs[len(outputs) - 1]["text"]
                    shown.insert(len(shown), text)  # not +=: that sets the map's entry anew, emptied
                return


def _update(document: Any, index: int, cell: dict[str, Any]) -> None:
    """Make the document's cell at ``index`` equal ``cell`` in place, field by field (its source as a text edit,
    its outputs, count and metadata set anew), so the page updates that cell rather than building a new one
    (a new editor and output area per replaced cell is what kept a browser's main thread busy); a cell whose
    type or keys differ is replaced whole."""
    ycell = document.ycells[index]
    wanted = {key for key in cell if key != "execution_state" and (key != "attachments" or cell[key])}
    if ycell.get("cell_type") != cell["cell_type"] or set(ycell.keys()) - {"execution_state"} != wanted:
        document.set_cell(index, cell)
        return
    with document.ydoc.transaction():
        if str(ycell["source"]) != cell["source"]:
            document.set_cell(index, source=cell["source"])
        if "outputs" in cell and _plain(ycell["outputs"].to_py()) != cell["outputs"]:
            ycell["outputs"].clear()
            ycell["outputs"].extend([_youtput(output) for output in cell["outputs"]])
        if "execution_count" in cell and ycell.get("execution_count") != cell["execution_count"]:
            ycell["execution_count"] = cell["execution_count"]
        if _plain(ycell["metadata"].to_py()) != cell.get("metadata", {}):
            ycell["metadata"].clear()
            ycell["metadata"].update(cell.get("metadata", {}))


def _youtput(output: dict[str, Any]) -> Map[Any]:
    """An output as the document holds it (jupyter-ydoc's layout: a stream's text is a shared text)."""
    if output.get("output_type") == "stream":
        text = output.get("text", "")
        return Map({**output, "text": Text("".join(text) if isinstance(text, list) else text)})
    return Map(output)


def _plain(cell: Any) -> dict[str, Any]:
    """A cell as plain dicts and lists (the shared document's cells are built from them)."""
    plain: dict[str, Any] = json.loads(json.dumps(cell))
    return plain


async def _maybe_async(value: Any) -> Any:
    """Jupyter Server's contents managers are sync or async; await the async ones."""
    if hasattr(value, "__await__"):
        return await value
    return value
