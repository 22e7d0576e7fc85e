"""Writing a run's notebooks while it grows: ``RunWriter``.

Owns *when* each view of a run in progress reaches the disk; ``export.py``
owns what the views contain and the atomic, validated write.

The full view is written before ``save`` returns, so every completed round
is in the file when the agent goes on. The clean view is written after every
round too, but in a worker thread while the next round starts (it would
otherwise sit on the run's critical path each round, and only a finished
run needs it). A finished run's save (``run.finished_at`` set: answered,
stopped, cancelled or failed) waits for that thread and writes both views
before it returns. A kill between rounds leaves both files complete (the
writes are atomic); the clean one is behind by a round only if the kill
lands during the few milliseconds its write takes.

Durability: a round's writes are atomic renames without fsync; the finished
run's save fsyncs both files and their folder. So a killed process (SIGKILL,
a crash, an OOM kill) loses nothing, as the OS still holds what it wrote; a
power cut or an OS crash mid-run may lose the rounds since the last fsync,
never tear a file. Two fsyncs a round cost 1–7 ms each on a loaded disk,
more than the rest of the save.

Each view has its ``NotebookText``: a save serialises and validates only the
cells that are new or changed since the last one (the text is nbformat's own).
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..records import Run
from .export import build_notebook, clean_path, export_run, write_notebook
from .text import NotebookText

__all__ = ["RunWriter"]

log = logging.getLogger(__name__)


_writers: ThreadPoolExecutor | None = None
_writers_made = threading.Lock()


def _background() -> ThreadPoolExecutor:
    """The worker threads every writer hands its clean views to, made on first use. Handing work to a
    waiting thread does not wait for a new thread to start, which under load took 5–45 ms a round.
    Their threads are not daemons: an interpreter that exits meanwhile lets a write finish."""
    global _writers
    with _writers_made:
        if _writers is None:
            _writers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="kernel-agent-clean-view")
        return _writers


class RunWriter:
    """Saves one run's ``RUN.ipynb`` and ``RUN.clean.ipynb`` at ``path`` after each round (see the module)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._pending: Future[None] | None = None
        self._texts = (NotebookText(), NotebookText())  # the full and clean views' serialisers

    def __repr__(self) -> str:
        return f"<RunWriter {self.path} writing={self._pending is not None}>"

    def save(self, run: Run) -> None:
        """Write ``run``: the full view now; the clean view now for a finished run, else in the background.

        Raises ``NotebookError`` when a view cannot be written, including the previous save's clean
        view (reported here, the first chance after it failed)."""
        self.flush()
        if run.finished_at:
            export_run(run, self.path, self._texts)
            return
        write_notebook(
            build_notebook(run, view="full", notebook_dir=self.path.parent),
            self.path,
            durable=False,
            text=self._texts[0],
        )
        self._pending = _background().submit(self._write_clean, run)

    def flush(self) -> None:
        """Wait for a clean view being written. Raises what that write raised (``NotebookError``)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _write_clean(self, run: Run) -> None:
        try:
            write_notebook(
                build_notebook(run, view="clean", notebook_dir=self.path.parent),
                clean_path(self.path),
                durable=False,
                text=self._texts[1],
            )
        except Exception as exc:  # raised by the next save, as a save in the foreground would have
            log.warning("could not write the clean notebook: %s", exc)
            raise
