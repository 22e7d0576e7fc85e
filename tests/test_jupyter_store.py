"""The persona's shipped server configuration keeps jupyter-collaboration's store out of the root folder.

jupyter-server-ydoc's default store, ``.jupyter_ystore.db`` and its journal in the server's cwd (the root
the file browser lists), made a listing fail now and then with "Directory not found" (the journal went away
between the listing and its ``stat``). ``pip install 'kernel-agent[jupyter]'`` ships
``etc/jupyter/jupyter_server_config.d/kernel_agent.json``, which names ``DataDirYStore``: the same SQLite
store in Jupyter's data dir. The browser chat test checks a real JupyterLab keeps it there.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tomllib
from pathlib import Path

import pytest
from jupyter_core.paths import jupyter_config_path
from traitlets.config.loader import Config, JSONFileConfigLoader
from traitlets.utils.importstring import import_item

from kernel_agent.jupyter.store import STORE_FILE, DataDirYStore

REPO = Path(__file__).resolve().parent.parent
SHIPPED = "jupyter-config/jupyter_server_config.d/kernel_agent.json"
INSTALLED = "etc/jupyter/jupyter_server_config.d/kernel_agent.json"


def test_the_wheel_installs_the_server_configuration_and_this_environment_has_it() -> None:
    shared = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert shared["shared-data"][SHIPPED] == INSTALLED
    installed = Path(sys.prefix) / INSTALLED
    assert json.loads(installed.read_text()) == json.loads((REPO / SHIPPED).read_text())


def test_jupyter_servers_read_it_and_use_the_data_dir_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "config"))  # the user's own config stays out
    config = Config()
    for folder in jupyter_config_path():  # what jupyter_server reads from each config path's conf.d
        for path in sorted((Path(folder) / "jupyter_server_config.d").glob("*.json")):
            config.merge(JSONFileConfigLoader(path.name, str(path.parent)).load_config())
    assert import_item(config.YDocExtension.ystore_class) is DataDirYStore


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
