"""A ``%%agent`` cell in a replayed notebook: its recorded run shown, no model asked, no kernel started.

``kernel-agent replay`` sets ``notebook.recorded.REPLAY_ENV`` in the kernel it starts (``recorded.py``
says what it hands over). There the magic calls ``show_recorded`` instead of running: one line,
``REPLAYED_NOTE``, then the outputs the cell recorded, each made safe as every output the magic shows;
``_agent_run`` is the run the cell recorded when the replay found that run's notebook, else None. A
cell the replay has no record of fails with a ``UsageError`` saying so: never a model call.
"""

from __future__ import annotations

from pathlib import Path

from IPython.core.error import UsageError

from ..notebook.recorded import (
    REPLAY_ENV,
    REPLAYED_NOTE,
    RecordedCell,
    magic_key,
    shown_recorded,
)
from ..records import Run
from .view import CellView

__all__ = ["show_recorded"]


def show_recorded(cells: dict[str, RecordedCell], folder: str, line: str, cell: str) -> Run | None:
    """Show the recorded run of the cell (``line``, ``cell``) from the hand-over ``folder``; return its ``Run``
    (None when its notebook was not handed over). Raises ``UsageError`` when no run was recorded for it."""
    recorded = cells.get(magic_key(line, cell))
    if recorded is None:
        raise UsageError(
            f"{REPLAY_ENV} is set (a replay) but no recorded run of this %%agent cell was handed over: "
            "a replay never calls a model, so there is nothing to show"
        )
    run = _recorded_run(folder, recorded)
    note = REPLAYED_NOTE
    if run is None:
        note += " (its run's notebook was not found beside the notebook, so `_agent_run` is None)"
    CellView().replayed(note, [shown_recorded(output) for output in recorded.outputs])
    return run


def _recorded_run(folder: str, recorded: RecordedCell) -> Run | None:
    if recorded.run_notebook is None:
        return None
    from ..errors import KernelAgentError
    from ..notebook.load import load_run

    try:  # the kernel's folder holds the hand-over folder; a path below it, as the cell's link had it
        return load_run(Path(folder).parent / recorded.run_notebook).run
    except KernelAgentError:
        return None
