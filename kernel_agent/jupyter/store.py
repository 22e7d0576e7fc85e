"""Where jupyter-collaboration keeps its shared documents' updates: ``DataDirYStore``, in Jupyter's data dir.

jupyter-server-ydoc's default store is an SQLite file, ``.jupyter_ystore.db``, in the server's current
folder, which is usually the root the file browser lists. Its rollback journal (``-journal``) comes and
goes with each write, so a listing of the root could name the journal and then fail to ``stat`` it: the
file browser showed "Directory not found" and the server logged a 404. This store keeps the same SQLite
file in Jupyter's data dir instead (as jupyter-server-fileid keeps its ``file_id_manager.db``), where no
listing sees it. ``jupyter-config/jupyter_server_config.d/kernel_agent.json``, installed with the package,
names it as ``YDocExtension.ystore_class``; a ``SQLiteYStore.db_path`` or ``DataDirYStore.db_path`` in
the user's own config still wins. Imports jupyter-server-ydoc (the ``jupyter`` extra); nothing else of ours.
"""

from __future__ import annotations

import os

from jupyter_core.paths import jupyter_data_dir
from jupyter_server_ydoc.stores import SQLiteYStore
from traitlets import default

__all__ = ["STORE_FILE", "DataDirYStore"]

STORE_FILE = "kernel_agent_ystore.db"


class DataDirYStore(SQLiteYStore):
    """jupyter-server-ydoc's SQLite store, its database in Jupyter's data dir rather than the server's cwd."""

    @default("db_path")
    def _db_path_default(self) -> str:
        folder = jupyter_data_dir()
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, STORE_FILE)
