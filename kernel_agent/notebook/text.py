"""A notebook's text exactly as nbformat writes it, cheap when saved again and again: ``NotebookText``.

Owns serialising a notebook as ``nbformat.v4.writes_json`` does (one-space indent, sorted keys,
multi-line strings split into lines, transient fields left out), reusing the text of every cell that
is unchanged since its previous call. A run's notebook is written after every round with a cell or
two new. nbformat's writer deep-copies the whole notebook and encodes it with Python's indenting
JSON encoder, which has no C speed-up, so each save cost time in proportion to the whole run. Here a
cell is recognised by its compact JSON (C-encoded, ~20x faster), and only new or changed cells take
the slow path. The caller's validator (``export.notebook_text`` passes nbformat's schema) is given
the notebook with only those cells: a cell already written was valid then and is the same now.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from .._nbformat import NotebookNode, nbformat

__all__ = ["NotebookText"]

_HEAD = '{\n "cells": [],'  # how nbformat's text of a notebook without cells begins ("cells" sorts first)


class NotebookText:
    """Serialises notebooks as ``nbformat.v4.writes_json``, remembering its last call's cells.

    One instance per notebook file being rewritten (a ``RunWriter`` holds one per view). Not
    thread-safe: one call at a time. Raises what ``json.dumps`` raises (``TypeError``, ``ValueError``)."""

    def __init__(self) -> None:
        self._cells: dict[str, str] = {}  # a cell's compact JSON -> its text in the file
        self._version: tuple[Any, Any] | None = None  # the nbformat version they were validated against

    def __repr__(self) -> str:
        return f"<NotebookText {len(self._cells)} cells remembered>"

    def __call__(self, nb: NotebookNode, validate: Callable[[NotebookNode], None] | None = None) -> str:
        """``nb``'s text; ``validate`` (raising for an invalid notebook) is called first, on ``nb`` with
        only the cells this has not written before (all of them, the first time)."""
        cells = nb.get("cells")
        if not isinstance(cells, list) or not cells:
            if validate is not None:
                validate(nb)
            return nbformat.v4.writes_json(nb)
        version = (nb.get("nbformat"), nb.get("nbformat_minor"))
        known = self._cells if version == self._version else {}
        keys = [json.dumps(cell, sort_keys=True, ensure_ascii=False, default=_ascii) for cell in cells]
        fresh = {key: cell for key, cell in zip(keys, cells, strict=True) if key not in known}
        if validate is not None:
            validate(NotebookNode({**nb, "cells": list(fresh.values())}))
        rest = nbformat.v4.writes_json(NotebookNode({**nb, "cells": []}))
        if not rest.startswith(_HEAD):  # not the layout this splices into: nbformat's own, whole
            return nbformat.v4.writes_json(nb)
        texts = {key: known[key] for key in keys if key in known}
        texts.update((key, _cell_text(cell)) for key, cell in fresh.items())
        self._cells, self._version = texts, version  # only this notebook's cells: what the next save can reuse
        return '{\n "cells": [\n  ' + ",\n  ".join(texts[key] for key in keys) + "\n ]," + rest[len(_HEAD) :]


def _cell_text(cell: Any) -> str:
    """One cell as nbformat writes it inside the ``cells`` list (two spaces deep)."""
    copied = copy.deepcopy(cell)
    nbformat.v4.rwbase.split_lines(NotebookNode({"cells": [copied]}))
    if isinstance(copied.get("metadata"), dict):
        copied["metadata"].pop("trusted", None)  # strip_transient's part for a cell
    text = json.dumps(
        copied,
        cls=nbformat.v4.nbjson.BytesEncoder,
        indent=1,
        sort_keys=True,
        separators=(",", ": "),
        ensure_ascii=False,
    )
    return text.replace("\n", "\n  ")  # JSON text holds no raw line break but its own


def _ascii(value: Any) -> Any:
    """What nbformat's encoder makes of a value JSON has no type for (bytes: ASCII text)."""
    if isinstance(value, bytes):
        return value.decode("ascii")
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
