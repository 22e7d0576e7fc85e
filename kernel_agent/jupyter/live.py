"""The open notebook's shared document on the server: ``LiveNotebook`` writes a run's cells into it.

Owns the agent's cells in one notebook as JupyterLab shows it: the notebook's YNotebook in
jupyter-server-ydoc's room (the document every browser tab on it edits), never the file, which
the room saves. ``sync`` makes the agent's cells equal the run's exported full view, read back
from the notebook the run writes after each round (``notebook/export.py`` lays them out: the
header, the setup cell, per round the reasoning and the code with its outputs, timed-out or
crashed code commented out and tagged, the answer last). Cells are matched by their stable ids
(``round-3-code``): a cell of ours is replaced only when the run's version of it changed since we
wrote it, so the user's edits to earlier cells stay; new cells go after our previous one; cells the
user added stay where they are. Does not run anything or talk to the chat (``persona.py``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import nbformat

from .._loop import in_thread
from ..errors import NotebookError
from ..notebook.export import KERNELSPEC

__all__ = ["LiveNotebook", "exported_cells"]

log = logging.getLogger(__name__)


def exported_cells(path: Path) -> list[dict[str, Any]]:
    """The cells of the run's full notebook at ``path`` (a host record, outside any workspace), as plain dicts.
    Raises ``NotebookError`` when it cannot be read."""
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError) as exc:
        raise NotebookError(f"cannot read the run's notebook: {exc}", path=str(path)) from exc
    return [_plain(cell) for cell in nb.cells]


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

    def __repr__(self) -> str:
        return f"<LiveNotebook {self.path} cells={len(self._written)}>"

    async def open(self) -> None:
        """Create the notebook when it does not exist, then join its shared document.
        Raises ``NotebookError`` when the server has no shared document for it."""
        if not await _maybe_async(self.contents.file_exists(self.path)):
            nb = nbformat.v4.new_notebook(metadata={"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}})
            await _maybe_async(self.contents.save({"type": "notebook", "format": "json", "content": nb}, self.path))
            self._created = True
        self.document = await self.ydoc.get_document(path=self.path, content_type="notebook", file_format="json",
                                                     copy=False, create=True)
        if self.document is None:
            raise NotebookError("the server has no shared document for the notebook", path=self.path)

    async def sync_from(self, record: Path) -> int:
        """``sync`` with the cells of the run's notebook at ``record``; the number of cells written."""
        return self.sync(await in_thread(exported_cells, record))

    def sync(self, cells: list[dict[str, Any]]) -> int:
        """Make the agent's cells in the document equal ``cells`` (see the module); the number written."""
        document = self.document
        if self._created and not self._written and document.cell_number == 1 and not str(document.ycells[0]["source"]):
            del document.ycells[0]  # the blank cell a new notebook is given: ours come first
        ids = [str(ycell.get("id")) for ycell in document.ycells]
        written = 0
        anchor: int | None = None
        with document.ydoc.transaction():
            for cell in cells:
                cell_id = cell["id"]
                if cell_id in ids:
                    index = ids.index(cell_id)
                    if self._written.get(cell_id) != cell:
                        document.set_cell(index, cell)
                        written += 1
                else:
                    index = len(ids) if anchor is None else anchor + 1
                    document.ycells.insert(index, document.create_ycell(cell))
                    ids.insert(index, cell_id)
                    written += 1
                self._written[cell_id] = cell
                anchor = index
        return written


def _plain(cell: Any) -> dict[str, Any]:
    """A cell as plain dicts and lists (the shared document's cells are built from them)."""
    return json.loads(json.dumps(cell))


async def _maybe_async(value: Any) -> Any:
    """Jupyter Server's contents managers are sync or async; await the async ones."""
    if hasattr(value, "__await__"):
        return await value
    return value
