"""Where jupyter-collaboration keeps its shared documents' updates: ``DataDirYStore``, in Jupyter's data dir.

jupyter-server-ydoc's default store is an SQLite file, ``.jupyter_ystore.db``, in the server's current
folder, which is usually the root the file browser lists. Its rollback journal (``-journal``) comes and
goes with each write, so a listing of the root could name the journal and then fail to ``stat`` it: the
file browser showed "Directory not found" and the server logged a 404. This store keeps the same SQLite
file in Jupyter's data dir instead (as jupyter-server-fileid keeps its ``file_id_manager.db``), where no
listing sees it.

This module is also a small Jupyter server extension, enabled by
``jupyter-config/jupyter_server_config.d/kernel_agent.json`` (installed with the package into
``etc/jupyter``; that folder's files are read for ``jpserver_extensions`` only, so a plain setting there
would be ignored). Extensions are linked in name order before any is loaded, so when this one is linked
jupyter-server-ydoc's app exists and has not made its handlers yet: where it still has the stock
``SQLiteYStore``, it gets ``DataDirYStore``. A user's own ``YDocExtension.ystore_class``, or
``SQLiteYStore.db_path`` (which applies to this subclass too), still wins. Imports jupyter-server-ydoc
(the ``jupyter`` extra). Loaded, it serves the operator's live sources to the server's own kernels
(``brokered.py``).
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_core.paths import jupyter_data_dir
from jupyter_server_ydoc.stores import SQLiteYStore
from traitlets import default

from ..errors import KernelAgentError

__all__ = ["STORE_FILE", "DataDirYStore", "store_path"]

STORE_FILE = "kernel_agent_ystore.db"
YDOC_EXTENSION = "jupyter_server_ydoc"  # its name in ``jpserver_extensions``


class DataDirYStore(SQLiteYStore):
    """jupyter-server-ydoc's SQLite store, its database in Jupyter's data dir rather than the server's cwd."""

    @default("db_path")
    def _db_path_default(self) -> str:
        return store_path()


def store_path() -> str:
    """The store's file in Jupyter's data dir (the dir made if missing)."""
    folder = jupyter_data_dir()
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, STORE_FILE)


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": __name__}]


def _link_jupyter_server_extension(serverapp: Any) -> None:
    """Give jupyter-server-ydoc's app (linked before this one) ``DataDirYStore`` where it has the stock store."""
    for app in serverapp.extension_manager.extension_apps.get(YDOC_EXTENSION, ()):
        if app.ystore_class is SQLiteYStore:
            app.ystore_class = DataDirYStore
            serverapp.log.info("kernel-agent: the collaboration store is %s", store_path())


def _load_jupyter_server_extension(serverapp: Any) -> None:
    """Open the operator's live sources for the server's kernels (``brokered.serve_sources``). A source that
    cannot be opened is logged, never raised: the server runs on."""
    from .brokered import serve_sources

    try:
        serverapp.kernel_agent_sources = serve_sources(serverapp)
    except KernelAgentError as exc:
        serverapp.log.error("kernel-agent: the data sources are not served: %s", exc)
