"""Where the service's bytes live: uploads, thread workspaces and notebooks, as files under one folder.

Owns the layout of the data dir's blobs and every write or removal of them (``Blobs``); a shared
``--data-dir`` (a network filesystem) serves every replica. Another home for uploads and notebooks
(an object store) replaces this class, not its callers. No records, no database.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .private import private_folder
from .records import FileRecord

__all__ = ["NOTEBOOK", "Blobs"]

NOTEBOOK = "analysis.ipynb"  # a thread's notebook, in its folder beside the workspace


class Blobs:
    """Where the bytes live: uploads, notebooks and workspaces, as files under one (shared) folder.
    The one place that knows the layout and writes or removes the bytes (blocking calls: the store
    runs them in a thread), so another home for uploads and notebooks (an object store) replaces this
    class, not its callers. A workspace stays a folder: it is the kernel's working directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def make_layout(self) -> None:
        """The data dir and its folders, owner-only (``private.py``)."""
        for part in ("files", "threads", "tmp"):
            private_folder(self.root / part)

    def file_dir(self, file_id: str) -> Path:
        return self.root / "files" / file_id

    def file_content(self, record: FileRecord) -> Path:
        return self.file_dir(record.id) / record.filename

    def put_file(self, record: FileRecord, content: Path) -> None:
        """Move ``content`` (a temp file on the same disk) into place as ``record``'s bytes."""
        folder = self.file_dir(record.id)
        private_folder(folder.parent)
        folder.mkdir(mode=0o700)
        os.replace(content, folder / record.filename)

    def remove_file(self, file_id: str) -> None:
        shutil.rmtree(self.file_dir(file_id), ignore_errors=True)

    def prepare(self, thread_id: str, run_id: str) -> None:
        """Make a run's workspace before its kernel needs it."""
        private_folder(self.workspace(thread_id))

    def remove_thread(self, thread_id: str) -> None:
        """Remove the thread's workspace and notebooks."""
        shutil.rmtree(self.thread_dir(thread_id), ignore_errors=True)

    def thread_dir(self, thread_id: str) -> Path:
        return self.root / "threads" / thread_id

    def workspace(self, thread_id: str) -> Path:
        return self.thread_dir(thread_id) / "workspace"

    def notebook(self, thread_id: str) -> Path:
        return self.thread_dir(thread_id) / NOTEBOOK
