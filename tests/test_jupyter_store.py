"""The persona's shipped server configuration keeps jupyter-collaboration's store out of the root folder.

jupyter-server-ydoc's default store, ``.jupyter_ystore.db`` and its journal in the server's cwd (the root
the file browser lists), made a listing fail now and then with "Directory not found" (the journal went away
between the listing and its ``stat``). ``pip install 'kernel-agent[jupyter]'`` ships
``etc/jupyter/jupyter_server_config.d/kernel_agent.json``, which enables ``kernel_agent.jupyter.store`` as a
server extension; linked, it gives jupyter-server-ydoc ``DataDirYStore``: the same SQLite store in Jupyter's
data dir. ``test_jupyter_persona.py`` and the browser chat test check a real JupyterLab keeps it there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
from jupyter_core.paths import jupyter_config_path
from jupyter_server.extension.config import ExtensionConfigManager
from jupyter_server_ydoc.app import YDocExtension
from jupyter_server_ydoc.stores import TempFileYStore

from kernel_agent.jupyter import store
from kernel_agent.jupyter.store import STORE_FILE, DataDirYStore

REPO = Path(__file__).resolve().parent.parent
SHIPPED = "jupyter-config/jupyter_server_config.d/kernel_agent.json"
INSTALLED = "etc/jupyter/jupyter_server_config.d/kernel_agent.json"


def test_the_wheel_installs_the_server_configuration_and_this_environment_has_it() -> None:
    shared = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert shared["shared-data"][SHIPPED] == INSTALLED
    installed = Path(sys.prefix) / INSTALLED
    assert json.loads(installed.read_text()) == json.loads((REPO / SHIPPED).read_text())


def test_jupyter_servers_enable_the_extension_that_picks_the_data_dir_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))  # the user's own config stays out
    # what jupyter_server reads from every config path's jupyter_server_config.d at start
    enabled = ExtensionConfigManager(read_config_path=jupyter_config_path()).get_jpserver_extensions()
    assert enabled["kernel_agent.jupyter.store"] is True and enabled["jupyter_server_ydoc"] is True
    assert sorted(enabled).index("jupyter_server_ydoc") < sorted(enabled).index("kernel_agent.jupyter.store")
    assert store._jupyter_server_extension_points() == [{"module": "kernel_agent.jupyter.store"}]


class _Server:
    """What the link hook reads of a ``ServerApp``: its extensions' apps (linked in name order) and log."""

    def __init__(self, *apps: YDocExtension) -> None:
        self.extension_manager = SimpleNamespace(extension_apps={"jupyter_server_ydoc": set(apps)})
        self.log = logging.getLogger("test-server")


def test_linking_gives_the_collaboration_app_the_data_dir_store_unless_the_user_chose_one() -> None:
    stock, chosen = YDocExtension(), YDocExtension()
    chosen.ystore_class = TempFileYStore
    store._link_jupyter_server_extension(_Server(stock, chosen))
    assert stock.ystore_class is DataDirYStore and chosen.ystore_class is TempFileYStore


def test_the_store_and_its_journal_live_in_the_data_dir_not_the_root(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    root, data = tmp_path / "notebooks", tmp_path / "data"
    root.mkdir()
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(data))
    monkeypatch.chdir(root)  # the server's cwd: the default store landed here

    async def write() -> list[bytes]:
        store = DataDirYStore(path=".json:notebook:some-file-id.y")
        async with store:
            await store.write(b"an update")
            return [update async for update, *_ in store.read()]

    assert asyncio.run(write()) == [b"an update"]
    assert sorted(path.name for path in root.iterdir()) == []
    assert (data / STORE_FILE).is_file()
