"""A ``%%agent`` cell's recorded run, handed from ``replay`` to the magic in the replayed kernel.

The rule: a replay never asks a model and never starts a kernel of its own from a ``%%agent`` cell.
``replay`` sets ``REPLAY_ENV`` in the kernel it starts, naming a folder it wrote into the kernel's
folder (``HANDOVER_DIR``): ``cells.json`` holds each ``%%agent`` cell's recorded outputs, keyed by its
source. The notebook of the run a cell recorded is copied to the same relative path in the kernel's
folder as it had beside the notebook, when the replay found it there (the cell's last output names it:
``RUN_NOTEBOOK_KEY``, a claim, read only when a plain relative path under the notebook's folder, through
the door, and never over a file already staged). With ``REPLAY_ENV`` set, the magic shows the line
``REPLAYED_NOTE`` and then the recorded outputs (``shown_recorded``: made safe as every output the magic
shows), and leaves that run in ``_agent_run``. ``replay --check`` compares what it showed with
``shown_recorded`` of what was recorded, and reports the cell as ``recorded``, not ``match``: its run
was shown, not re-computed.

Owns the hand-over's names and format, and which cells are ``%%agent`` cells. Pure, but for
``read_handover`` (the magic's side, a bounded read of a file in its own folder). Everything read here
is hostile data: a notebook's outputs, shown only through ``safe.html``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..safe.html import Shown, safe_bundle

__all__ = [
    "CELLS_FILE",
    "HANDOVER_DIR",
    "METADATA_KEY",
    "NOTICE_KEY",
    "REPLAYED_NOTE",
    "REPLAY_ENV",
    "RUN_NOTEBOOK_KEY",
    "RecordedCell",
    "cell_key",
    "handover_bytes",
    "is_agent_cell",
    "is_notice",
    "magic_key",
    "read_handover",
    "run_claim",
    "shown_recorded",
]

REPLAY_ENV = "KERNEL_AGENT_REPLAY"
HANDOVER_DIR = ".kernel-agent-replay"
CELLS_FILE = "cells.json"
REPLAYED_NOTE = "replayed: this cell's recorded run, no model called"
METADATA_KEY = "kernel_agent"  # an output's metadata, as the notebook's (``export.METADATA_KEY``)
NOTICE_KEY = "replayed"  # ``{"kernel_agent": {"replayed": true}}``: the magic's notice in a replay
RUN_NOTEBOOK_KEY = "run_notebook"  # ``{"kernel_agent": {"run_notebook": PATH}}``: the link to the run's notebook
_MAGIC = "%%agent"
_MAX_HANDOVER_BYTES = 256 * 1024 * 1024
_STDERR = "application/vnd.jupyter.stderr"


@dataclass(frozen=True)
class RecordedCell:
    """One ``%%agent`` cell as recorded: its outputs, and its run's notebook when the replay staged it
    (``run_notebook``: its path relative to the kernel's folder, the hand-over folder's parent)."""

    outputs: tuple[dict[str, Any], ...]
    run_notebook: str | None = None


def is_agent_cell(source: str) -> bool:
    """True for a code cell whose first line is the ``%%agent`` cell magic."""
    first = source.lstrip("\n").split("\n", 1)[0]
    return first == _MAGIC or first.startswith((_MAGIC + " ", _MAGIC + "\t"))


def cell_key(source: str) -> str:
    """The key of a ``%%agent`` cell's source: its flags and its task, whitespace at their ends aside."""
    first, _, body = source.lstrip("\n").partition("\n")
    return magic_key(first[len(_MAGIC) :], body)


def magic_key(line: str, cell: str) -> str:
    """``cell_key`` of the cell IPython hands the magic as ``line`` (after ``%%agent``) and ``cell``."""
    return f"{line.strip()}\n{cell.strip()}"


def run_claim(outputs: Sequence[Mapping[str, Any]]) -> str | None:
    """The run notebook the recorded outputs' last link names (``RUN_NOTEBOOK_KEY``), or None. A claim."""
    for output in reversed(outputs):
        meta = output.get("metadata")
        ours = meta.get(METADATA_KEY) if isinstance(meta, Mapping) else None
        if isinstance(ours, Mapping) and isinstance(ours.get(RUN_NOTEBOOK_KEY), str):
            return str(ours[RUN_NOTEBOOK_KEY])
    return None


def is_notice(output: Mapping[str, Any]) -> bool:
    """True for the magic's ``REPLAYED_NOTE`` output."""
    meta = output.get("metadata")
    ours = meta.get(METADATA_KEY) if isinstance(meta, Mapping) else None
    return isinstance(ours, Mapping) and ours.get(NOTICE_KEY) is True


def shown_recorded(output: Mapping[str, Any]) -> Shown:
    """How the magic shows one recorded output in a replay: a display bundle made safe (``safe_bundle``),
    a stream as its text (stderr as Jupyter's stderr), an error as its traceback's text."""
    kind = output.get("output_type")
    if kind in ("display_data", "execute_result"):
        data, meta = output.get("data"), output.get("metadata")
        return safe_bundle(data if isinstance(data, Mapping) else {}, meta if isinstance(meta, Mapping) else None)
    if kind == "stream":
        text = _joined(output.get("text"))
        return Shown({_STDERR: text, "text/plain": text} if output.get("name") == "stderr" else {"text/plain": text})
    if kind == "error":
        lines = output.get("traceback")
        head = f"{output.get('ename')}: {output.get('evalue')}"
        text = "\n".join(map(str, lines)) if isinstance(lines, list) else head
        return Shown({_STDERR: text, "text/plain": text})
    return Shown({"text/plain": f"[output of type {kind!r} not shown]"})


def handover_bytes(cells: Mapping[str, RecordedCell]) -> bytes:
    """``cells.json``'s content."""
    payload = {key: {"outputs": list(cell.outputs), "run_notebook": cell.run_notebook} for key, cell in cells.items()}
    return json.dumps(payload).encode("utf-8")


def read_handover(environ: Mapping[str, str] | None = None) -> dict[str, RecordedCell] | None:
    """The recorded ``%%agent`` cells when this process is a replay's kernel (``REPLAY_ENV`` set), else None.

    A folder that cannot be read, or holds something else than ``handover_bytes`` wrote, gives no cells:
    the magic still never calls a model there. Raises nothing."""
    folder = (os.environ if environ is None else environ).get(REPLAY_ENV)
    if not folder:
        return None
    try:
        with open(Path(folder) / CELLS_FILE, "rb") as file:
            raw = json.loads(file.read(_MAX_HANDOVER_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    cells: dict[str, RecordedCell] = {}
    for key, entry in raw.items() if isinstance(raw, dict) else ():
        if not isinstance(entry, dict) or not isinstance(entry.get("outputs"), list):
            continue
        outputs = tuple(out for out in entry["outputs"] if isinstance(out, dict))
        notebook = entry.get("run_notebook")
        cells[str(key)] = RecordedCell(outputs, notebook if isinstance(notebook, str) else None)
    return cells


def _joined(value: Any) -> str:
    return "".join(map(str, value)) if isinstance(value, list) else str(value or "")
